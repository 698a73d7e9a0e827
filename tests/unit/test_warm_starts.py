"""The committed warm starts are the ones the published tables used: each folder's sha256 (over its sorted files,
``analysis.toy_loop.sha256_of_dir``, the value every run's meta.json and the per-run CSVs record) is quoted in
docs/evidence.md and found in the CSVs of the runs that started from it."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from analysis.toy_loop import sha256_of_dir

ROOT = Path(__file__).resolve().parents[2]
WARM_STARTS = sorted(p for p in (ROOT / "toy_task" / "warm_starts").iterdir() if (p / "config.json").is_file())


def test_there_are_three_per_task():
    assert [p.name for p in WARM_STARTS] == ["addition_seed0", "addition_seed2", "addition_seed3",
                                             "three_sum_named_seed0", "three_sum_named_seed1", "three_sum_named_seed2"]


@pytest.mark.parametrize("folder", WARM_STARTS, ids=lambda p: p.name)
def test_each_warm_start_is_the_one_the_tables_used(folder):
    digest = sha256_of_dir(folder)
    assert f"`{digest[:8]}" in (ROOT / "docs" / "evidence.md").read_text(encoding="utf-8")
    used = set()
    for table in (ROOT / "docs" / "assets").glob("ablation*_runs.csv"):
        with open(table, encoding="utf-8") as fh:
            used |= {row["warm_start_sha256"] for row in csv.DictReader(fh)}
    assert digest in used
