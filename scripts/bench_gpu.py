#!/usr/bin/env python
"""What a GPU user needs to know, in one command that fits a short GPU slot: one table, a JSON beside it.

    python scripts/bench_gpu.py                                   # the cost model and the copy workload, 8 minutes
    python scripts/bench_gpu.py --skip coefficients copy --budget-s 560   # one IBPO step through the trainer only
    python scripts/bench_gpu.py --skip coefficients copy --budget-s 560 --step-eager   # the same, vLLM eager

On an H200 (docs/gpu.md) the coefficients took ~110 s and an engine per draft length ~60 s, while verl's start-up
alone took more than 290 s before the step's first request: the step does not fit beside the other two parts in
one 8-minute slot, so the default budget plans the first two and the step runs in a slot of its own.

No downloads: a Qwen3-1.7B-shaped model (``bench_one_gpu_shape.QWEN3_1P7B_SHAPE``) with random weights (vLLM's
``load_format=dummy``; the actor and the trainer's checkpoint from ``transformers``' ``from_config``), the
project's tokenizer and the synthetic task. Three parts, each skippable (``--skip``), run in this order while
the budget lasts (:func:`plan_parts`; the estimates are planning guesses, :data:`PART_ESTIMATE_S`):

- **coefficients** (one vLLM engine and the actor in this process, no verl start-up): seconds per decode pass
  on a grid of batch sizes x context lengths (each cell timed whole and prefill-only; decode = the difference,
  per pass), fitted by non-negative least squares to ``decode_step_s + B·decode_s_per_token +
  C·decode_s_per_context_token`` (:func:`compute_accounting.gpu_time.fit_decode_coefficients`); prefill tokens per
  second from the prefill-only runs; the actor's forward + backward with gradient checkpointing (tokens per
  second x 4 forward-equivalents = ``train_forward_tokens_per_s``); the seconds of loading the actor's weights
  into the engine in-process (a lower bound of verl's weight sync; the step's ``update_weights`` replaces it).
  Written as ``coefficients`` in the JSON (``compute_accounting.gpu_time.coefficients_from_json`` reads it; a
  coefficient this run did not measure keeps its roofline value and says so in ``sources``).
- **copy** (speculation's acceptance on a workload that copies): random weights never copy, so prompt-lookup
  drafts on ordinary generations are rejected by construction. The copy workload: for prompt x, y is the
  model's own greedy continuation (T tokens, speculation off); the copy request shows ``x + y`` and then ``x``
  again and decodes greedily. It represents a correction that copies its target (IBPO's correction prompt
  shows the wrong response y; the toy's corrections were ~1.0x its length, docs/correction_pass.md) and
  SpecRL's drafts from an earlier response to the same prompt (verl PR #4535): the best case of model-free
  drafts. Whether the model repeats y after the second x is measured (``agreement``: the share of the target's
  tokens reproduced before the first difference), not assumed. Per ngram draft length k (one engine each:
  ``speculative_config`` is an engine argument, as in verl PR #5925 and NeMo-RL's speculative rollouts, which
  also read vLLM's own spec-decode counters): seconds, decode steps (generated - accepted tokens, as the
  trainer's ``rollout/spec_*`` counters count them), accepted tokens per decode step, acceptance rate, speed-up
  over speculation off, and the cost model's seconds for the same work (with this run's coefficients).
- **step** (one real IBPO step through ``recipe/ibpo/run_ibpo_qwen3_1p7b_1gpu.sh``, through
  ``bench_one_gpu_shape.launch_command``): the script's shape at ``--step-prompts`` prompts x G = 8 and
  ``--step-response`` tokens (forced, ``ignore_eos``), ``FAST_START=1``, ``ibpo.correct_groups=all`` (random
  weights: every response wrong, every one corrected), ngram speculation with vLLM's stats on, sdpa attention.
  From the run's metrics JSONL (:func:`step_report`): per-phase seconds, correction / main generation,
  corrections run, ``rollout/spec_*``, ``training/rollout_probs_diff_mean`` (actor vs vLLM in bf16), the
  actor's peak memory and ``nvidia-smi``'s peak over the run; its start-up timeline (:class:`StampedLog`: the
  log's tail and when each :data:`STARTUP_MARKERS` line came), also when the budget stops it.

The coefficients and copy parts run in a child process of this script (vLLM's engine in-process there, so the
actor's weights load into it directly), which leaves the GPU free for the step's verl run when it exits; it
saves what it measured after each measurement. ``--budget-s``: a part starts only if its estimate fits what is
left; each child's run is limited to its share; a watchdog writes the table and JSON of what is done (the
child's saved results included) and exits at the budget whatever hangs.
Without CUDA or vLLM it prints why and exits 0 (the planning, fit, parsing and table are tested on CPU:
tests/unit/test_bench_gpu.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from option_types.cli import positive_float, positive_int  # noqa: E402

import bench_one_gpu_shape as shape  # noqa: E402  (the model shape, the launch command, the peak-memory poller)
from bench_correction_pass import release_engine  # noqa: E402  (frees the GPU for the next engine)

from compute_accounting.gpu_time import (  # noqa: E402
    DECODE_TERMS,
    GenerationWork,
    GpuTimeCoefficients,
    coefficients_from_json,
    coefficients_to_json,
    fit_decode_coefficients,
    generation_seconds,
    roofline_coefficients,
    train_forward_tokens_per_s,
)
from recipe.ibpo.correction.spec_counters import SPEC_PROM_COUNTERS, SpecCounters, spec_counter_metrics  # noqa: E402

PARTS = ("coefficients", "copy", "step")
# Planning estimates (seconds) from the H200 runs of 2026-11-27 (docs/gpu.md; c9ae526 and 74eb390): the
# coefficients part 114 s whole (vLLM's import ~20 s, its engine ~67 s with compile and graphs, grid, actor and
# weight load ~27 s); an engine for the copy part ~60 s before its two workloads; verl's start-up with FAST_START=1
# more than 292 s before the step's first request (stopped there at the budget), so the step's 420 s is a lower
# bound plus a guess for the step itself.
PART_ESTIMATE_S = {"coefficients": 120.0, "copy_per_draft_length": 70.0, "step": 420.0}
STEP_MIN_S = 330.0  # below this the step cannot finish (its start-up alone took > 292 s): skipped, not started
MODEL_SHAPE = "Qwen3-1.7B"


@dataclass(frozen=True)
class PlannedPart:
    name: str
    estimate_s: float
    runs: bool
    reason: str = ""


def part_estimate(name: str, draft_lengths: list[int]) -> float:
    if name == "copy":
        return PART_ESTIMATE_S["copy_per_draft_length"] * max(1, len(draft_lengths))
    return PART_ESTIMATE_S[name]


def plan_parts(budget_s: float, skip: list[str], draft_lengths: list[int]) -> list[PlannedPart]:
    """Which parts run, in :data:`PARTS` order: a part not skipped runs when its estimate fits what the parts
    before it leave of the budget; the others say why not."""
    unknown = sorted(set(skip) - set(PARTS))
    if unknown:
        raise ValueError(f"--skip {unknown}: parts are {list(PARTS)}")
    left, plan = float(budget_s), []
    for name in PARTS:
        estimate = part_estimate(name, draft_lengths)
        if name in skip:
            plan.append(PlannedPart(name, estimate, False, "skipped (--skip)"))
        elif estimate > left:
            plan.append(PlannedPart(name, estimate, False, f"does not fit: needs ~{estimate:.0f} s, "
                                                          f"{left:.0f} s of --budget-s left"))
        else:
            plan.append(PlannedPart(name, estimate, True))
            left -= estimate
    return plan


class Budget:
    """Seconds left of ``--budget-s`` since the command started."""

    def __init__(self, total_s: float, clock=time.monotonic):
        self.total_s, self.clock, self.start = float(total_s), clock, clock()

    def used(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return self.total_s - self.used()


# ------------------------------------------------------------------ decode grid -> coefficients
@dataclass(frozen=True)
class DecodeCell:
    batch: int  # sequences decoded together
    context: int  # prompt tokens of each
    new_tokens: int  # tokens generated per sequence (forced)


def decode_grid(batches: list[int], contexts: list[int], new_tokens: int) -> list[DecodeCell]:
    return [DecodeCell(b, c, new_tokens) for c in contexts for b in batches]


def decode_samples(cells: list[DecodeCell], full_s: list[float], prefill_s: list[float]) -> dict[str, np.ndarray]:
    """Per cell: seconds per decode pass (the whole run minus its prefill-only run, over the new_tokens - 1
    passes after the prefill) and the KV-cache tokens one pass reads in all (B x the mean context over the
    passes: the prompt plus half the generated tokens)."""
    batch = np.array([c.batch for c in cells], dtype=np.float64)
    context = np.array([c.batch * (c.context + c.new_tokens / 2.0) for c in cells], dtype=np.float64)
    passes = np.array([c.new_tokens - 1 for c in cells], dtype=np.float64)
    pass_s = (np.asarray(full_s, dtype=np.float64) - np.asarray(prefill_s, dtype=np.float64)) / passes
    return {"batch": batch, "context_tokens": context, "pass_s": pass_s}


def prefill_tokens_per_s(cells: list[DecodeCell], prefill_s: list[float]) -> float:
    """Prompt tokens per second over the prefill-only runs (large cells weigh most)."""
    return float(sum(c.batch * c.context for c in cells) / sum(prefill_s))


def measured_coefficients(measured: dict[str, float], gpu_name: str, commit: str,
                          roofline_gpu: str = "H100-SXM") -> GpuTimeCoefficients:
    """``GpuTimeCoefficients`` of the measured values (each source names the part, GPU and commit); what this
    run did not measure keeps the roofline's value and source, marked so."""
    base = roofline_coefficients(roofline_gpu, MODEL_SHAPE)
    values, sources = {}, {}
    part_of = {**dict.fromkeys(DECODE_TERMS, "coefficients decode grid"),
               "prefill_tokens_per_s": "coefficients prefill", "train_forward_tokens_per_s": "coefficients actor",
               "weight_sync_s": "step update_weights", "weight_sync_load_weights_s": "coefficients load_weights"}
    for name in ("decode_step_s", "decode_s_per_token", "decode_s_per_context_token", "prefill_tokens_per_s",
                 "train_forward_tokens_per_s", "weight_sync_s"):
        key = name if name in measured else ("weight_sync_load_weights_s" if name == "weight_sync_s" and
                                             "weight_sync_load_weights_s" in measured else None)
        if key is None:
            values[name] = getattr(base, name)
            sources[name] = f"not measured in this run; {base.sources[name]}"
            continue
        values[name] = float(measured[key])
        note = " (in-process load_weights: a lower bound of verl's weight sync)" if key.endswith("load_weights_s") else ""
        sources[name] = f"measured: scripts/bench_gpu.py {part_of[key]}, {gpu_name}, {commit}{note}"
    sources["max_num_seqs"], sources["gpus"] = "verl's rollout default (rollout.yaml)", "one GPU"
    return GpuTimeCoefficients(**values, sources=sources)


# ------------------------------------------------------------------ copy workload and speculation counters
def copy_prompts(prompts: list[list[int]], targets: list[list[int]]) -> list[list[int]]:
    """The copy request of each prompt x with target y (its greedy continuation): ``x + y + x``."""
    if len(prompts) != len(targets):
        raise ValueError(f"{len(prompts)} prompts but {len(targets)} targets")
    return [list(x) + list(y) + list(x) for x, y in zip(prompts, targets)]


def agreement(outputs: list[list[int]], targets: list[list[int]]) -> float:
    """Share of the targets' tokens reproduced before each output's first difference (1 = verbatim copies)."""
    total = sum(len(y) for y in targets)
    same = 0
    for out, y in zip(outputs, targets):
        n = 0
        while n < min(len(out), len(y)) and out[n] == y[n]:
            n += 1
        same += n
    return same / total if total else 0.0


def spec_counters_from_metrics(metrics: list[Any]) -> SpecCounters | None:
    """:class:`SpecCounters` from ``vllm.LLM.get_metrics()`` (objects with ``name`` and ``value``; a name with or
    without Prometheus's ``_total``); None without ``vllm:generation_tokens`` (stats off)."""
    by_name = {name: fieldname for fieldname, name in SPEC_PROM_COUNTERS.items()}
    sums, seen = dict.fromkeys(SPEC_PROM_COUNTERS, 0.0), set()
    for metric in metrics:
        name = str(getattr(metric, "name", ""))
        fieldname = by_name.get(name[:-6] if name.endswith("_total") else name)
        value = getattr(metric, "value", None)
        if fieldname is None or not isinstance(value, (int, float)):
            continue
        sums[fieldname] += float(value)
        seen.add(fieldname)
    return SpecCounters(**sums) if "generated_tokens" in seen else None


def spec_row(workload: str, k: int, seconds: float, requests: int, prompt_tokens: list[int],
             counts: SpecCounters | None, agree: float, coeff: GpuTimeCoefficients | None) -> dict:
    """One row of the speculation table: the trainer's ``rollout/spec_*`` definitions on this phase's counts, and
    the cost model's seconds for the same work (decode steps and drafts spread evenly over the requests)."""
    row = {"workload": workload, "draft_k": k, "seconds": seconds, "requests": requests, "agreement": agree}
    if counts is None:
        return {**row, "spec_stats_reported": 0.0}
    metrics = spec_counter_metrics(True, counts)
    row.update({key.split("/", 1)[1]: v for key, v in metrics.items()})
    row["generated_tokens"] = counts.generated_tokens
    if coeff is not None and requests and counts.generated_tokens > 0:
        per_out = counts.generated_tokens / requests
        steps = max(0.0, metrics["rollout/spec_decode_steps"] / requests - 1.0)  # the prefill emits the first
        work = GenerationWork(prompt_tokens, [per_out] * requests, [min(steps, per_out - 1)] * requests,
                              [counts.draft_tokens / requests] * requests)
        row["modelled_seconds"] = sum(generation_seconds(work, coeff).values())
    return row


# ------------------------------------------------------------------ the step's metrics
STEP_KEYS = {"rollout_probs_diff_mean": "training/rollout_probs_diff_mean",
             "actor_peak_allocated_gb": "perf/max_memory_allocated_gb",
             "actor_peak_reserved_gb": "perf/max_memory_reserved_gb",
             "correction_prompt_tokens": "ibpo/correction_prompt_tokens",
             "correction_gen_tokens": "ibpo/correction_gen_tokens", "main_gen_tokens": "ibpo/main_gen_tokens"}


def step_report(metrics: dict[int, dict[str, float]]) -> list[dict]:
    """Per step of the run's metrics (``verl_cpu.launch.read_metrics_jsonl``): the shape bench's phase seconds,
    ratios and correction counts, every ``rollout/spec_*`` counter, and :data:`STEP_KEYS` (None: not reported)."""
    rows = []
    for row in shape.step_rows(metrics):
        m = metrics[row["step"]]
        row.update({k: m.get(key) for k, key in STEP_KEYS.items()})
        row.update({key.split("/", 1)[1]: v for key, v in sorted(m.items()) if key.startswith("rollout/spec_")})
        rows.append(row)
    return rows


# ------------------------------------------------------------------ report: table and JSON
@dataclass
class Report:
    """What the run has so far (the watchdog writes it as it is)."""

    meta: dict
    plan: list[PlannedPart]
    measured: dict[str, float] = field(default_factory=dict)  # coefficient name -> value
    decode_rows: list[dict] = field(default_factory=list)
    actor: dict = field(default_factory=dict)
    spec_rows: list[dict] = field(default_factory=list)
    step_rows: list[dict] = field(default_factory=list)
    step_run: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def coefficients(self) -> GpuTimeCoefficients | None:
        """This run's measured coefficients (the roofline's where it measured none of a kind); None before any.
        The vLLM child's report has no meta (its GPU and commit are the parent's, named there)."""
        if not self.measured:
            return None
        return measured_coefficients(self.measured, self.meta.get("gpu", "this GPU"), self.meta.get("commit", "?"))

    def to_json(self) -> dict:
        out = {"meta": self.meta, "plan": [p.__dict__ for p in self.plan], "decode_grid": self.decode_rows,
               "actor": self.actor, "speculation": self.spec_rows, "step": self.step_rows,
               "step_run": self.step_run, "notes": self.notes}
        coeff = self.coefficients()
        if coeff is not None:
            out.update(coefficients_to_json(coeff))
        return out


def fmt(value, spec: str = ".3g", none: str = "n/a") -> str:
    return none if value is None else format(value, spec)


def coefficient_lines(report: Report) -> list[str]:
    coeff = report.coefficients()
    if coeff is None:
        return ["(no coefficient measured)"]
    lines = ["| coefficient | value | source |", "|---|---:|---|"]
    for name in ("decode_step_s", "decode_s_per_token", "decode_s_per_context_token", "prefill_tokens_per_s",
                 "train_forward_tokens_per_s", "weight_sync_s"):
        lines.append(f"| {name} | {getattr(coeff, name):.4g} | {coeff.sources[name]} |")
    if report.decode_rows:
        lines += ["", "| batch | context | s per decode pass | fitted |", "|---:|---:|---:|---:|"]
        lines += [f"| {r['batch']} | {r['context']} | {r['pass_s']:.5f} | {fmt(r.get('fitted_s'), '.5f')} |"
                  for r in report.decode_rows]
    return lines


def speculation_lines(rows: list[dict]) -> list[str]:
    if not rows:
        return ["(not run)"]
    lines = ["| workload | draft k | s | vs off | decode steps | accepted / step | acceptance rate | agreement "
             "| cost model s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    off = {r["workload"]: r["seconds"] for r in rows if r["draft_k"] == 0}
    for r in rows:
        base = off.get(r["workload"])
        lines.append(f"| {r['workload']} | {r['draft_k'] or 'off'} | {r['seconds']:.2f} | "
                     f"{fmt(base / r['seconds'] if base and r['seconds'] else None, '.2f')}x | "
                     f"{fmt(r.get('spec_decode_steps'), '.0f')} | {fmt(r.get('spec_accepted_per_decode_step'), '.2f')} | "
                     f"{fmt(r.get('spec_acceptance_rate'), '.2f')} | {r['agreement']:.2f} | "
                     f"{fmt(r.get('modelled_seconds'), '.2f')} |")
    return lines


def startup_line(run: dict) -> list[str]:
    """The step's start-up as its log showed it (:data:`STARTUP_MARKERS`), in seconds since the launch."""
    seen = run.get("startup_s") or {}
    if not seen:
        return []
    marks = ", ".join(f"{name.replace('_', ' ')} {seen[name]:.0f} s" for name in STARTUP_MARKERS if name in seen)
    missing = [name.replace("_", " ") for name in STARTUP_MARKERS if name not in seen]
    return [f"step start-up: {marks}" + (f" (not seen: {', '.join(missing)})" if missing else "")]


def step_lines(report: Report) -> list[str]:
    run = report.step_run
    if not report.step_rows:
        return [f"(no step finished{': ' + run['status'] if run.get('status') else ''})", *startup_line(run)]
    lines = shape.format_table(report.step_rows, int(report.step_run.get("peak_mib", 0))).splitlines()
    if run.get("shape", {}).get("eager"):
        lines.append("step: vLLM eager (--step-eager: no CUDA graphs, no compile); its generation seconds are eager's")
    lines += startup_line(run)
    for r in report.step_rows:
        lines.append(f"step {r['step']}: correction / main generation {r['correction_vs_main']:.2f}; "
                     f"training/rollout_probs_diff_mean {fmt(r['rollout_probs_diff_mean'], '.4g')}; actor peak "
                     f"allocated {fmt(r['actor_peak_allocated_gb'], '.1f')} GB; spec accepted/step "
                     f"{fmt(r['spec_accepted_per_decode_step'], '.2f')}, drafted-step share "
                     f"{fmt(r['spec_drafted_step_share'], '.2f')}, stats reported "
                     f"{fmt(r['spec_stats_reported'], '.0f')}")
    return lines


def format_report(report: Report) -> str:
    m = report.meta
    lines = [f"bench_gpu: {m['gpu']} · commit {m['commit']} · {m['date']} · {MODEL_SHAPE} shape, random weights · "
             f"budget {m['budget_s']:.0f} s, used {m.get('used_s', 0.0):.0f} s"]
    lines += [f"  {p.name}: {'planned' if p.runs else p.reason} (estimate ~{p.estimate_s:.0f} s)" for p in report.plan]
    lines += [f"  note: {n}" for n in report.notes]
    lines += ["", "## Cost-model coefficients", *coefficient_lines(report)]
    if report.actor:
        lines.append(f"actor forward+backward (gradient checkpointing): {report.actor.get('tokens', 0):.0f} tokens "
                     f"in {fmt(report.actor.get('seconds'), '.3f')} s; peak allocated "
                     f"{fmt(report.actor.get('peak_gb'), '.1f')} GB")
    lines += ["", "## Speculation (ngram) by draft length", *speculation_lines(report.spec_rows)]
    lines += ["", "## One IBPO step through the trainer", *step_lines(report)]
    lines += ["", "## Rows for docs/gpu.md (what this run did not measure stays unmeasured)", *docs_rows(report)]
    return "\n".join(lines)


def docs_rows(report: Report) -> list[str]:
    """docs/gpu.md's table rows (part, quantity, value, GPU, commit, date) of what this run measured."""
    m = report.meta
    stamp = f"{m['gpu']} | {m['commit']} | {m['date'][:10]} |"
    rows = [("coefficients", name, f"{report.measured[name]:.4g}") for name in
            ("decode_step_s", "decode_s_per_token", "decode_s_per_context_token", "prefill_tokens_per_s",
             "train_forward_tokens_per_s") if name in report.measured]
    sync = report.measured.get("weight_sync_s", report.measured.get("weight_sync_load_weights_s"))
    if sync is not None:
        rows.append(("coefficients / step", "weight_sync_s", f"{sync:.3g}"))
    for r in report.spec_rows:
        if r["draft_k"] and r.get("spec_acceptance_rate") is not None:
            rows.append(("copy", f"{r['workload']}, draft length {r['draft_k']}: accepted / decode step, "
                         "acceptance rate, agreement", f"{r['spec_accepted_per_decode_step']:.2f}, "
                         f"{r['spec_acceptance_rate']:.2f}, {r['agreement']:.2f}"))
    for r in report.step_rows:
        eager = " (vLLM eager: no CUDA graphs)" if report.step_run.get("shape", {}).get("eager") else ""
        rows.append(("step", f"seconds: step, main gen, correction gen, actor update{eager}", f"{r['step_s']:.1f}, "
                     f"{r['main_gen']:.1f}, {r['correction_gen']:.1f}, {r['update_actor']:.1f}"))
        rows.append(("step", "training/rollout_probs_diff_mean", fmt(r["rollout_probs_diff_mean"], ".4g")))
    if report.step_run.get("peak_mib"):
        rows.append(("step", "peak GPU memory (nvidia-smi, all processes)", f"{report.step_run['peak_mib'] / 1024:.1f} GiB"))
    rows.append(("whole command", "seconds, start-ups included", f"{m.get('used_s', 0.0):.0f}"))
    return ["| part | quantity | value | GPU | commit | date |", "|---|---|---:|---|---|---|",
            *(f"| {part} | {quantity} | {value} | {stamp}" for part, quantity, value in rows)]


def write_report(report: Report, out: Path, budget: Budget) -> None:
    report.meta["used_s"] = budget.used()
    out.mkdir(parents=True, exist_ok=True)
    table = format_report(report)
    (out / "bench_gpu.md").write_text(table + "\n")
    (out / "bench_gpu.json").write_text(json.dumps(report.to_json(), indent=1, default=float))
    print(table, flush=True)
    print(f"\nwritten: {out / 'bench_gpu.md'}, {out / 'bench_gpu.json'}", flush=True)


class Watchdog(threading.Thread):
    """At the budget's end (plus ``grace_s``): write what the report has, end the step's process group, exit 3."""

    def __init__(self, report: Report, out: Path, budget: Budget, grace_s: float = 15.0):
        super().__init__(daemon=True)
        self.report, self.out, self.budget, self.grace_s = report, out, budget, grace_s
        self.child_pgid: int | None = None
        self.partial: Path | None = None  # the vLLM/actor child's results so far
        self.done = threading.Event()

    def run(self) -> None:
        if self.done.wait(max(0.0, self.budget.left() + self.grace_s)):
            return
        self.report.notes.append("stopped at --budget-s by the watchdog: the parts above are what finished")
        if self.child_pgid is not None:
            try:
                os.killpg(self.child_pgid, signal.SIGTERM)
            except OSError:
                pass
        if self.partial is not None:
            merge_partial(self.report, self.partial)
        write_report(self.report, self.out, self.budget)
        os._exit(3)


# ------------------------------------------------------------------ GPU parts (need CUDA and vLLM)
def gpu_environment() -> None:
    """vLLM's engine in this process (the actor's weights load into it directly) and the settings a script
    that initialised CUDA needs (docs/gpu.md)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    # apply_model passes a function to the engine's worker; newer vLLMs refuse callables without this setting
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")


def build_engine(model_dir: Path, max_model_len: int, capture_sizes: list[int], max_num_seqs: int,
                 draft_k: int = 0, gpu_memory_utilization: float = 0.3):
    """vLLM's offline engine on the dummy-weight model: CUDA graphs for ``capture_sizes`` only (token counts
    of a decode pass: batch x (1 + k) with speculation), ngram drafts of ``draft_k`` tokens (0: off). 0.3 of the
    GPU's memory holds the grid's largest cell (64 x 2.1k tokens of KV cache at ~112 KiB each) on an 80 GB card
    and leaves the actor's forward + backward room beside the engine."""
    from vllm import LLM

    spec = ({"speculative_config": {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 5,
                                    "num_speculative_tokens": draft_k}} if draft_k else {})
    return LLM(model=str(model_dir), load_format="dummy", dtype="bfloat16", max_model_len=max_model_len,
               skip_tokenizer_init=True, enable_prefix_caching=False, seed=0, max_num_seqs=max_num_seqs,
               gpu_memory_utilization=gpu_memory_utilization, disable_log_stats=False,
               compilation_config={"cudagraph_capture_sizes": sorted(set(capture_sizes))}, **spec)


def timed_generate(llm, prompts: list[list[int]], new_tokens: int) -> tuple[float, list[list[int]]]:
    """Greedy generation of exactly ``new_tokens`` tokens per prompt; wall seconds and the tokens."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, min_tokens=new_tokens, max_tokens=new_tokens, ignore_eos=True,
                            detokenize=False)
    start = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return time.perf_counter() - start, [list(o.outputs[0].token_ids) for o in outs]


def random_prompts(n: int, length: int, seed: int, vocab: int = 512) -> list[list[int]]:
    """Prompt token ids drawn from the project tokenizer's id range (its specials first)."""
    rng = np.random.default_rng(seed)
    return rng.integers(8, vocab, size=(n, length)).tolist()


def measure_decode_grid(llm, cells: list[DecodeCell], budget: Budget, report: Report, reserve_s: float) -> None:
    """Each cell prefill-only then whole; fills ``report.decode_rows`` and the decode and prefill coefficients."""
    done, full, pre = [], [], []
    for i, cell in enumerate(cells):
        if budget.left() < reserve_s:
            report.notes.append(f"decode grid stopped after {i} of {len(cells)} cells (budget)")
            break
        prompts = random_prompts(cell.batch, cell.context, seed=i)
        timed_generate(llm, prompts[:1], 2)  # this shape's first request: kernel selection, not timed
        pre.append(timed_generate(llm, prompts, 1)[0])
        full.append(timed_generate(llm, prompts, cell.new_tokens)[0])
        done.append(cell)
    if not done:
        return
    samples = decode_samples(done, full, pre)
    report.decode_rows = [{"batch": c.batch, "context": c.context, "new_tokens": c.new_tokens, "full_s": f,
                           "prefill_s": p, "pass_s": float(s)} for c, f, p, s in zip(done, full, pre, samples["pass_s"])]
    report.measured["prefill_tokens_per_s"] = prefill_tokens_per_s(done, pre)
    try:
        fit = fit_decode_coefficients(samples["batch"], samples["context_tokens"], samples["pass_s"])
    except ValueError as exc:
        report.notes.append(f"decode fit: {exc}")
        return
    report.measured.update(fit)
    for row, b, c in zip(report.decode_rows, samples["batch"], samples["context_tokens"]):
        row["fitted_s"] = fit["decode_step_s"] + b * fit["decode_s_per_token"] + c * fit["decode_s_per_context_token"]


def measure_actor(model_dir: Path, seqs: int, length: int, iters: int = 3):
    """The actor's forward + backward (sdpa, bf16, gradient checkpointing) on ``seqs`` x ``length`` tokens:
    seconds per iteration after one untimed warm-up, and the model (for the weight load)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model.gradient_checkpointing_enable()
    model.config.use_cache = False
    model.train()
    ids = torch.randint(8, 512, (seqs, length), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    seconds = []
    for i in range(iters + 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i:
            seconds.append(time.perf_counter() - start)
    return float(np.median(seconds)), torch.cuda.max_memory_allocated() / 2 ** 30, model


def measure_weight_load(llm, model) -> float:
    """Seconds to load the actor's parameters into the engine's model in this process (``LLM.apply_model``)."""
    import torch

    params = [(name, p.detach()) for name, p in model.named_parameters()]
    torch.cuda.synchronize()
    start = time.perf_counter()
    llm.apply_model(lambda m: m.load_weights(iter(params)))
    torch.cuda.synchronize()
    return time.perf_counter() - start


def vllm_parts(args, model_dir: Path, budget: Budget, report: Report, runs: set[str], save=lambda: None) -> None:
    """The coefficients part and the copy part's speculation-off rows on one engine, then one engine per
    draft length for the copy part; ``save()`` after each measurement (a kill keeps what finished)."""
    cells = decode_grid(args.batches, args.contexts, args.new_tokens)
    xs = random_prompts(args.copy_prompts, args.copy_prompt_len, seed=100)
    reserve = (part_estimate("step", []) if "step" in runs else 0.0) + (
        part_estimate("copy", args.draft_lengths) if "copy" in runs else 0.0)
    longest = max(max(args.contexts) + args.new_tokens, 2 * args.copy_prompt_len + 2 * args.copy_tokens) + 16
    seqs = max([*args.batches, args.copy_prompts])
    cost_model = given_coefficients(args)  # read once, before the first engine: a bad file fails at once
    llm = build_engine(model_dir, longest, [*args.batches, args.copy_prompts], seqs)
    targets = None
    try:
        if "coefficients" in runs:
            measure_decode_grid(llm, cells, budget, report, reserve_s=reserve + 40.0)
            save()
            seconds, peak_gb, model = measure_actor(model_dir, args.actor_seqs, args.actor_len)
            tokens = args.actor_seqs * args.actor_len
            report.actor = {"tokens": tokens, "seconds": seconds, "peak_gb": peak_gb, "gradient_checkpointing": True}
            report.measured["train_forward_tokens_per_s"] = train_forward_tokens_per_s(tokens, seconds, True)
            try:
                report.measured["weight_sync_load_weights_s"] = measure_weight_load(llm, model)
            except Exception as exc:  # an engine API this vLLM lacks must not lose the rest
                report.notes.append(f"weight load not measured ({type(exc).__name__}: {exc})")
            del model
            save()
        if "copy" in runs:
            targets = timed_generate(llm, xs, args.copy_tokens)[1]  # y: the model's own greedy continuation
            copy_rows(llm, 0, xs, targets, args.copy_tokens, report, cost_model)
            save()
    finally:
        release_engine(llm)
        llm = None  # the last reference: the next engine starts with this one's memory free
    for k in args.draft_lengths if targets is not None else []:
        if budget.left() < PART_ESTIMATE_S["copy_per_draft_length"] + (reserve - part_estimate("copy", args.draft_lengths)):
            report.notes.append(f"speculation stopped before draft length {k} (budget)")
            break
        llm = build_engine(model_dir, longest, [args.copy_prompts * (1 + k)], args.copy_prompts, draft_k=k)
        try:
            copy_rows(llm, k, xs, targets, args.copy_tokens, report, cost_model)
            save()
        finally:
            release_engine(llm)
            llm = None


def copy_rows(llm, k: int, xs: list[list[int]], targets: list[list[int]], new_tokens: int, report: Report,
              cost_model: GpuTimeCoefficients | None = None) -> None:
    """The ordinary workload (x -> T tokens) and the copy workload (x + y + x -> T tokens) on one engine; the
    cost model's seconds from this run's coefficients, else from ``cost_model`` (``--coefficients-json``)."""
    for workload, prompts in (("ordinary", xs), ("copy", copy_prompts(xs, targets))):
        before = spec_counters_from_metrics(llm.get_metrics())
        seconds, outs = timed_generate(llm, prompts, new_tokens)
        after = spec_counters_from_metrics(llm.get_metrics())
        counts = None if after is None else after.since(before)
        agree = agreement(outs, targets)
        report.spec_rows.append(spec_row(workload, k, seconds, len(prompts), [len(p) for p in prompts], counts,
                                         agree, report.coefficients() or cost_model))


def given_coefficients(args) -> GpuTimeCoefficients | None:
    """``--coefficients-json``'s coefficients (None without it)."""
    return None if args.coefficients_json is None else coefficients_from_json(args.coefficients_json)


def step_command(args, out: Path, model: Path, data: dict) -> tuple[list[str], dict]:
    """The one-GPU script at the bench's reduced shape (module docstring), through the shape bench's command."""
    k = args.step_draft_k
    extra = ["+actor_rollout_ref.rollout.engine_kwargs.vllm.speculative_config={method:ngram,prompt_lookup_min:2,"
             f"prompt_lookup_max:5,num_speculative_tokens:{k}}}", "actor_rollout_ref.rollout.disable_log_stats=False",
             "++actor_rollout_ref.model.override_config.attn_implementation=sdpa"]
    cmd, env = shape.launch_command(model, data, out, 1, extra)
    requests = args.step_prompts * 8
    env.update({"TRAIN_BATCH": str(args.step_prompts), "MAX_RESPONSE": str(args.step_response),
                "UPDATE_READING": "one_update", "COMPUTE_BUDGET": "0", "FAST_START": "1",
                "CUDAGRAPH_MAX": str(min(512, requests * (1 + k)))})
    if args.step_eager:
        env["ENFORCE_EAGER"] = "1"
    return cmd, env


def run_step(args, out: Path, budget: Budget, report: Report, watchdog: Watchdog, base_env: dict) -> None:
    """One IBPO step in its own process group, limited to what is left of the budget; its metrics parsed."""
    from toy_task.synthetic_task import write_task_parquets
    from verl_cpu.launch import read_metrics_jsonl

    out.mkdir(parents=True, exist_ok=True)
    model = shape.write_random_model(out / "model", device="cuda")
    cmd, env = step_command(args, out, model, write_task_parquets(out / "data", n_train=64, n_val=8))
    (out / "metrics.jsonl").unlink(missing_ok=True)
    limit = budget.left() - 20.0
    if limit < STEP_MIN_S:
        report.step_run = {"status": f"not started: {limit:.0f} s left, the step needs ~{STEP_MIN_S:.0f}"}
        return
    monitor = shape.PeakMemory()
    monitor.start()
    start = time.monotonic()
    # filled while the step runs (its log's tail and start-up times): what the watchdog writes if it fires first
    report.step_run = {"status": "running", "log": str(out / "train.log"), "log_tail": [], "startup_s": {},
                       "shape": {"prompts": args.step_prompts, "group": 8, "response": args.step_response,
                                 "draft_k": args.step_draft_k, "eager": bool(args.step_eager)}}
    status = run_child(cmd, limit, watchdog, out / "train.log", env={**base_env, **env}, target=report.step_run)
    monitor.stop()
    report.step_run.update({"status": status, "seconds": time.monotonic() - start, "peak_mib": monitor.peak_mib})
    metrics = read_metrics_jsonl(out / "metrics.jsonl") if (out / "metrics.jsonl").exists() else {}
    report.step_rows = step_report(metrics)
    sync = [r["update_weights"] for r in report.step_rows if r.get("update_weights")]
    if sync:
        report.measured["weight_sync_s"] = float(np.median(sync))


def source_tree_id(root: Path = ROOT) -> str:
    """Git's tree id of the files as they are (tracked and untracked, ``.gitignore`` applied), written through a
    temporary index so the checkout's own is untouched: equal to ``git rev-parse <commit>^{tree}`` of the commit
    whose files ran, even where the copy's ``.git`` is older than its files (a GPU machine sent a working tree:
    ``git describe --dirty`` then names the old commit). A file the checkout does not ignore counts: an offline
    stack carried into the checkout must be ignored (``.gpu/`` is, in ``.gitignore``). "unknown" without git."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        try:
            for cmd in (["add", "-A", "."], ["write-tree"]):
                done = subprocess.run(["git", "-C", str(root), *cmd], env=env, capture_output=True, text=True,
                                      timeout=60)
                if done.returncode != 0:
                    return "unknown"
        except (OSError, subprocess.SubprocessError):
            return "unknown"
    return done.stdout.strip() or "unknown"


def run_meta(args) -> dict:
    import torch

    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    versions = {}
    for name in ("torch", "vllm", "verl", "transformers"):
        try:
            versions[name] = __import__(name).__version__
        except Exception:  # a missing package is reported, not fatal
            versions[name] = "absent"
    try:  # nvidia-smi: this process keeps no CUDA context (the children need the memory)
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        gpu = torch.cuda.get_device_name(0)
    return {"gpu": gpu, "commit": commit, "source_tree": source_tree_id(), "budget_s": args.budget_s,
            "versions": versions, "model_shape": MODEL_SHAPE,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("outputs/bench_gpu"))
    p.add_argument("--budget-s", type=positive_float, default=480.0, help="whole command, start-ups included (default 8 min)")
    p.add_argument("--skip", nargs="*", default=[], choices=list(PARTS))
    p.add_argument("--batches", type=positive_int, nargs="+", default=[1, 8, 32, 64], help="decode grid: sequences per pass")
    p.add_argument("--contexts", type=positive_int, nargs="+", default=[256, 2048], help="decode grid: prompt tokens")
    p.add_argument("--new-tokens", type=positive_int, default=64, help="decode grid: tokens generated per sequence")
    p.add_argument("--actor-seqs", type=positive_int, default=2)
    p.add_argument("--actor-len", type=positive_int, default=4096)
    p.add_argument("--draft-lengths", type=int, nargs="*", default=[4, 8], help="ngram num_speculative_tokens")
    p.add_argument("--copy-prompts", type=positive_int, default=16)
    p.add_argument("--copy-prompt-len", type=positive_int, default=256)
    p.add_argument("--copy-tokens", type=positive_int, default=512, help="T: the target's and the copy's length")
    p.add_argument("--coefficients-json", type=Path, default=None,
                   help="an earlier run's bench_gpu.json: the copy part's cost-model seconds when --skip coefficients")
    p.add_argument("--step-prompts", type=positive_int, default=2, help="prompts of the step (x G = 8 responses)")
    p.add_argument("--step-response", type=positive_int, default=2048, help="the step's response length (forced)")
    p.add_argument("--step-draft-k", type=positive_int, default=8)
    p.add_argument("--step-eager", action="store_true",
                   help="the step's vLLM without CUDA graphs or compile (the scripts' ENFORCE_EAGER=1): a shorter "
                        "start-up, a slower decode; its generation seconds are then eager-mode seconds")
    p.add_argument("--inner-vllm", default=None, help=argparse.SUPPRESS)  # the child's partial-results file
    p.add_argument("--inner-parts", nargs="*", default=[], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if any(k < 1 for k in args.draft_lengths):  # draft lengths: >= 1, with their own message
        p.error("--draft-lengths: each must be >= 1 (speculation off is always measured)")
    return args


PARTIAL_FIELDS = ("measured", "decode_rows", "actor", "spec_rows", "notes")


def save_partial(report: Report, path: Path) -> None:
    """What the vLLM/actor child has measured so far, for the parent (written whole, then renamed)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({k: getattr(report, k) for k in PARTIAL_FIELDS}, default=float))
    tmp.replace(path)


def merge_partial(report: Report, path: Path) -> None:
    """The child's measurements into the parent's report (nothing when it wrote none)."""
    if not path.is_file():
        return
    data = json.loads(path.read_text())
    report.measured.update(data["measured"])
    report.decode_rows, report.actor = data["decode_rows"], data["actor"]
    report.spec_rows = data["spec_rows"]
    report.notes.extend(data["notes"])


def inner_vllm_main(args) -> int:
    """The child: the coefficients and copy parts in a process of their own, so that all the GPU memory vLLM's
    in-process engine and the actor held is free when it exits (the step's verl run needs it)."""
    gpu_environment()
    budget = Budget(args.budget_s)
    report = Report({}, [])
    runs = set(args.inner_parts)
    path = Path(args.inner_vllm)
    try:
        vllm_parts(args, args.out.resolve() / "model", budget, report, runs, save=lambda: save_partial(report, path))
    except Exception as exc:  # reported with what finished
        report.notes.append(f"vLLM/actor parts failed: {type(exc).__name__}: {exc}")
    save_partial(report, path)
    return 0


# The first line of each, as Ray, vLLM 0.24 and the pinned verl print them (best effort: a marker that never shows
# stays absent): the step's start-up timeline survives in the JSON even where its log is not copied off the machine.
STARTUP_MARKERS = {
    "pre_flight_passed": re.compile(r"\[recipe\] pre-flight checks passed"),
    "ray_started": re.compile(r"Started a local Ray instance"),
    "vllm_engine_ready": re.compile(r"init engine \(profile"),
    "first_step_logged": re.compile(r"\bstep:1 - "),
}


READER_JOIN_S = 5.0  # how long a finished child's reader may drain the pipe before the caller goes on


class StampedLog:
    """A child's output written to ``path`` as it arrives, each line prefixed with the seconds since the child
    started; ``target`` (a report's dict, or None) gets the last ``keep`` lines as ``log_tail`` and, as
    ``startup_s``, when the first line of each :data:`STARTUP_MARKERS` came."""

    def __init__(self, path: Path, target: dict | None = None, keep: int = 80):
        self.path, self.target, self.keep = path, target, keep
        self.start = time.monotonic()
        self.first_s: dict[str, float] = {}
        self.tail: list[str] = []

    def follow(self, stream) -> threading.Thread:
        """Reads ``stream`` (bytes, line by line) to its end in a daemon thread: a grandchild that outlives the
        child and keeps the pipe open cannot hold up the caller."""
        thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        thread.start()
        return thread

    def _read(self, stream) -> None:
        with open(self.path, "w") as log:
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                elapsed = time.monotonic() - self.start
                stamped = f"[{elapsed:8.1f} s] {line}"
                log.write(stamped + "\n")
                log.flush()
                self.tail = [*self.tail[-(self.keep - 1):], stamped]
                for name, pattern in STARTUP_MARKERS.items():
                    if name not in self.first_s and pattern.search(line):
                        self.first_s[name] = round(elapsed, 1)
                if self.target is not None:  # new objects, assigned whole: the watchdog may write them any time
                    # (run_step creates both keys first, so the dict never changes size while it is written)
                    self.target["log_tail"] = list(self.tail)
                    self.target["startup_s"] = dict(self.first_s)


def run_child(cmd: list[str], limit_s: float, watchdog: Watchdog, log_path: Path, env: dict | None = None,
              target: dict | None = None) -> str:
    """A child in its own process group, ended (TERM, then KILL) when ``limit_s`` passes; its status. Its output
    goes to ``log_path`` through :class:`StampedLog` (``target``: where its tail and start-up times go)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT,
                            start_new_session=True)
    reader = StampedLog(log_path, target).follow(proc.stdout)
    watchdog.child_pgid = proc.pid
    try:
        proc.wait(timeout=max(1.0, limit_s))
        return f"exited {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        return f"stopped at the budget after {limit_s:.0f} s"
    finally:
        watchdog.child_pgid = None
        reader.join(timeout=READER_JOIN_S)


def vllm_child(args, out: Path, budget: Budget, report: Report, watchdog: Watchdog, runs: set[str]) -> None:
    """Runs :func:`inner_vllm_main` with what the parts before the step may use of the budget."""
    shape.write_model_config(out / "model")
    partial = out / "vllm_parts.partial.json"
    partial.unlink(missing_ok=True)
    watchdog.partial = partial
    limit = budget.left() - (part_estimate("step", []) if "step" in runs else 0.0)
    argv = [sys.executable, str(Path(__file__).resolve()), *child_options(args), "--out", str(out),
            "--budget-s", str(limit), "--inner-vllm", str(partial), "--inner-parts", *sorted(runs & {"coefficients", "copy"})]
    status = run_child(argv, limit + 30.0, watchdog, out / "vllm_parts.log")
    merge_partial(report, partial)
    watchdog.partial = None
    if not status.startswith("exited 0"):
        report.notes.append(f"vLLM/actor child {status} (log {out / 'vllm_parts.log'})")


def child_options(args) -> list[str]:
    """The measurement options of this command line, for the vLLM/actor child."""
    out = []
    for name in ("batches", "contexts", "new_tokens", "actor_seqs", "actor_len", "draft_lengths", "copy_prompts",
                 "copy_prompt_len", "copy_tokens", "coefficients_json"):
        value = getattr(args, name)
        if value is None:
            continue
        out += [f"--{name.replace('_', '-')}", *(str(v) for v in (value if isinstance(value, list) else [value]))]
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.inner_vllm:
        return inner_vllm_main(args)
    budget = Budget(args.budget_s)
    plan = plan_parts(args.budget_s, args.skip, args.draft_lengths)
    reason = shape.skip_reason()
    if reason is not None:
        print(f"bench_gpu: skipped: {reason}")
        print("\n".join(f"  {p.name}: {'would run' if p.runs else p.reason}" for p in plan))
        return 0
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    report = Report(run_meta(args), plan)
    watchdog = Watchdog(report, out, budget)
    watchdog.start()
    runs = {p.name for p in plan if p.runs}
    try:
        if runs & {"coefficients", "copy"}:
            vllm_child(args, out, budget, report, watchdog, runs)
        if "step" in runs:
            try:
                run_step(args, out / "step", budget, report, watchdog, dict(os.environ))
            except Exception as exc:  # reported with what finished
                report.notes.append(f"step part failed: {type(exc).__name__}: {exc}")
    finally:
        watchdog.done.set()
    write_report(report, out, budget)
    return 0 if not any("failed" in n or "stopped" in n for n in report.notes) else 1


if __name__ == "__main__":
    sys.exit(main())
