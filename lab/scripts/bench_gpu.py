#!/usr/bin/env python
"""What a GPU user needs to know, in one command that fits a short GPU slot: one table, a JSON beside it.

    python lab/scripts/bench_gpu.py                            # the step part: IBPO, IBPO, GSPO in one launch (6 minutes)
    python lab/scripts/bench_gpu.py --budget-s 430             # the same, then the copy workload on one k = 8 engine
    python lab/scripts/bench_gpu.py --step-vllm full-graphs    # a second slot: no compile, decode in full CUDA graphs
    python lab/scripts/bench_gpu.py --skip step --budget-s 480 --draft-lengths 4 8   # the cost model and the copy workload

The step part is designed to finish in 6 minutes on a fresh H100/H200, start-ups included (docs/gpu.md, "The step
part in one slot", estimates it line by line from the H200 logs; it has not run on a GPU since). The coefficients
were measured on an H200 at c9ae526 and ship as ``compute_budget.cost_model=measured:H200``, so the default skips
them.

No downloads: a Qwen3-1.7B-shaped model (``bench_one_gpu_shape.QWEN3_1P7B_SHAPE``) with random weights (vLLM's
``load_format=dummy``; the actor and the trainer's checkpoint from ``transformers``' ``from_config``), a tokenizer of
its whole vocabulary with an exact round trip (``verl_cpu.tiny_assets.build_full_vocab_tokenizer``) and the
synthetic task. Three parts, each skippable (``--skip``), planned in this order while the budget lasts
(:func:`plan_parts`; the estimates are planning guesses, :data:`PART_ESTIMATE_S`):

- **coefficients** (one vLLM engine and the actor in a child process, no verl start-up): seconds per decode pass
  on a grid of batch sizes x context lengths, fitted by non-negative least squares to ``decode_step_s +
  B·decode_s_per_token + C·decode_s_per_context_token`` (:func:`compute_accounting.gpu_time.fit_decode_coefficients`);
  prefill tokens per second; the actor's forward + backward (``train_forward_tokens_per_s``); the in-process weight
  load (a lower bound of verl's weight sync). Written as ``coefficients`` in the JSON
  (``compute_accounting.gpu_time.coefficients_from_json`` reads it; what this run did not measure keeps its roofline
  value and says so in ``sources``).
- **copy** (speculation's acceptance where the model copies; random weights never do otherwise): for prompt x, y is
  the model's greedy continuation; the copy request ``x + y + x`` decodes greedily (a correction copying its target;
  SpecRL's drafts, verl PR #4535). Per ngram draft length k (one engine each): seconds, decode steps, accepted
  tokens per decode step, acceptance rate (the trainer's ``rollout/spec_*`` definitions), ``agreement`` (whether
  the model did repeat y), speed-up over speculation off (where it shares the coefficients part's engine: no step
  between them) and the cost model's seconds.
- **step** (``recipe/ibpo/run_ibpo_qwen3_1p7b_1gpu.sh`` through ``bench_one_gpu_shape.launch_command``, one
  launch for three steps): the bench-only method ``ibpo_then_gspo`` (``lab/scripts/bench_methods``, registered through
  ``RECIPE_METHOD_MODULES``, run with the script's ``METHOD``) trains IBPO, IBPO, then GSPO, so every start-up is
  paid once and both methods' step times come from one machine and launch. The script's shape at
  ``--step-prompts`` prompts x G = 8 and ``--step-response`` tokens (forced, ``ignore_eos``), ``FAST_START=1`` (the
  actor without compile), vLLM ``--step-vllm`` (default eager), one agent-loop and one reward worker,
  ``ibpo.correct_groups=all`` (random weights: every response wrong, every one corrected), ngram speculation
  (``--step-draft-k``; 0: off) with vLLM's stats on, sdpa attention, vLLM's log at INFO (verl sets WARN).
  From the run's metrics JSONL (:func:`step_report`), per step: which method ran, per-phase seconds, correction /
  main generation and share of the step, corrections run / wrong responses, ``rollout/spec_*``,
  ``training/rollout_probs_diff_mean`` (actor vs vLLM in bf16), the actor's peak memory and ``nvidia-smi``'s peak
  over the run; its start-up timeline (:class:`StampedLog`: the log's tail and when each :data:`STARTUP_MARKERS`
  line came), also when the budget stops it. ``tests/e2e/test_bench_gpu_step_cpu.py`` runs the same command on
  CPU through ``verl_cpu``. With a step, the copy part runs after it (the optional tail) on one engine per draft
  length, the first without a speculation-off engine.

The coefficients and copy parts run in a child process of this script (vLLM's engine in-process there, so the
actor's weights load into it directly), which leaves the GPU free for the step's verl run when it exits; it
saves what it measured after each measurement. This process imports neither vLLM nor verl (``skip_reason`` looks
vLLM up with ``importlib.util.find_spec``). ``--budget-s``: a part starts only if its estimate fits what is left;
each child's run is limited to its share; a watchdog writes the table and JSON of what is done (the
child's saved results included) and exits at the budget whatever hangs.
Without CUDA or vLLM it prints why and exits 0 (the planning, fit, parsing and table are tested on CPU:
tests/unit/test_bench_gpu.py).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "lab" / "scripts"))
from option_types.cli import nonnegative_int, positive_float, positive_int  # noqa: E402

BENCH_METHODS = ROOT / "lab" / "scripts" / "bench_methods"  # the step part's bench-only method (ibpo_then_gspo)
sys.path.insert(0, str(BENCH_METHODS))
import bench_one_gpu_shape as shape  # noqa: E402  (the model shape, the launch command, the peak-memory poller)
from ibpo_then_gspo import GSPO_FROM_STEP, IBPO_ENABLED_METRIC, WORKERS_READY  # noqa: E402  (the bench method)
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

PARTS = ("coefficients", "step", "copy")
# Planning estimates (seconds). The coefficients part: 114 s on an H200 at c9ae526 (vLLM's import ~20 s, its engine
# ~67 s with compile and graphs, grid, actor and weight load ~27 s); an engine for the copy part ~60 s there before
# its two workloads (74eb390). The step part (IBPO, IBPO, GSPO in one launch, vLLM eager, 1 + 1 workers): ~330 s,
# an estimate line by line from the H200 logs of 86eda05 and 74eb390 (docs/gpu.md, "The step part in one slot"),
# not a measurement; its start-up alone is estimated at ~225 s, so below STEP_MIN_S it is not started.
PART_ESTIMATE_S = {"coefficients": 120.0, "copy_per_draft_length": 70.0, "step": 330.0}
STEP_MIN_S = 240.0
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
        sources[name] = f"measured: lab/scripts/bench_gpu.py {part_of[key]}, {gpu_name}, {commit}{note}"
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
        row["method"] = {1.0: "IBPO", 0.0: "GSPO"}.get(m.get(IBPO_ENABLED_METRIC), "")  # "": not the bench method
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
    mode = run.get("shape", {}).get("vllm", "compiled")
    if mode != "compiled":
        lines.append(f"step: vLLM {mode} (--step-vllm): its generation seconds are {mode} decode's, not a compiled "
                     "engine's")
    lines += startup_line(run)
    if any(r.get("spec_stats_reported") for r in report.step_rows):
        lines.append("rollout/spec_*: random weights propose few ngram drafts and accept ~none (near-uniform tokens over "
                     "151,936 ids): they show what drafting costs, not a trained model's acceptance (the copy part does)")
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
    lines += ["", "## The step part: IBPO, IBPO, GSPO in one launch of the trainer", *step_lines(report)]
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
        mode = report.step_run.get("shape", {}).get("vllm", "compiled")
        rows.append(("step", f"step {r['step']} seconds: step, main gen, correction gen, actor update (vLLM {mode})",
                     f"{r['step_s']:.1f}, "
                     f"{r['main_gen']:.1f}, {r['correction_gen']:.1f}, {r['update_actor']:.1f}"))
        rows.append(("step", f"step {r['step']} training/rollout_probs_diff_mean",
                     fmt(r["rollout_probs_diff_mean"], ".4g")))
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
    draft length for the copy part (without the coefficients part, the first engine is the first draft length's);
    ``save()`` after each measurement (a kill keeps what finished)."""
    cells = decode_grid(args.batches, args.contexts, args.new_tokens)
    xs = random_prompts(args.copy_prompts, args.copy_prompt_len, seed=100)
    reserve = part_estimate("copy", args.draft_lengths) if "copy" in runs else 0.0
    longest = max(max(args.contexts) + args.new_tokens, 2 * args.copy_prompt_len + 2 * args.copy_tokens) + 16
    seqs = max([*args.batches, args.copy_prompts])
    cost_model = given_coefficients(args)  # read once, before the first engine: a bad file fails at once
    # without the coefficients part the copy part's first engine is its first draft length's (one engine for k = 8)
    first_k = 0 if "coefficients" in runs or not args.draft_lengths else args.draft_lengths[0]
    llm = build_engine(model_dir, longest, [*args.batches, args.copy_prompts * (1 + first_k)], seqs, draft_k=first_k)
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
            copy_rows(llm, first_k, xs, targets, args.copy_tokens, report, cost_model)
            save()
    finally:
        release_engine(llm)
        llm = None  # the last reference: the next engine starts with this one's memory free
    for k in [k for k in args.draft_lengths if k != first_k] if targets is not None else []:
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


# The step's vLLM (--step-vllm): the one-GPU script's environment and overrides for each. FAST_START=1 always (the
# actor without torch.compile; CUDA graphs, where captured, for the step's batch sizes only).
STEP_VLLM = {
    "eager": ({"ENFORCE_EAGER": "1"}, []),  # no compile, no CUDA graphs: the shortest start-up, the slowest decode
    # no compile, decode passes in full CUDA graphs (prefill eager): most of the graphs' decode speed without compile
    "full-graphs": ({}, ["+actor_rollout_ref.rollout.engine_kwargs.vllm.compilation_config={mode:0,"
                         "cudagraph_mode:FULL_DECODE_ONLY}"]),
    "compiled": ({}, []),  # verl's default: compiled model, piecewise and full graphs (the start-up of a real run)
}
STEP_COUNT = GSPO_FROM_STEP  # IBPO, IBPO, GSPO
STEP_MAX_PROMPT = 1024  # the one-GPU script's MAX_PROMPT


def step_command(args, out: Path, model: Path, data: dict) -> tuple[list[str], dict]:
    """The one-GPU script at the bench's reduced shape (module docstring) through the shape bench's command: one
    launch of the bench-only ``ibpo_then_gspo`` method for IBPO, IBPO, GSPO, one agent-loop and one reward worker,
    vLLM's INFO log on (its engine-ready line is a start-up marker; verl sets WARN)."""
    k = args.step_draft_k
    vllm_env, vllm_extra = STEP_VLLM[args.step_vllm]
    spec = ([f"+actor_rollout_ref.rollout.engine_kwargs.vllm.speculative_config={{method:ngram,prompt_lookup_min:2,"
             f"prompt_lookup_max:5,num_speculative_tokens:{k}}}"] if k else [])
    extra = [*spec, *vllm_extra, "actor_rollout_ref.rollout.disable_log_stats=False",
             "++actor_rollout_ref.model.override_config.attn_implementation=sdpa",
             "actor_rollout_ref.rollout.agent.num_workers=1", "reward.num_workers=1"]
    cmd, env = shape.launch_command(model, data, out, STEP_COUNT, extra, STEP_MAX_PROMPT, args.step_response)
    requests = args.step_prompts * 8
    env.update({"TRAIN_BATCH": str(args.step_prompts),
                "UPDATE_READING": "one_update", "COMPUTE_BUDGET": "0", "FAST_START": "1",
                "CUDAGRAPH_MAX": str(min(512, requests * (1 + k))), "METHOD": "ibpo_then_gspo",
                "RECIPE_METHOD_MODULES": "ibpo_then_gspo.method", "VLLM_LOGGING_LEVEL": "INFO",
                "PYTHONPATH": os.pathsep.join(p for p in (str(BENCH_METHODS), str(ROOT), os.environ.get("PYTHONPATH"))
                                              if p),
                **vllm_env})
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
                                 "draft_k": args.step_draft_k, "vllm": args.step_vllm}}
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
    for name in ("torch", "vllm", "verl", "transformers"):  # from the installed metadata: nothing imported here
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:  # a missing package is reported, not fatal
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
    p.add_argument("--budget-s", type=positive_float, default=360.0,
                   help="whole command, start-ups included (default 6 min)")
    p.add_argument("--skip", nargs="*", default=["coefficients"], choices=list(PARTS),
                   help="parts not to run (default: coefficients, measured on an H200 at c9ae526 and shipped as "
                        "compute_budget.cost_model=measured:H200; `--skip` alone runs every part the budget fits)")
    p.add_argument("--batches", type=positive_int, nargs="+", default=[1, 8, 32, 64], help="decode grid: sequences per pass")
    p.add_argument("--contexts", type=positive_int, nargs="+", default=[256, 2048], help="decode grid: prompt tokens")
    p.add_argument("--new-tokens", type=positive_int, default=64, help="decode grid: tokens generated per sequence")
    p.add_argument("--actor-seqs", type=positive_int, default=2)
    p.add_argument("--actor-len", type=positive_int, default=4096)
    p.add_argument("--draft-lengths", type=int, nargs="*", default=[8], help="ngram num_speculative_tokens")
    p.add_argument("--copy-prompts", type=positive_int, default=16)
    p.add_argument("--copy-prompt-len", type=positive_int, default=256)
    p.add_argument("--copy-tokens", type=positive_int, default=512, help="T: the target's and the copy's length")
    p.add_argument("--coefficients-json", type=Path, default=None,
                   help="an earlier run's bench_gpu.json: the copy part's cost-model seconds when --skip coefficients")
    p.add_argument("--step-prompts", type=positive_int, default=2, help="prompts of the step (x G = 8 responses)")
    p.add_argument("--step-response", type=positive_int, default=512, help="the step's response length (forced)")
    p.add_argument("--step-draft-k", type=nonnegative_int, default=8, help="ngram draft length of the step (0: off)")
    p.add_argument("--step-vllm", choices=list(STEP_VLLM), default="eager",
                   help="the step's vLLM: eager (no compile, no CUDA graphs: the shortest start-up, the slowest "
                        "decode), full-graphs (no compile, decode in full CUDA graphs) or compiled (verl's default)")
    p.add_argument("--inner-vllm", default=None, help=argparse.SUPPRESS)  # the child's partial-results file
    p.add_argument("--inner-parts", nargs="*", default=[], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if any(k < 1 for k in args.draft_lengths):  # draft lengths: >= 1, with their own message
        p.error("--draft-lengths: each must be >= 1 (speculation off: the coefficients part's engine)")
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
    "task_runner_started": re.compile(r"TaskRunner hostname:"),  # recipe.common.main.MethodTaskRunner.run
    "vllm_engine_ready": re.compile(r"init engine \(profile"),  # vLLM's INFO line (step_command sets INFO)
    "workers_ready": re.compile(re.escape(WORKERS_READY)),  # the bench method's own, after verl's init_workers
    "first_step_logged": re.compile(r"\bstep:1 - "),
    "last_step_logged": re.compile(rf"\bstep:{STEP_COUNT} - "),
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


def vllm_child(args, out: Path, budget: Budget, report: Report, watchdog: Watchdog, parts: set[str],
               reserve_s: float = 0.0) -> None:
    """Runs :func:`inner_vllm_main` for ``parts`` (coefficients, copy) with the budget less ``reserve_s`` (the
    step's estimate when the step comes after)."""
    shape.write_model_config(out / "model")
    partial = out / "vllm_parts.partial.json"
    partial.unlink(missing_ok=True)
    watchdog.partial = partial
    limit = budget.left() - reserve_s
    argv = [sys.executable, str(Path(__file__).resolve()), *child_options(args), "--out", str(out),
            "--budget-s", str(limit), "--inner-vllm", str(partial), "--inner-parts", *sorted(parts)]
    status = run_child(argv, limit + 30.0, watchdog, out / "vllm_parts.log")
    merge_partial(report, partial)
    watchdog.partial = None
    if not status.startswith("exited 0"):
        report.notes.append(f"vLLM/actor child {status} (log {out / 'vllm_parts.log'})")


def vllm_child_parts(runs: set[str]) -> tuple[set[str], set[str]]:
    """The vLLM/actor child's parts before the step and after it: the coefficients part first, the copy part on
    its engine when no step runs, else after the step (the optional tail, on its own engines)."""
    first = runs & ({"coefficients"} if "step" in runs else {"coefficients", "copy"})
    return first, runs & {"copy"} - first


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
    first, tail = vllm_child_parts(runs)
    try:
        if first:
            vllm_child(args, out, budget, report, watchdog, first,
                       reserve_s=part_estimate("step", []) if "step" in runs else 0.0)
        if "step" in runs:
            try:
                run_step(args, out / "step", budget, report, watchdog, dict(os.environ))
            except Exception as exc:  # reported with what finished
                report.notes.append(f"step part failed: {type(exc).__name__}: {exc}")
        if tail:
            vllm_child(args, out, budget, report, watchdog, tail)
    finally:
        watchdog.done.set()
    write_report(report, out, budget)
    return 0 if not any("failed" in n or "stopped" in n for n in report.notes) else 1


if __name__ == "__main__":
    sys.exit(main())
