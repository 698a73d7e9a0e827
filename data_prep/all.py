"""Build every eval and training parquet: fetched from the hub with ``datasets`` (no ``--raw-dir``), or from
the raw downloads found under ``--raw-dir``.

Without ``--raw-dir`` each set is fetched (``data_prep/hub.py``: packaged ``json``/``parquet`` builders on the
hub files, no loading script) into ``--cache-dir`` (default ``OUT/raw``) in the layout below, then built from
there by the same readers and row checks as a manual download; a set that cannot be fetched is named with
the manual command, and the command exits 2 after building the others.

    python -m data_prep.all --out-dir ~/data/ibpo                        # fetch and build everything

Expected layout: one folder per hub dataset id, as ``huggingface-cli download <id> --repo-type dataset
--local-dir RAW/<id>`` creates it. For each set the first folder found is used:

  aime25.parquet          RAW/math-ai/aime25 | opencompass/AIME2025 | MathArena/aime_2025 | yentinglin/aime_2025
  hmmt_feb_2025.parquet   RAW/MathArena/hmmt_feb_2025
  lcb_v6.parquet          RAW/livecodebench/code_generation_lite | lighteval/code_generation_lite  (eval window)
  lcb_train.parquet       the same download, problems dated before the window (checked disjoint from lcb_v6)
  dapo_math_17k.parquet   RAW/BytedTsinghua-SIA/DAPO-Math-17k | open-r1/DAPO-Math-17k-Processed
  gsm8k_train.parquet     RAW/openai/gsm8k (main config), and gsm8k_test.parquet

    python -m data_prep.all --raw-dir ~/data/raw --out-dir ~/data/ibpo   # from manual downloads
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from data_prep import aime25, dapo_math, gsm8k, hmmt25, livecodebench
from data_prep.hub import HUB_ROOT, fetch_all
from data_prep.common import MATH_EXTRA_INFO, PrepError, PrepSummary, write_verl_parquet
from data_prep.templates import CODE_PROMPT_STYLES, MATH_TEMPLATES

AIME_DIRS = ("math-ai/aime25", "opencompass/AIME2025", "MathArena/aime_2025", "yentinglin/aime_2025")
HMMT_DIRS = ("MathArena/hmmt_feb_2025",)
LCB_DIRS = ("livecodebench/code_generation_lite", "lighteval/code_generation_lite")
DAPO_DIRS = ("BytedTsinghua-SIA/DAPO-Math-17k", "open-r1/DAPO-Math-17k-Processed")
GSM8K_DIRS = ("openai/gsm8k",)


def first_existing(raw_dir: Path, candidates: tuple[str, ...]) -> Path | None:
    """The first ``raw_dir/<candidate>`` folder that exists."""
    for name in candidates:
        if (raw_dir / name).is_dir():
            return raw_dir / name
    return None


def build_all(
    raw_dir: str | Path,
    out_dir: str | Path,
    template: str = "boxed",
    prompt_style: str = "chat",
    skip_invalid: bool = False,
    allow_partial: bool = False,
    start: str = livecodebench.DEFAULT_START,
    end: str = livecodebench.DEFAULT_END,
) -> tuple[list[PrepSummary], list[str]]:
    """Prepare every set found; returns the run summaries and the names of the sets not found."""
    raw, out = Path(raw_dir), Path(out_dir)
    if not raw.is_dir():
        raise FileNotFoundError(f"{raw}: raw data folder not found")
    livecodebench.eval_window("eval", start, end)  # a bad --start/--end stops the run before any file is written
    summaries: list[PrepSummary] = []
    missing: list[str] = []

    def math_set(name: str, dirs: tuple[str, ...], prepare, out_name: str, **kwargs) -> None:
        source = first_existing(raw, dirs)
        if source is None:
            missing.append(f"{name} (looked for {', '.join(dirs)})")
            return
        rows, summary = prepare(source, template=template, skip_invalid=skip_invalid, **kwargs)
        summary.output = str(write_verl_parquet(rows, out / out_name, MATH_EXTRA_INFO))
        summary.facts["raw folder"] = str(source)
        summaries.append(summary)

    math_set("aime25", AIME_DIRS, aime25.prepare_aime25, "aime25.parquet", allow_partial=allow_partial)
    math_set("hmmt_feb_2025", HMMT_DIRS, hmmt25.prepare_hmmt25, "hmmt_feb_2025.parquet", allow_partial=allow_partial)

    lcb = first_existing(raw, LCB_DIRS)
    if lcb is None:
        missing.append(f"livecodebench (looked for {', '.join(LCB_DIRS)})")
    else:
        common = dict(start=start, end=end, skip_invalid=skip_invalid, prompt_style=prompt_style)
        eval_path = out / "lcb_v6.parquet"
        summaries.append(livecodebench.prepare_livecodebench([lcb], eval_path, split="eval", **common))
        summaries.append(
            livecodebench.prepare_livecodebench(
                [lcb], out / "lcb_train.parquet", split="train", check_disjoint=[eval_path], **common
            )
        )

    math_set("dapo_math_17k", DAPO_DIRS, dapo_math.prepare_dapo_math, "dapo_math_17k.parquet")
    math_set("gsm8k train", GSM8K_DIRS, gsm8k.prepare_gsm8k, "gsm8k_train.parquet", split="train")
    math_set("gsm8k test", GSM8K_DIRS, gsm8k.prepare_gsm8k, "gsm8k_test.parquet", split="test")
    if not summaries:
        raise FileNotFoundError(f"{raw}: none of the known dataset folders found; missing: {'; '.join(missing)}")
    return summaries, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m data_prep.all", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--raw-dir", default=None,
                        help="folder holding manual hub downloads (RAW/<owner>/<name>); omitted: fetch from the hub")
    parser.add_argument("--out-dir", required=True, help="folder for the prepared parquet files")
    parser.add_argument("--cache-dir", default=None, help="where fetched raw files go (default OUT/raw)")
    parser.add_argument("--hub-root", default=HUB_ROOT,
                        help="where datasets are fetched from: the hub (default) or a local folder laid out as "
                             "ROOT/<owner>/<name>/<files> (offline mirrors, tests)")
    parser.add_argument("--template", choices=MATH_TEMPLATES, default="boxed", help="math prompt template")
    parser.add_argument("--prompt-style", choices=CODE_PROMPT_STYLES, default="chat", help="code prompt style")
    parser.add_argument("--start", default=livecodebench.DEFAULT_START, help="LCB eval window start (inclusive)")
    parser.add_argument("--end", default=livecodebench.DEFAULT_END, help="LCB eval window end (exclusive)")
    parser.add_argument("--skip-invalid", action="store_true", help="skip and count malformed rows")
    parser.add_argument("--allow-partial", action="store_true", help="accept AIME/HMMT with fewer than 30 rows")
    args = parser.parse_args(argv)
    try:  # before fetching anything
        livecodebench.eval_window("eval", args.start, args.end)
    except PrepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    failures: list[str] = []
    raw_dir = args.raw_dir
    if raw_dir is None:
        raw_dir = args.cache_dir or str(Path(args.out_dir) / "raw")
        print(f"fetching the raw datasets from {args.hub_root} into {raw_dir} (pass --raw-dir to use your own)")
        _, failures = fetch_all(raw_dir, args.hub_root)
        for failure in failures:
            print(f"error: {failure}", file=sys.stderr)
    try:
        summaries, missing = build_all(
            raw_dir, args.out_dir, args.template, args.prompt_style, args.skip_invalid,
            args.allow_partial, args.start, args.end,
        )  # fmt: skip
    except (PrepError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for summary in summaries:
        print(summary.format())
    print(f"built {len(summaries)} file(s) in {args.out_dir}")
    for name in missing:
        print(f"not found: {name}")
    return 2 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
