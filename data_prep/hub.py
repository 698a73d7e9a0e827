"""Fetch the raw datasets from the Hugging Face hub with ``datasets`` (the convention of verl's own preprocess
scripts), into the folder layout ``data_prep.all --raw-dir`` reads, so the fetched rows go through exactly the
row checks of the manual path.

Each set is read with a packaged ``datasets`` builder (``json`` / ``parquet``) from its files on the hub,
``hf://datasets/<id>/<files>``: no dataset loading script runs (LiveCodeBench's no longer runs on
``datasets>=4``), and the same code reads a local folder laid out like the hub (``--hub-root DIR``:
``DIR/<id>/<files>``), which is how the tests exercise it offline. The rows are written back under
``RAW/<id>/`` in the file layout the readers know.

A set that cannot be fetched is reported with its dataset id and the manual alternative (download it with
``huggingface-cli`` into ``RAW/<id>`` and pass ``--raw-dir RAW``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HUB_ROOT = "hf://datasets"


@dataclass(frozen=True)
class HubSet:
    """One hub download: ``files`` (a glob inside the dataset repo ``repo``) read with ``builder``, written
    to ``RAW/<repo>/<write_to>`` (a ``.jsonl`` or ``.parquet`` file the data_prep readers accept)."""

    name: str
    repo: str
    files: str
    builder: str  # json | parquet
    write_to: str

    def source(self, hub_root: str) -> str:
        return f"{hub_root.rstrip('/')}/{self.repo}/{self.files}"

    def manual_command(self, raw_dir: str) -> str:
        return (f"huggingface-cli download {self.repo} --repo-type dataset --local-dir {raw_dir}/{self.repo}, "
                f"then python -m data_prep.all --raw-dir {raw_dir} --out-dir OUT")


# One source per output set (data_prep/all.py lists the alternatives the manual path also accepts).
HUB_SETS: tuple[HubSet, ...] = (
    HubSet("aime25", "math-ai/aime25", "test.jsonl", "json", "test.jsonl"),
    HubSet("hmmt_feb_2025", "MathArena/hmmt_feb_2025", "data/train-*.parquet", "parquet",
           "data/train-00000-of-00001.parquet"),
    # the parquet conversion of LiveCodeBench (release_v6: every problem up to v6; the eval window is cut later)
    HubSet("livecodebench", "lighteval/code_generation_lite", "release_v6/test-*.parquet", "parquet",
           "release_v6/test-00000-of-00001.parquet"),
    HubSet("dapo_math_17k", "BytedTsinghua-SIA/DAPO-Math-17k", "data/dapo-math-17k.parquet", "parquet",
           "data/dapo-math-17k.parquet"),
    HubSet("gsm8k train", "openai/gsm8k", "main/train-*.parquet", "parquet", "main/train-00000-of-00001.parquet"),
    HubSet("gsm8k test", "openai/gsm8k", "main/test-*.parquet", "parquet", "main/test-00000-of-00001.parquet"),
)


class HubFetchError(RuntimeError):
    """A dataset could not be fetched; the message names it and the manual download."""


def fetch_set(hub_set: HubSet, raw_dir: str | Path, hub_root: str = HUB_ROOT) -> Path:
    """Read ``hub_set`` with ``datasets`` from ``hub_root`` and write it under ``raw_dir``; returns the file."""
    import datasets

    target = Path(raw_dir) / hub_set.repo / hub_set.write_to
    try:
        ds = datasets.load_dataset(hub_set.builder, data_files=hub_set.source(hub_root), split="train")
    except Exception as exc:  # network, auth, a moved file: all end in the same advice
        raise HubFetchError(
            f"{hub_set.name}: could not fetch {hub_set.source(hub_root)} ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:300]}). Download it by hand: {hub_set.manual_command(str(raw_dir))}"
        ) from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.suffix == ".jsonl":
        ds.to_json(str(target), lines=True, force_ascii=False)
    else:
        ds.to_parquet(str(target))
    return target


def fetch_all(raw_dir: str | Path, hub_root: str = HUB_ROOT,
              sets: tuple[HubSet, ...] = HUB_SETS) -> tuple[list[Path], list[str]]:
    """Fetch every set into ``raw_dir`` (skipping one whose file is already there); returns the files and
    the error message of each set that failed (the others are still fetched)."""
    written, failures = [], []
    Path(raw_dir).mkdir(parents=True, exist_ok=True)
    for hub_set in sets:
        target = Path(raw_dir) / hub_set.repo / hub_set.write_to
        if target.is_file():
            written.append(target)
            continue
        try:
            written.append(fetch_set(hub_set, raw_dir, hub_root))
        except HubFetchError as exc:
            failures.append(str(exc))
    return written, failures
