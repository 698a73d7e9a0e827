#!/usr/bin/env python
"""CPU proxy of lookup (ngram) speculation and of the length bound on the correction pass: tables for
docs/correction_pass.md.

    python lab/scripts/bench_correction_lookup.py --toy-run outputs/toy_lookup --steps 8   # train the toy, dump, report
    python lab/scripts/bench_correction_lookup.py --dump outputs/toy_lookup/rollouts       # report on an existing dump
    python lab/scripts/bench_correction_lookup.py --dump DIR --lengths 2048 8192 32768     # + synthetic lengths

Real corrections: ``--toy-run`` trains IBPO on the CPU toy (``lab.toy_tasks``: warm-started tiny model, four-digit
addition; ``python -m lab.toy_tasks.warm_start`` builds the assets once, under ``<out>/assets``) through verl's real
trainer with ``trainer.rollout_data_dir`` set, so every step's corrections are dumped
(``recipe/ibpo/correction/batch.dump_corrections``). Synthetic corrections at L tokens: the toy's measured edit
profile applied to Zipf-text targets in real correction prompts (``lab/analysis/correction_lookup.py``).
Every replay is vLLM's ngram rule token by token on the realised corrections (``ibpo/lookup_decoding.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from option_types.cli import float_in, nonnegative_int, positive_float, positive_int  # noqa: E402

from lab.analysis.correction_lookup import (  # noqa: E402
    EditProfile, bound_cuts, edit_profile, load_dump, replay, synthetic_corrections)
from ibpo.lookup_decoding import NgramParams  # noqa: E402

DEFAULT_SETTINGS = ["1:3:4", "2:5:8", "3:5:8", "2:5:16", "2:8:16"]


def parse_setting(text: str) -> NgramParams:
    """``min:max:k`` -> NgramParams."""
    try:
        lo, hi, k = (int(x) for x in text.split(":"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--settings entry {text!r} is not min:max:k") from exc
    return NgramParams(lo, hi, k)


def run_toy(out: Path, steps: int, seed: int, timeout_s: float, extra: list[str] = ()) -> Path:
    """Train IBPO on the CPU toy for ``steps`` steps with the corrections dumped; returns the dump dir."""
    from recipe.ibpo.quickstart import ibpo_overrides
    from verl_cpu.launch import cpu_env, cpu_overrides, process_env, run_with_timeout

    out = out.resolve()  # the run starts in `out`: every path it is given must be absolute
    out.mkdir(parents=True, exist_ok=True)
    stamp = out / "assets" / "assets.json"
    if not stamp.exists():
        from lab.toy_tasks.warm_start import build_toy_assets

        print(f"[lookup] building the toy assets in {stamp.parent} ...", flush=True)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps(build_toy_assets(stamp.parent), indent=1))
    assets = json.loads(stamp.read_text())
    dump = out / "rollouts"
    cmd = [sys.executable, "-m", "recipe.main", "method=ibpo",
           *cpu_overrides(assets["model"], assets["train"], assets["val"], total_training_steps=steps,
                          train_batch_size=8, rollout_n=4, max_prompt_length=64, max_response_length=96),
           f"trainer.default_local_dir={out / 'checkpoints'}", "trainer.val_before_train=False",
           "trainer.test_freq=-1", "trainer.save_freq=-1", f"trainer.rollout_data_dir={dump}",
           "++actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
           *ibpo_overrides("binary", joint_training=False, baseline=False),
           "actor_rollout_ref.actor.optim.lr=3e-4", "actor_rollout_ref.actor.optim.lr_warmup_steps=5",
           f"data.seed={seed}", f"actor_rollout_ref.rollout.seed={seed}", f"ibpo.seed={seed}",
           "trainer.experiment_name=toy_lookup", *extra]
    env = process_env(os.environ, {**cpu_env(metrics_path=out / "metrics.jsonl"), "OMP_NUM_THREADS": "1",
                                   "MKL_NUM_THREADS": "1"})
    print(f"[lookup] training the toy for {steps} steps (log {out / 'train.log'}) ...", flush=True)
    result = run_with_timeout(cmd, env, timeout_s=timeout_s, log_path=out / "train.log", cwd=out)
    if result.returncode != 0:
        print(result.log_tail(3000), file=sys.stderr)
        raise SystemExit(f"toy run failed ({'timed out' if result.timed_out else result.returncode})")
    return dump


def lookup_table(rows: list[dict]) -> str:
    lines = ["| corrections | setting (min:max:k) | n | mean tokens | accepted / draft step | acceptance | "
             "tokens / decode step | decode steps saved | slowest request's steps saved |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['source']} | {r['setting']} | {r['corrections']} | {r['mean_tokens']:,.0f} | "
                     f"{r['accepted_per_draft_step']:.2f} | {100 * r['acceptance_rate']:.0f}% | "
                     f"{r['tokens_per_decode_step']:.2f} | {100 * r['decode_step_reduction']:.1f}% | "
                     f"{100 * r['batch_decode_step_reduction']:.1f}% |")
    return "\n".join(lines)


def bound_table(rows: list[dict]) -> str:
    lines = ["| c | closing tokens | correction tokens cut | corrections cut | right cut | shaped cut |",
             "|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['factor']:g} | {r['closing_tokens']} | {100 * r['tokens_cut_frac']:.2f}% | "
                     f"{r['corrections_cut']} / {r['corrections']} | {r['right_cut']} / {r['right']} | "
                     f"{r['shaped_cut']} / {r['shaped']} |")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--toy-run", type=Path, default=None, help="train the toy here and use its corrections")
    p.add_argument("--steps", type=positive_int, default=8)
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--timeout", type=positive_float, default=3600.0)
    p.add_argument("--override", nargs="*", default=[], help="more Hydra overrides for --toy-run")
    p.add_argument("--dump", type=Path, default=None, help="rollout_data_dir of an earlier run")
    p.add_argument("--settings", nargs="+", type=parse_setting, default=[parse_setting(s) for s in DEFAULT_SETTINGS])
    p.add_argument("--lengths", type=positive_int, nargs="*", default=[], help="synthetic corrections at these L")
    p.add_argument("--prompts", type=positive_int, default=2, help="synthetic: prompts (G = 8, 2 right: 6 corrections each)")
    p.add_argument("--layout", default="target_first", choices=["target_first", "target_first+shuffle",
                   "target_first+per_group", "reference_first", "reference_first+per_group"],
                   help="synthetic: the correction prompts' layout (lab.analysis.correction_workload.LAYOUTS)")
    p.add_argument("--kept-fraction", type=float_in(0.0, 1.0, low_open=True), default=None,
                   help="synthetic: override the measured share of target tokens a correction keeps")
    p.add_argument("--edit-run", type=positive_float, default=None,
                   help="synthetic: override the measured mean length of an edited run (target tokens)")
    p.add_argument("--factors", type=positive_float, nargs="+", default=[1.0, 1.25, 1.5, 2.0, 3.0])
    p.add_argument("--closing", type=nonnegative_int, nargs="+", default=[0, 16, 64])
    p.add_argument("--response-length", type=positive_int, default=96, help="the run's max_response_length (bound cap)")
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    dump = run_toy(args.toy_run, args.steps, args.seed, args.timeout, args.override) if args.toy_run else args.dump
    rows, bound_rows, profile = [], [], None
    if dump is not None:
        records = load_dump(dump)
        steps = len({r.step for r in records})
        print(f"[lookup] {len(records)} toy corrections from {steps} steps "
              f"({sum(r.correct for r in records)} right, {sum(r.shaped for r in records)} shaped)", flush=True)
        right = [r for r in records if r.correct]
        profile = edit_profile((r.target_ids, r.correction_ids) for r in (right or records))
        print(f"[lookup] edit profile of the {'right' if right else 'all'} corrections: {profile}", flush=True)
        for params in args.settings:
            for name, subset in (("toy, all", records), ("toy, right", right)):
                if subset:
                    rows.append({"source": name, "setting": f"{params.prompt_lookup_min}:{params.prompt_lookup_max}:"
                                 f"{params.num_speculative_tokens}",
                                 **replay([r.prompt_ids for r in subset], [r.correction_ids for r in subset], params)})
        for closing in args.closing:
            bound_rows += bound_cuts(records, args.factors, closing, args.response_length)
    if args.lengths:
        from lab.analysis.correction_workload import LAYOUTS, build_tokenizer

        profile = profile or EditProfile(kept_fraction=0.73, mean_edit_run=3.0, insert_per_edited=1.0, corrections=0)
        if args.kept_fraction is not None or args.edit_run is not None:
            profile = EditProfile(profile.kept_fraction if args.kept_fraction is None else args.kept_fraction,
                                  profile.mean_edit_run if args.edit_run is None else args.edit_run,
                                  profile.insert_per_edited, 0)
        with tempfile.TemporaryDirectory() as tmp:
            tokenizer = build_tokenizer(Path(tmp) / "tok")
            for length in args.lengths:
                prompts, outputs = synthetic_corrections(tokenizer, length, profile, args.prompts, 8, 2,
                                                         LAYOUTS[args.layout], seed=args.seed)
                for params in args.settings:
                    rows.append({"source": f"synthetic L={length:,}, {args.layout}, kept {profile.kept_fraction:.0%}, "
                                           f"edit runs {profile.mean_edit_run:.1f}",
                                 "setting": f"{params.prompt_lookup_min}:"
                                 f"{params.prompt_lookup_max}:{params.num_speculative_tokens}",
                                 **replay(prompts, outputs, params)})
                print(f"[lookup] synthetic L={length} done", flush=True)
    if rows:
        print("\n" + lookup_table(rows) + "\n")
    if bound_rows:
        print(bound_table(bound_rows) + "\n")
    if args.json is not None:
        args.json.write_text(json.dumps({"lookup": rows, "bound": bound_rows,
                                         "profile": None if profile is None else profile.__dict__}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
