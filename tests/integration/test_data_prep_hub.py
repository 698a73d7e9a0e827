"""``python -m data_prep.all --out-dir DIR`` without ``--raw-dir`` fetches each set with ``datasets`` and builds it
through the same readers and row checks as a manual download. Tested offline: the same code is pointed at a
local folder laid out like the hub (``--hub-root``), filled from the data_prep fixtures."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from data_prep import all as prep_all
from data_prep.common import read_verl_parquet
from data_prep.hub import HUB_SETS

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "data_prep"
# hub repo -> the fixture folder holding that repo's files, in the hub's layout
LOCAL_REPOS = {
    "math-ai/aime25": FIXTURES / "raw" / "math-ai" / "aime25",
    "MathArena/hmmt_feb_2025": FIXTURES / "raw" / "MathArena" / "hmmt_feb_2025",
    "lighteval/code_generation_lite": FIXTURES / "raw_parquet" / "livecodebench" / "code_generation_lite",
    "BytedTsinghua-SIA/DAPO-Math-17k": FIXTURES / "raw" / "BytedTsinghua-SIA" / "DAPO-Math-17k",
    "openai/gsm8k": FIXTURES / "raw" / "openai" / "gsm8k",
}
OUTPUTS = ["aime25.parquet", "hmmt_feb_2025.parquet", "lcb_v6.parquet", "lcb_train.parquet", "dapo_math_17k.parquet",
           "gsm8k_train.parquet", "gsm8k_test.parquet"]


def local_hub(root: Path, skip: tuple[str, ...] = ()) -> Path:
    for repo, folder in LOCAL_REPOS.items():
        if repo not in skip:
            shutil.copytree(folder, root / repo)
    return root


def rows_without_source(path: Path) -> list[dict]:
    """Prepared rows minus the field recording which raw file they came from (the fetched copy's path)."""
    rows = read_verl_parquet(path)
    for row in rows:
        row["extra_info"].pop("source", None)
    return rows


def test_every_hub_set_has_a_local_fixture():
    assert {s.repo for s in HUB_SETS} == set(LOCAL_REPOS)


def test_fetching_builds_the_same_rows_as_the_manual_path(tmp_path, capsys):
    hub = local_hub(tmp_path / "hub")
    out = tmp_path / "fetched"
    assert prep_all.main(["--out-dir", str(out), "--hub-root", str(hub), "--allow-partial"]) == 0
    assert "fetching the raw datasets from" in capsys.readouterr().out
    assert sorted(p.name for p in out.glob("*.parquet")) == sorted(OUTPUTS)
    # the manual path over the very files the fetched ones were read from
    manual_raw = tmp_path / "manual_raw"
    for repo, folder in LOCAL_REPOS.items():
        shutil.copytree(folder, manual_raw / repo)
    manual = tmp_path / "manual"
    assert prep_all.main(["--raw-dir", str(manual_raw), "--out-dir", str(manual), "--allow-partial"]) == 0
    for name in OUTPUTS:
        fetched_rows = rows_without_source(out / name)
        assert fetched_rows and fetched_rows == rows_without_source(manual / name), name
    # the fetched raw files sit in the manual layout, under OUT/raw
    assert (out / "raw" / "math-ai" / "aime25" / "test.jsonl").is_file()


def test_a_failed_download_names_the_dataset_and_the_manual_path(tmp_path, capsys):
    hub = local_hub(tmp_path / "hub", skip=("openai/gsm8k",))
    out = tmp_path / "out"
    assert prep_all.main(["--out-dir", str(out), "--hub-root", str(hub), "--allow-partial"]) == 2
    err = capsys.readouterr().err
    assert "gsm8k train: could not fetch" in err and "gsm8k test: could not fetch" in err
    assert "huggingface-cli download openai/gsm8k --repo-type dataset" in err and "--raw-dir" in err
    built = sorted(p.name for p in out.glob("*.parquet"))
    assert built == sorted(n for n in OUTPUTS if not n.startswith("gsm8k"))


def test_fetched_rows_go_through_the_row_checks(tmp_path, capsys):
    hub = local_hub(tmp_path / "hub", skip=("math-ai/aime25",))
    (hub / "math-ai" / "aime25").mkdir(parents=True)
    shutil.copy(FIXTURES / "malformed" / "aime" / "answer_not_integer.jsonl", hub / "math-ai" / "aime25" / "test.jsonl")
    assert prep_all.main(["--out-dir", str(tmp_path / "out"), "--hub-root", str(hub), "--allow-partial"]) == 2
    assert "row 2, field 'answer': AIME answers are integers 0..999, got '5/2'" in capsys.readouterr().err
