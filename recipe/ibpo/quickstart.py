"""The README's main job: a few IBPO + GSPO steps through verl's real trainer with a tiny local model.

    python -m recipe.ibpo.quickstart                       # IBPO binary + joint training, 3 steps, CPU
    python -m recipe.ibpo.quickstart --variant mask --steps 2
    python -m recipe.ibpo.quickstart --baseline            # the GSPO baseline through the same loop
    python -m recipe.ibpo.quickstart --gpu                 # one CUDA GPU, vLLM rollout
    python -m recipe.ibpo.quickstart -- 'trainer.logger=[console,tensorboard]'   # extra Hydra overrides

It builds (once, cached in ``--out``; a cache built with another configuration or by another tool, e.g. a
``lab.toy_tasks.warm_start`` folder, is refused: ``--rebuild``) a tiny Qwen2-style model and tokenizer, warm-starts it on
the synthetic arithmetic task (``toy_task/synthetic_task.py``) so it answers some problems right and
some wrong, then runs ``python -m recipe.main method=ibpo`` (CPU platform and ``hf`` rollout, or with
``--gpu`` CUDA and vLLM), bounded by ``--timeout`` (the whole process tree is killed on expiry). While it
runs, a line per finished training step is printed (read from verl's file logger, which is always added
to ``trainer.logger``). At the end it saves a Hugging Face checkpoint of the trained policy, prints the
per-step IBPO metrics table and the commands that evaluate the checkpoint against the warm-start model
and plot the curves. Each run writes ``<out>/<run>.log``, ``<out>/<run>_metrics.jsonl`` and
``<out>/checkpoints/<run>/`` (``<run>`` = ``ibpo_<variant>`` or ``gspo``), replacing its own earlier ones. Extra Hydra
overrides can follow ``--``, except of the keys an option sets (``ibpo.variant``: ``--variant``, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path

from ibpo.options import IBPOConfig
from ibpo.variants import variant_names
from option_types.cli import output_folder, positive_float, positive_int, refuse_unused
from verl_cpu.launch import cpu_env, cpu_overrides, process_env, read_metrics_jsonl, run_with_timeout

# (metric key, column title, format)
TABLE = [
    ("ibpo/raw_score_mean", "score", "{:.3f}"),  # main responses only (critic/score/mean includes joint rows)
    ("ibpo/num_wrong", "wrong", "{:.0f}"),
    ("ibpo/num_corrections", "corr", "{:.0f}"),
    ("ibpo/correction_success_rate", "succ", "{:.2f}"),
    ("ibpo/rewrite_rate", "rewr", "{:.2f}"),
    ("ibpo/shaped_fraction", "shaped", "{:.3f}"),
    ("ibpo/mean_delta", "meanΔ", "{:.2f}"),
    ("ibpo/cov_y_phi", "Cov(Y,φ)", "{:+.4f}"),
    ("ibpo/lambda_max", "λmax", "{:.2f}"),
    ("ibpo/num_joint_rows", "joint", "{:.0f}"),
    ("actor/grad_norm", "grad norm", "{:.3f}"),
    ("actor/num_optimizer_updates", "updates", "{:.0f}"),
    ("ibpo/time/correction_gen_s", "corr s", "{:.2f}"),
    ("timing_s/step", "step s", "{:.1f}"),
]


def ibpo_overrides(variant: str, joint_training: bool, baseline: bool) -> list[str]:
    """The IBPO (or baseline) part of the command line; the CPU part comes from ``cpu_overrides``."""
    out = [
        "actor_rollout_ref.actor.optim.lr=1e-4",
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0",
        "actor_rollout_ref.actor.optim.lr_scheduler_type=constant",
        "actor_rollout_ref.rollout.temperature=1.0",
    ]
    if baseline:
        return out + ["ibpo.enable=False", "trainer.experiment_name=gspo_cpu"]
    return out + [f"ibpo.variant={variant}", f"ibpo.joint_training={joint_training}",
                  f"trainer.experiment_name=ibpo_{variant}_cpu"]


# Settings of the CPU runtime that a CUDA run must not have (they select verl_cpu's platform).
CPU_ONLY_ENV = ("VERL_PLATFORM", "VERL_ENGINE_DEVICE", "VERL_USE_EXTERNAL_MODULES")
GPU_MEMORY_UTILIZATION = 0.3  # the tiny model needs little; leaves the GPU to the FSDP actor
HEARTBEAT_S = 30.0  # a "still running" line when no step finished for this long
LOGGER_OVERRIDE = re.compile(r"^\+{0,2}trainer\.logger=(.*)$")


def gpu_overrides(cpu_args: list[str]) -> list[str]:
    """The CPU demo's Hydra overrides turned into a one-GPU run: vLLM rollout, ``trainer.device=cuda``,
    Ray's real GPU count (no declared fake GPUs), a small vLLM memory share."""
    swap = {"actor_rollout_ref.rollout.name=hf": "actor_rollout_ref.rollout.name=vllm",
            "trainer.device=cpu": "trainer.device=cuda"}
    out = [swap.get(arg, arg) for arg in cpu_args if not arg.startswith("++ray_kwargs.ray_init.num_gpus=")]
    return out + [f"actor_rollout_ref.rollout.gpu_memory_utilization={GPU_MEMORY_UTILIZATION}"]


def gpu_env(metrics_path: Path) -> dict[str, str]:
    """``cpu_env`` without the variables that select the CPU platform."""
    return {k: v for k, v in cpu_env(metrics_path=metrics_path).items() if k not in CPU_ONLY_ENV}


def with_file_logger(overrides: list[str]) -> tuple[list[str], str | None]:
    """``overrides`` with ``file`` added to a ``trainer.logger=...`` override that lacks it (the progress lines
    and the table read verl's file logger); returns the new list and a note when one was changed."""
    out, note = [], None
    for arg in overrides:
        match = LOGGER_OVERRIDE.match(arg)
        if match:
            names = [n.strip().strip("'\"") for n in match.group(1).strip().strip("[]").split(",") if n.strip()]
            if "file" not in names:
                prefix = arg[: arg.index("trainer.logger=")]
                arg = f"{prefix}trainer.logger=[{','.join([*names, 'file'])}]"
                note = f"trainer.logger={match.group(1)} + file (the quickstart reads verl's file logger)"
        out.append(arg)
    return out, note


def checkpoint_overrides(steps: int) -> list[str]:
    """Save verl's checkpoint, including a Hugging Face copy of the policy, after the last step; always start
    from the warm-start model (never resume an earlier quickstart run)."""
    return [f"trainer.save_freq={steps}", "trainer.resume_mode=disable",
            "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"]


def latest_hf_checkpoint(checkpoint_dir: Path) -> Path | None:
    """``<dir>/global_step_<N>/actor/huggingface`` of the highest N holding model weights, else ``None``."""
    found = []
    for path in checkpoint_dir.glob("global_step_*/actor/huggingface"):
        step = path.parent.parent.name.removeprefix("global_step_")
        if step.isdigit() and (list(path.glob("*.safetensors")) or list(path.glob("*.bin"))):
            found.append((int(step), path))
    return max(found)[1] if found else None


class StepPrinter:
    """Prints a line for every training step that appears in verl's file-logger JSON lines while the run
    goes, and a heartbeat (the log's last line) when none appeared for ``HEARTBEAT_S``."""

    def __init__(self, metrics_path: Path, log_path: Path, total_steps: int, heartbeat_s: float = HEARTBEAT_S):
        self.metrics_path, self.log_path, self.total = metrics_path, log_path, total_steps
        self.heartbeat_s = heartbeat_s
        self.offset, self.partial, self.last_print = 0, "", 0.0

    def __call__(self, elapsed_s: float) -> None:
        for record in self._new_records():
            step = int(record.get("step", 0))
            data = record.get("data", {})
            if step > 0 and "timing_s/step" in data:
                cells = [f"{title} {fmt.format(data[key])}" for key, title, fmt in TABLE if key in data]
                print(f"[quickstart] step {step}/{self.total} ({elapsed_s:.0f} s): " + ", ".join(cells), flush=True)
                self.last_print = elapsed_s
        if elapsed_s - self.last_print >= self.heartbeat_s:
            print(f"[quickstart] {elapsed_s:.0f} s, running; log: {self._last_log_line()}", flush=True)
            self.last_print = elapsed_s

    def _new_records(self) -> list[dict]:
        if not self.metrics_path.exists():
            return []
        with open(self.metrics_path, encoding="utf-8") as handle:
            handle.seek(self.offset)
            text = handle.read()
            self.offset = handle.tell()
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()  # an unfinished last line waits for the next call
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return records

    def _last_log_line(self, width: int = 110) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(max(0, self.log_path.stat().st_size - 4096))
                tail = handle.read().decode(errors="replace")
        except OSError:
            return "(no output yet)"
        lines = [ln.strip() for ln in re.split(r"[\r\n]", tail) if ln.strip()]
        return (lines[-1][:width] if lines else "(no output yet)")


def run_cpu_training(assets: dict, out_dir: Path, name: str, overrides: list[str], steps: int,
                     timeout_s: float, extra_env: dict | None = None, method: str = "ibpo",
                     device: str = "cpu", progress: bool = False, checkpoint_dir: Path | None = None):
    """Run ``python -m recipe.main method=<method>`` with the demo assets; returns (RunResult, metrics by step
    or None).

    ``device="cpu"`` uses the CPU platform and ``hf`` rollout; ``device="cuda"`` one GPU and vLLM
    (:func:`gpu_overrides`). The run is bounded by ``timeout_s`` (whole process tree killed), logs to
    ``out_dir/<name>.log`` and writes verl's file-logger metrics to ``out_dir/<name>_metrics.jsonl``;
    ``progress`` prints a line per finished step while it runs (:class:`StepPrinter`). Checkpoints go to
    ``checkpoint_dir`` (default ``out_dir/checkpoints``; verl resumes from the latest one found there).
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r} must be 'cpu' or 'cuda'")
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics_path = out_dir / f"{name}_metrics.jsonl"
    log_path = out_dir / f"{name}.log"
    metrics_path.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "recipe.main", f"method={method}"]
    base = cpu_overrides(assets["model"], assets["train"], assets["val"], total_training_steps=steps)
    if device == "cuda":
        base = gpu_overrides(base)
        env = {**os.environ, **gpu_env(metrics_path), **(extra_env or {})}
        for key in CPU_ONLY_ENV:
            env.pop(key, None)
    else:
        env = process_env(os.environ, {**cpu_env(metrics_path=metrics_path), **(extra_env or {})})
    cmd += [*base, f"trainer.default_local_dir={checkpoint_dir or out_dir / 'checkpoints'}", *overrides]
    printer = StepPrinter(metrics_path, log_path, steps) if progress else None
    result = run_with_timeout(cmd, env, timeout_s=timeout_s, log_path=log_path, cwd=out_dir, on_tick=printer)
    metrics = read_metrics_jsonl(metrics_path) if result.returncode == 0 and metrics_path.exists() else None
    return result, metrics


def format_table(metrics_by_step: dict[int, dict[str, float]] | None) -> str:
    """The per-step IBPO metrics as a Markdown table (a note when there are none)."""
    if not metrics_by_step:
        return "(no per-step metrics: verl's file logger wrote nothing)"
    head = "| step | " + " | ".join(title for _, title, _ in TABLE) + " |"
    rule = "|---:|" + "---:|" * len(TABLE)
    rows = []
    for step in sorted(s for s in metrics_by_step if s > 0):
        m = metrics_by_step[step]
        cells = [fmt.format(m[key]) if key in m else "-" for key, _, fmt in TABLE]
        rows.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join([head, rule, *rows])


def shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it (shorter commands to copy)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def next_commands(assets: dict, out: Path, name: str, hf_checkpoint: Path, label: str) -> list[str]:
    """The commands that evaluate the trained checkpoint against the warm-start model on the validation
    set (same sampling, paired comparison) and plot the training curves of every quickstart run in ``out``."""
    val, sampling = shown_path(Path(assets["val"])), "--preset none --temperature 1.0 --max-new-tokens 16 --k 8"
    # every quickstart run in this work directory on one figure, the GSPO baseline first when it exists
    names = [n for n in ("gspo", "ibpo_binary", "ibpo_ratio", "ibpo_mask")
             if n == name or (out / f"{n}_metrics.jsonl").exists()]
    runs = " ".join(f"--run {n}={shown_path(out / (n + '_metrics.jsonl'))}" for n in names)
    evals = out / "eval"
    py = "python"
    return [
        f"{py} -m evaluation.evaluate run --model {shown_path(Path(assets['model']))} --data {val} {sampling} "
        f"--label warm_start --out {shown_path(evals / 'warm_start')}",
        f"{py} -m evaluation.evaluate run --model {shown_path(hf_checkpoint)} --data {val} {sampling} "
        f"--label {label} --out {shown_path(evals / label)}",
        f"{py} -m evaluation.evaluate compare {shown_path(evals / label / 'results.json')} "
        f"{shown_path(evals / 'warm_start' / 'results.json')} --out {shown_path(evals / (label + '_vs_warm_start.md'))}",
        f"{py} -m evaluation.plot_curves {runs} --x step --threshold 0.5 --smooth 1 "
        f"--out {shown_path(out / 'curves.png')}",
    ]


# Hydra keys a quickstart option sets: given after `--` they would run something the run's name, step count or
# checkpoint lookup do not describe (`-- ibpo.variant=ratio` ran ratio as "ibpo_binary"); the option is the way.
OPTION_KEYS = {"ibpo.variant": "--variant", "ibpo.joint_training": "--no-joint-training", "ibpo.enable": "--baseline",
               "trainer.total_training_steps": "--steps", "trainer.default_local_dir": "--out",
               "trainer.device": "--gpu", "actor_rollout_ref.rollout.name": "--gpu"}


def option_owned_overrides(overrides: list[str]) -> list[str]:
    """``key (use OPTION)`` for each Hydra override (``key=value``, ``+key=``, ``++key=``, ``~key``) of a key a
    quickstart option sets (:data:`OPTION_KEYS`)."""
    found = []
    for arg in overrides:
        key = arg.lstrip("+~").split("=", 1)[0].strip()
        if key in OPTION_KEYS:
            found.append(f"{key} (use {OPTION_KEYS[key]})")
    return found


def gpu_problem() -> str | None:
    """Why ``--gpu`` cannot run here (no vLLM, no CUDA device), else None: said before minutes of asset building,
    not by the run's workers after them."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (verl's vLLM rollout; docs/gpu.md)"
    import torch

    return None if torch.cuda.is_available() else "no CUDA device is visible"


def cached_assets_problem(stamp: Path, expected: dict) -> str | None:
    """Why the asset cache ``stamp`` (``<out>/assets.json``) cannot be reused, else None: unreadable, built by
    another configuration or tool (its ``built_with`` differs from ``expected``: another SFT length, or a
    ``lab.toy_tasks.warm_start`` folder), or a path it names is gone."""
    try:
        assets = json.loads(stamp.read_text())
    except (OSError, ValueError) as exc:
        return f"{stamp} is not a readable asset cache ({type(exc).__name__})"
    built_with = assets.get("built_with") if isinstance(assets, dict) else None
    if built_with != expected:
        return f"{stamp} was built with {built_with}, not the quickstart's {expected}"
    missing = [assets.get(k) for k in ("tokenizer", "model", "train", "val") if not Path(str(assets.get(k))).exists()]
    return f"{stamp} names {missing[0]}, which does not exist" if missing else None


def parse_options(argv: list[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace, list[str], str]:
    """``(parser, args, Hydra overrides, logger note)``; an unknown option, an override of a key an option sets and
    an option ``--baseline`` does not use are refused here (``parser.error``), before anything is built."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=output_folder, default="outputs/quickstart",
                        help="work directory (assets are cached here)")
    parser.add_argument("--steps", type=positive_int, default=3)
    parser.add_argument("--variant", choices=variant_names(), default=IBPOConfig().variant,
                        help="ibpo.variant (default: the package's; λ, shaping and correct_groups are the package's too)")
    parser.add_argument("--no-joint-training", action="store_true", help="shaping only (Table 3 ablation)")
    parser.add_argument("--baseline", action="store_true", help="GSPO without IBPO (ibpo.enable=False)")
    parser.add_argument("--gpu", action="store_true", help="one CUDA GPU with the vLLM rollout (needs verl's vllm)")
    parser.add_argument("--timeout", type=positive_float, default=900.0, help="seconds before the run is killed")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the tiny model and data")
    args, extra = parser.parse_known_args(argv)
    extra = [x for x in extra if x != "--"]
    unknown = [x for x in extra if x.startswith("-")]
    if unknown:
        parser.error(f"unknown option(s) {' '.join(unknown)} (Hydra overrides go after --, as key=value)")
    owned = option_owned_overrides(extra)
    if owned:
        parser.error(f"{', '.join(owned)}: set by a quickstart option; give the option, not the override")
    if args.baseline:
        given = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--" and a not in extra]
        refuse_unused(parser, given, {"variant": "--variant", "no_joint_training": "--no-joint-training"},
                      "--baseline", "GSPO runs without the correction pass")
    extra, logger_note = with_file_logger(extra)
    return parser, args, extra, logger_note


def main(argv: list[str] | None = None) -> int:
    parser, args, extra, logger_note = parse_options(argv)
    from toy_task.synthetic_task import SFT_STEPS, build_cpu_demo_assets, demo_assets_config

    out = Path(args.out).resolve()
    problem = gpu_problem() if args.gpu else None
    if problem:
        parser.error(f"--gpu: {problem}")
    stamp = out / "assets.json"
    if stamp.exists() and not args.rebuild:
        problem = cached_assets_problem(stamp, demo_assets_config())
        if problem:
            parser.error(f"--out {args.out}: {problem}; pass --rebuild to build the quickstart's assets there, "
                         "or another --out")
    if args.rebuild or not stamp.exists():
        print(f"[quickstart] building the tiny model, tokenizer and synthetic task in {out}; warm start: "
              f"{SFT_STEPS} SFT steps on CPU ...", flush=True)
        assets = build_cpu_demo_assets(out / "assets")
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps(assets))
    assets = json.loads(stamp.read_text())

    name = "gspo" if args.baseline else f"ibpo_{args.variant}"
    device = "cuda" if args.gpu else "cpu"
    log_path = out / f"{name}.log"
    where = "one GPU, vLLM rollout" if args.gpu else "CPU, hf rollout"
    print(f"[quickstart] running python -m recipe.main method=ibpo on {where} ({args.steps} steps; Ray and worker "
          f"start-up first, about a minute; full log: {log_path})", flush=True)
    if logger_note:
        print(f"[quickstart] {logger_note}", flush=True)
    overrides = [*ibpo_overrides(args.variant, not args.no_joint_training, args.baseline),
                 *checkpoint_overrides(args.steps), *extra]
    checkpoint_dir = out / "checkpoints" / name
    shutil.rmtree(checkpoint_dir, ignore_errors=True)  # this run's own earlier output; a fresh run replaces it
    result, metrics = run_cpu_training(assets, out, name, overrides, args.steps, args.timeout, device=device,
                                       progress=True, checkpoint_dir=checkpoint_dir)
    if result.returncode != 0:
        log_text = result.log_tail(20000)
        config_errors = [ln for ln in log_text.splitlines() if ln.startswith("[recipe] configuration error")]
        print("\n".join(config_errors) if config_errors else log_text[-6000:], file=sys.stderr)
        reason = "timed out" if result.timed_out else f"exited with {result.returncode}"
        print(f"[quickstart] FAILED: the run {reason} after {result.wall_s:.0f} s (log: {result.log_path})",
              file=sys.stderr)
        return 1
    print(format_table(metrics))
    print(f"[quickstart] done in {result.wall_s:.0f} s; peak RSS summed over the run's processes "
          f"(driver, Ray, workers; sampled every second): {result.peak_tree_rss_bytes / 2**30:.1f} GiB; "
          f"metrics: {shown_path(out / (name + '_metrics.jsonl'))}")
    hf_checkpoint = latest_hf_checkpoint(checkpoint_dir)
    if hf_checkpoint is None:
        print("[quickstart] no Hugging Face checkpoint was saved (trainer.save_freq or "
              "actor_rollout_ref.actor.checkpoint.save_contents overridden?)")
        return 0
    print(f"[quickstart] Hugging Face checkpoint of the trained policy: {shown_path(hf_checkpoint)}")
    print("[quickstart] next: evaluate it against the warm-start model on the validation set, then plot:")
    for command in next_commands(assets, out, name, hf_checkpoint, name):
        print("  " + command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
