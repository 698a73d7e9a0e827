"""The committed warm starts are the ones the published tables used: each folder's sha256 (over its sorted files,
``lab.analysis.toy_loop.sha256_of_dir``, the value every run's meta.json and the per-run CSVs record) is quoted in
docs/evidence.md and found in the per-run CSVs (``docs/assets/*_runs.csv``) of the runs that started from it."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from lab.analysis.toy_loop import sha256_of_dir

ROOT = Path(__file__).resolve().parents[3]
WARM_STARTS = sorted(p for p in (ROOT / "lab" / "toy_tasks" / "warm_starts").iterdir() if (p / "config.json").is_file())


def test_the_accepted_draws_are_committed():
    # five per task: three_sum_named's draws 3, 5, 6 (2d) and 8 (2e) failed the acceptance rule
    assert [p.name for p in WARM_STARTS] == ["addition_seed0", "addition_seed2", "addition_seed3", "addition_seed5",
                                             "addition_seed6", "three_sum_named_seed0", "three_sum_named_seed1",
                                             "three_sum_named_seed2", "three_sum_named_seed4", "three_sum_named_seed7"]


@pytest.mark.parametrize("folder", WARM_STARTS, ids=lambda p: p.name)
def test_each_warm_start_is_the_one_the_tables_used(folder):
    digest = sha256_of_dir(folder)
    assert f"`{digest[:8]}" in (ROOT / "docs" / "evidence.md").read_text(encoding="utf-8")
    used = set()
    for table in (ROOT / "docs" / "assets").glob("*_runs.csv"):
        with open(table, encoding="utf-8") as fh:
            used |= {row.get("warm_start_sha256") for row in csv.DictReader(fh)}  # not every table has it
    assert digest in used
