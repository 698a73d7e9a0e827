"""Modelled GPU seconds of one RL step, per phase, from the work it did (paper App. B compares methods at GPU
time; the FLOP counter of :mod:`compute_accounting.flops` prices every token alike, which a GPU does not).

Why a second axis. A GPU runs three kinds of work at very different cost per token:

- **decode** is bound by memory traffic: every forward pass reads the weights once (whatever the batch) and
  each sequence's KV cache; a pass over B sequences costs about ``decode_step_s + B·decode_s_per_token +
  Σcontext·decode_s_per_context_token``. A speculative (prompt-lookup) pass that verifies a draft of k tokens
  computes k more tokens in the same pass: it costs ``k·decode_s_per_token`` more and may emit up to k + 1
  tokens, so a correction that copies its target needs fewer passes (``ibpo.lookup_decoding``'s exact replay
  counts them).
- **prefill** (the prompt of a request, a correction's long prompt x~ included) is compute-bound and runs all
  its tokens in one pass: ``prefill_tokens_per_s`` tokens per second.
- **training** (old-log-prob and reference forwards, the actor's forward + backward, the counterfactual
  forwards) is compute-bound: ``train_forward_tokens_per_s`` forward-equivalent tokens per second, with the
  pass counts of :func:`compute_accounting.flops.step_flops` (update 3 forward-equivalents, 4 with gradient
  checkpointing).
- **weight sync** (actor → rollout engine) costs ``weight_sync_s`` per step.

Every coefficient names where it came from (:class:`GpuTimeCoefficients.sources`): a measured row of
``lab/scripts/bench_gpu.py`` (a JSON it writes, :func:`coefficients_from_json`; the shipped ones:
:func:`shipped_coefficients`) or the **roofline** of
:func:`roofline_coefficients` for a named GPU and model shape (peak dense bf16 FLOP/s and HBM bandwidth from
the vendor's data sheet, with the efficiencies written in :data:`ROOFLINE_EFFICIENCY`), marked ``roofline``
until a measurement replaces it.

What the model leaves out (it is a model, not a simulator): prefix caching (each request's prompt is
prefilled in full: an upper bound for groups sharing a prompt), attention's quadratic prefill term (prompts of a
few thousand tokens at most), scheduler overheads beyond the per-pass constant, and memory pressure
(preemption). Requests are decoded in waves of at most ``max_num_seqs`` (vLLM's batch cap), in the order given;
a wave takes as many passes as its longest request.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from compute_accounting.flops import StepWork, check_step_work, token_counts
from option_types import matches


@dataclass(frozen=True)
class GpuSpec:
    """A GPU's data-sheet numbers the roofline needs."""

    name: str
    peak_bf16_flops: float  # dense bf16 tensor-core FLOP/s
    hbm_bytes_per_s: float


# Vendor data sheets (dense, no sparsity): H100 SXM5 989.4 TFLOP/s bf16, 3.35 TB/s HBM3; H200 SXM 989.4 TFLOP/s,
# 4.8 TB/s HBM3e.
GPUS: dict[str, GpuSpec] = {
    "H100-SXM": GpuSpec("H100-SXM", 989.4e12, 3.35e12),
    "H200": GpuSpec("H200", 989.4e12, 4.8e12),
}


@dataclass(frozen=True)
class ServingShape:
    """What decode's memory traffic and every phase's compute need of a model (bf16 weights and KV cache)."""

    name: str
    matmul_params: int  # N of the FLOP counter: weight-matrix parameters used per token (tied LM head once)
    weight_bytes: float  # bytes one forward pass reads: every weight matrix it uses, bf16
    kv_bytes_per_token: float  # K and V of one token over all layers, bf16: 2 · layers · kv_heads · head_dim · 2

    def __post_init__(self) -> None:
        for name, least in (("matmul_params", 0.0), ("weight_bytes", 0.0), ("kv_bytes_per_token", None)):
            value = getattr(self, name)
            ok = is_number(value) and (value > least if least is not None else value >= 0)
            if not ok:
                raise ValueError(f"ServingShape {self.name!r}: {name}={value!r} must be a finite number "
                                 f"{'> 0' if least is not None else '>= 0'}")


def is_number(value: Any) -> bool:
    """A finite real number that is not a bool (``True`` is an int to Python, not a count or a cost)."""
    return matches(value, float) and math.isfinite(value)


def serving_shape(name: str, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int,
                  intermediate: int, vocab: int) -> ServingShape:
    """A Qwen3-style dense decoder's :class:`ServingShape`: per layer q/o (hidden × heads·head_dim each), k/v
    (hidden × kv_heads·head_dim each), gated MLP (3 · hidden × intermediate); one LM head (hidden × vocab)."""
    per_layer = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + 3 * hidden * intermediate
    n = layers * per_layer + hidden * vocab
    return ServingShape(name, int(n), 2.0 * n, kv_bytes_per_token(layers, kv_heads, head_dim))


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int) -> float:
    """K and V of one token over all layers, bf16."""
    return float(2 * layers * kv_heads * head_dim * 2)


def mixture_of_experts_shape(name: str, matrices: int, active_matrices: int, layers: int, kv_heads: int,
                             head_dim: int) -> ServingShape:
    """A mixture-of-experts decoder's :class:`ServingShape` from its weight-matrix parameters (``matrices``, the
    input embedding excluded unless tied, as for a dense model) and those a token computes with
    (``active_matrices``: :func:`compute_accounting.flops.active_matmul_params`). Memory: a decode pass over B
    sequences reads a share 1 − (1 − k/E)^B of each layer's E experts (≥ 98% for Qwen3-30B-A3B, k/E = 8/128, from
    B = 64), so at the batch sizes of RL rollouts it reads every weight matrix: bytes = 2 · matrices."""
    if not 0 < active_matrices <= matrices:
        raise ValueError(f"{name}: {active_matrices} active of {matrices} weight-matrix parameters")
    return ServingShape(name, active_matrices, 2.0 * matrices, kv_bytes_per_token(layers, kv_heads, head_dim))


# config.json of each Hugging Face model (hidden_size, num_hidden_layers, num_attention_heads,
# num_key_value_heads, head_dim, intermediate_size, vocab_size)
MODEL_SHAPES: dict[str, ServingShape] = {
    "Qwen3-1.7B": serving_shape("Qwen3-1.7B", 2048, 28, 16, 8, 128, 6144, 151936),
    "Qwen3-8B": serving_shape("Qwen3-8B", 4096, 36, 32, 8, 128, 12288, 151936),
    "Qwen3-32B": serving_shape("Qwen3-32B", 5120, 64, 64, 8, 128, 25600, 151936),
}

# The roofline's assumed efficiencies (share of the data-sheet peak a phase reaches). Typical of vLLM decode and
# FSDP training on H100s at these model sizes; replaced by lab/scripts/bench_gpu.py's measured coefficients.
ROOFLINE_EFFICIENCY = {"hbm": 0.8, "decode_compute": 0.5, "prefill_compute": 0.5, "train_compute": 0.4,
                       "weight_sync_bytes_per_s": 25e9, "decode_launch_s": 2e-4}


@dataclass(frozen=True)
class GpuTimeCoefficients:
    """Seconds per unit of work of each phase (module docstring); ``sources`` names each one's origin."""

    decode_step_s: float  # one decode forward pass, whatever its batch: weights read + launch
    decode_s_per_token: float  # each token a decode pass computes (one per sequence, plus each draft token verified)
    decode_s_per_context_token: float  # each KV-cache token a decode pass reads
    prefill_tokens_per_s: float  # prompt tokens prefilled per second
    train_forward_tokens_per_s: float  # forward-equivalent tokens per second of the actor (backward = 2 forwards)
    weight_sync_s: float  # actor -> rollout weight sync, per step
    max_num_seqs: int = 256  # vLLM's batch cap: requests decode in waves of at most this many
    gpus: int = 1  # GPUs the coefficients were measured on (seconds are wall seconds of that many GPUs)
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name in ("sources",):
                continue
            value = getattr(self, f.name)
            if not (is_number(value) and value >= 0):
                raise ValueError(f"GpuTimeCoefficients.{f.name}={value!r} must be a finite number >= 0")
        for positive in ("prefill_tokens_per_s", "train_forward_tokens_per_s", "max_num_seqs", "gpus"):
            if getattr(self, positive) <= 0:
                raise ValueError(f"GpuTimeCoefficients.{positive} must be > 0")
        for count in ("max_num_seqs", "gpus"):  # a batch cap and a GPU count are whole numbers
            if not matches(getattr(self, count), int):
                raise ValueError(f"GpuTimeCoefficients.{count}={getattr(self, count)!r} must be an integer >= 1")
        if not (isinstance(self.sources, Mapping) and all(isinstance(v, str) for v in self.sources.values())):
            raise ValueError(f"GpuTimeCoefficients.sources={self.sources!r} must map coefficient names to strings")

    def describe(self) -> str:
        """One line per coefficient with its value and source."""
        return "\n".join(f"{f.name} = {getattr(self, f.name):.4g}  ({self.sources.get(f.name, 'unstated')})"
                         for f in fields(self) if f.name != "sources")


def roofline_coefficients(gpu: str = "H100-SXM", model: str | ServingShape = "Qwen3-1.7B") -> GpuTimeCoefficients:
    """Coefficients from data-sheet peaks and :data:`ROOFLINE_EFFICIENCY` (every source says ``roofline``) for
    a GPU of :data:`GPUS` and a model of :data:`MODEL_SHAPES` (or any :class:`ServingShape`)."""
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}; known: {sorted(GPUS)}")
    g, m, e = GPUS[gpu], shape_of(model), ROOFLINE_EFFICIENCY
    model = m.name
    bw = g.hbm_bytes_per_s * e["hbm"]
    tag = f"roofline: {gpu} ({g.peak_bf16_flops / 1e12:.0f} TFLOP/s bf16, {g.hbm_bytes_per_s / 1e12:.2f} TB/s), {model}"
    return GpuTimeCoefficients(
        decode_step_s=m.weight_bytes / bw + e["decode_launch_s"],
        decode_s_per_token=2.0 * m.matmul_params / (g.peak_bf16_flops * e["decode_compute"]),
        decode_s_per_context_token=m.kv_bytes_per_token / bw,
        prefill_tokens_per_s=g.peak_bf16_flops * e["prefill_compute"] / (2.0 * m.matmul_params),
        train_forward_tokens_per_s=g.peak_bf16_flops * e["train_compute"] / (2.0 * m.matmul_params),
        weight_sync_s=m.weight_bytes / e["weight_sync_bytes_per_s"],
        sources={
            "decode_step_s": f"{tag}: weight bytes {m.weight_bytes:.3g} / (HBM x {e['hbm']}) + {e['decode_launch_s']:g} s launch",
            "decode_s_per_token": f"{tag}: 2N / (peak x {e['decode_compute']})",
            "decode_s_per_context_token": f"{tag}: KV bytes/token {m.kv_bytes_per_token:.3g} / (HBM x {e['hbm']})",
            "prefill_tokens_per_s": f"{tag}: peak x {e['prefill_compute']} / 2N",
            "train_forward_tokens_per_s": f"{tag}: peak x {e['train_compute']} / 2N",
            "weight_sync_s": f"{tag}: weight bytes / {e['weight_sync_bytes_per_s'] / 1e9:g} GB/s (assumed)",
            "max_num_seqs": "verl's rollout default (rollout.yaml)", "gpus": "one GPU"})


def coefficients_from_json(path: str | Path, model: str | ServingShape | None = None) -> GpuTimeCoefficients:
    """Coefficients written by ``lab/scripts/bench_gpu.py`` (its ``coefficients`` object); unknown or missing
    fields fail, naming the file. With ``model``, a JSON that names the shape it was measured at
    (``model_shape``, top level or in ``meta``) must be that shape: coefficients measured at one model size
    misprice another silently otherwise."""
    data = read_json(path)
    block = data.get("coefficients", data) if isinstance(data, dict) else data
    meta = data.get("meta", {}) if isinstance(data, dict) else {}
    if not isinstance(block, dict) or not isinstance(meta, dict):
        raise ValueError(f"{path}: not a lab/scripts/bench_gpu.py JSON (expected an object with a 'coefficients' object, "
                         f"got {type(data).__name__})")
    measured_at = data.get("model_shape", meta.get("model_shape"))
    if measured_at is not None and not isinstance(measured_at, str):
        raise ValueError(f"{path}: model_shape={measured_at!r} must be a model name such as 'Qwen3-1.7B'")
    if model is not None and measured_at is not None and not same_shape(measured_at, model):
        raise ValueError(f"{path}: measured at {measured_at}'s shape, not this run's model ({shape_of(model).name}); "
                         "measure at its shape (lab/scripts/bench_gpu.py) or use roofline:<GPU>")
    known = {f.name for f in fields(GpuTimeCoefficients)}
    unknown = sorted(set(block) - known)
    if unknown:
        raise ValueError(f"{path}: unknown coefficient(s) {unknown}; known: {sorted(known)}")
    try:
        return GpuTimeCoefficients(**block)
    except TypeError as exc:
        raise ValueError(f"{path}: {exc}") from None


def read_json(path: str | Path) -> Any:
    """The JSON a file holds; a file that cannot be read or parsed is a ValueError naming it."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable lab/scripts/bench_gpu.py JSON ({type(exc).__name__}: {exc})") from None


# Coefficients measured by lab/scripts/bench_gpu.py and shipped with the package: <GPU>_<model shape>.json, each
# naming its run (GPU, date, commit, versions) and its raw output under docs/assets/.
MEASURED_DIR = Path(__file__).with_name("measured")


def measured_files() -> dict[tuple[str, str], Path]:
    """``(GPU, model shape)`` -> the shipped measured coefficients."""
    return {tuple(p.stem.split("_", 1)): p for p in sorted(MEASURED_DIR.glob("*_*.json"))}


def shape_of(model: str | ServingShape) -> ServingShape:
    """A shape given by name (:data:`MODEL_SHAPES`, an unknown name fails) or itself."""
    if isinstance(model, ServingShape):
        return model
    if model not in MODEL_SHAPES:
        raise ValueError(f"unknown model shape {model!r}; known: {sorted(MODEL_SHAPES)}")
    return MODEL_SHAPES[model]


def same_shape(named: str, model: str | ServingShape) -> bool:
    """Whether ``model`` is the named shape of :data:`MODEL_SHAPES`: the same KV bytes per token, and the same
    matrix parameters and weight bytes to 0.5% each (a config read from disk may count its LM head or norms
    slightly differently). Weight bytes too: a mixture of experts with a dense model's active parameters reads all
    its experts' weights per decode pass, so a dense model's decode coefficients do not price it."""
    if named not in MODEL_SHAPES:
        return False
    a, b = MODEL_SHAPES[named], shape_of(model)
    params_close = abs(a.matmul_params - b.matmul_params) <= 0.005 * a.matmul_params
    bytes_close = abs(a.weight_bytes - b.weight_bytes) <= 0.005 * a.weight_bytes
    return a.kv_bytes_per_token == b.kv_bytes_per_token and params_close and bytes_close


def shipped_coefficients(gpu: str, model: str | ServingShape) -> GpuTimeCoefficients:
    """The shipped measured coefficients of ``gpu`` at ``model``'s shape; a GPU or shape without a measurement
    fails, naming what was measured."""
    files = measured_files()
    for (g, named), path in files.items():
        if g == gpu and same_shape(named, model):
            return coefficients_from_json(path, model)
    raise ValueError(f"no measured coefficients for {gpu} at {shape_of(model).name}'s shape; measured: "
                     f"{[f'{g} {m}' for g, m in files] or 'none'}. Use roofline:<GPU> or a lab/scripts/bench_gpu.py JSON "
                     "measured at this model's shape")


def resolve_coefficients(spec: str, model: str | ServingShape | None) -> GpuTimeCoefficients:
    """The coefficients a ``compute_budget.cost_model`` value names: ``roofline:<GPU>`` (this model's shape on a
    GPU of :data:`GPUS`), ``measured:<GPU>`` (the shipped measurement of that GPU at this model's shape:
    :func:`measured_files`) or the path of a ``lab/scripts/bench_gpu.py`` JSON (measured; checked against the
    model's shape when both are known)."""
    kind, sep, gpu = spec.partition(":")
    if kind in ("roofline", "measured") and sep:
        if model is None:
            raise ValueError(f"cost model {spec!r} needs the run's model shape")
        return roofline_coefficients(gpu, model) if kind == "roofline" else shipped_coefficients(gpu, model)
    if Path(spec).is_file():
        return coefficients_from_json(spec, model)
    if spec.endswith(".json") or "/" in spec:
        raise ValueError(f"cost model {spec!r}: no such file (a lab/scripts/bench_gpu.py JSON, or roofline:<GPU> / "
                         "measured:<GPU>)")
    raise ValueError(f"cost model {spec!r}: expected roofline:<GPU> (GPUs: {sorted(GPUS)}), measured:<GPU> "
                     f"(measured: {sorted(f'{g} {m}' for g, m in measured_files())}) or the path of a "
                     "lab/scripts/bench_gpu.py JSON")


def coefficients_to_json(coeff: GpuTimeCoefficients) -> dict[str, Any]:
    return {"coefficients": {**asdict(coeff), "sources": dict(coeff.sources)}}


@dataclass(frozen=True)
class GenerationWork:
    """One generation phase's requests: prompt and output token counts, and, per request, its decode forward
    passes after the prefill and the draft tokens those passes verified (None: no speculation, ``output - 1``
    passes and no drafts; the prefill emits the first token)."""

    prompt_lengths: Sequence[int]
    output_lengths: Sequence[int]
    decode_steps: Sequence[int] | None = None
    drafted_tokens: Sequence[int] | None = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Prompt, output, decode-pass and draft counts per request, each refused (naming it) unless a 1-D
        sequence of finite numbers >= 0."""
        p = token_counts(self.prompt_lengths, "GenerationWork.prompt_lengths")
        g = token_counts(self.output_lengths, "GenerationWork.output_lengths")
        if p.shape != g.shape:
            raise ValueError(f"{p.size} prompt lengths but {g.size} output lengths")
        s = np.maximum(g - 1, 0) if self.decode_steps is None else token_counts(self.decode_steps,
                                                                                "GenerationWork.decode_steps")
        d = np.zeros_like(g) if self.drafted_tokens is None else token_counts(self.drafted_tokens,
                                                                              "GenerationWork.drafted_tokens")
        if s.shape != g.shape or d.shape != g.shape:
            raise ValueError("decode_steps and drafted_tokens need one entry per request")
        if (p < 0).any() or (g < 0).any() or (s < 0).any() or (d < 0).any() or (s > np.maximum(g - 1, 0)).any():
            raise ValueError("token counts must be >= 0 and decode steps at most output - 1 per request")
        first_bad_request(d > 0, s == 0, "draft tokens but no decode pass to verify them")
        # a pass emits 1 + its accepted drafts: output - 1 - passes tokens were accepted, so at least as many drafted
        # (averages, as the bench passes, keep this: it is linear); float slack for such averages
        accepted = np.maximum(g - 1, 0) - s
        first_bad_request(accepted > d + 1e-9 * (1.0 + d), True,
                          "output - 1 - decode steps tokens were accepted, more than were drafted")
        return p, g, s, d


def first_bad_request(when: np.ndarray, also: np.ndarray | bool, why: str) -> None:
    """Refuse a :class:`GenerationWork` whose request breaks a rule, naming the first such request."""
    bad = np.flatnonzero(np.logical_and(when, also))
    if bad.size:
        raise ValueError(f"GenerationWork: request {int(bad[0])} has {why} ({bad.size} such requests)")


def decode_passes(steps: np.ndarray, max_num_seqs: int) -> float:
    """Forward passes of the decode phase: requests in waves of ``max_num_seqs`` (in order), each wave as many
    passes as its longest request."""
    return float(sum(steps[lo:lo + max_num_seqs].max() for lo in range(0, steps.size, max_num_seqs))) if steps.size else 0.0


def generation_seconds(work: GenerationWork, coeff: GpuTimeCoefficients) -> dict[str, float]:
    """``prefill`` and ``decode`` seconds of one generation phase (module docstring).

    Request i with prompt p, output g, s decode passes and d draft tokens: its passes compute s + d tokens and
    read Σ_{k=1..s} (p + k·g/s) = s·p + g·(s+1)/2 context tokens (its context grows evenly over its passes);
    every pass of the phase costs ``decode_step_s`` once, whatever it serves."""
    p, g, s, d = work.arrays()
    context = s * p + np.where(s > 0, g * (s + 1) / 2, 0.0)
    decode = (decode_passes(s, coeff.max_num_seqs) * coeff.decode_step_s + (s + d).sum() * coeff.decode_s_per_token
              + context.sum() * coeff.decode_s_per_context_token)
    return {"prefill": float(p.sum() / coeff.prefill_tokens_per_s), "decode": float(decode)}


@dataclass(frozen=True)
class StepSeconds:
    """Modelled GPU seconds of one step per phase (both generations' prefill and decode, the training passes, the
    method's own phases by the names its ``StepWork`` declares, the weight sync) and their total."""

    phases: Mapping[str, float]

    @property
    def total(self) -> float:
        return float(sum(self.phases.values()))

    def as_metrics(self, prefix: str) -> dict[str, float]:
        return {**{f"{prefix}{k}": float(v) for k, v in self.phases.items()}, prefix.rstrip("/"): self.total}


def step_seconds(work: StepWork, main: GenerationWork, correction: GenerationWork | None,
                 coeff: GpuTimeCoefficients) -> StepSeconds:
    """Modelled GPU seconds of one step: both generation phases (:func:`generation_seconds`), the training
    passes of ``work`` (the pass counts of :func:`compute_accounting.flops.step_flops`, each a forward-equivalent
    over its rows' tokens) and one weight sync, each phase's wall seconds on the ``coeff.gpus`` GPUs the
    coefficients are for times those GPUs (so every phase, and the total, is GPU seconds: what the compute ledger
    adds up). A ``work`` no step can have done fails (:func:`compute_accounting.flops.check_step_work`)."""
    check_step_work(work)
    gen_main = generation_seconds(main, coeff)
    gen_corr = generation_seconds(correction, coeff) if correction is not None else {"prefill": 0.0, "decode": 0.0}
    per_fwd = 1.0 / coeff.train_forward_tokens_per_s
    train_tokens = float(sum(work.train_main) + sum(work.train_joint) + sum(work.train_padding))
    update_passes = work.ppo_epochs * (3 + int(work.gradient_checkpointing))
    wall = {
        "main_gen_prefill": gen_main["prefill"], "main_gen_decode": gen_main["decode"],
        "correction_gen_prefill": gen_corr["prefill"], "correction_gen_decode": gen_corr["decode"],
        "old_log_prob": train_tokens * per_fwd if work.old_log_prob_forward else 0.0,
        "ref_log_prob": train_tokens * per_fwd if work.reference_forward else 0.0,
        "actor_update": update_passes * train_tokens * per_fwd,
        **{phase: float(sum(rows)) * per_fwd for phase, rows in work.forward_phases.items()},
        **{phase: (3 + int(work.gradient_checkpointing)) * float(sum(rows)) * per_fwd
           for phase, rows in work.backward_phases.items()},
        "weight_sync": coeff.weight_sync_s,
    }
    return StepSeconds({phase: seconds * coeff.gpus for phase, seconds in wall.items()})


# ------------------------------------------------------------------ measured coefficients (lab/scripts/bench_gpu.py)
DECODE_TERMS = ("decode_step_s", "decode_s_per_token", "decode_s_per_context_token")


def fit_decode_coefficients(batch_sizes: Sequence[float], context_tokens: Sequence[float],
                            pass_seconds: Sequence[float]) -> dict[str, float]:
    """Least-squares fit of the decode pass model (module docstring) to measured passes: a pass over ``B``
    sequences reading ``C`` KV-cache tokens in all took ``decode_step_s + B·decode_s_per_token +
    C·decode_s_per_context_token`` seconds. Each coefficient is a cost, so the fit is non-negative least squares
    (a term the data cannot tell from noise is 0, not negative); at least three passes of independent
    (1, B, C) are needed."""
    b = np.asarray(batch_sizes, dtype=np.float64)
    c = np.asarray(context_tokens, dtype=np.float64)
    y = np.asarray(pass_seconds, dtype=np.float64)
    if not (b.shape == c.shape == y.shape) or b.ndim != 1:
        raise ValueError(f"one batch size, context and time per pass: got {b.shape}, {c.shape}, {y.shape}")
    if not (np.isfinite(b).all() and (b >= 1).all() and np.isfinite(c).all() and (c >= 0).all()):
        raise ValueError("every batch size must be a finite number >= 1 and every context a finite number >= 0")
    design = np.stack([np.ones_like(b), b, c], axis=1)
    if b.size < 3 or np.linalg.matrix_rank(design) < 3:
        raise ValueError(f"{b.size} decode measurements cannot separate the per-pass, per-token and per-context "
                         "terms: measure at least two batch sizes and two context lengths")
    if not (np.isfinite(y).all() and (y > 0).all()):
        raise ValueError("every pass time must be a finite number > 0")
    return dict(zip(DECODE_TERMS, (float(v) for v in nonnegative_least_squares(design, y))))


def nonnegative_least_squares(design: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin ||design·x - y|| over x >= 0, for a few columns: the best unconstrained least-squares solution on
    every subset of columns (the others 0) that is itself >= 0 (the NNLS optimum is one of them: on its support
    it is the unconstrained optimum)."""
    k = design.shape[1]
    best, best_residual = np.zeros(k), float(np.sum(y ** 2))
    for mask in range(1, 2 ** k):
        cols = [j for j in range(k) if mask >> j & 1]
        sol, *_ = np.linalg.lstsq(design[:, cols], y, rcond=None)
        if (sol < 0).any():
            continue
        x = np.zeros(k)
        x[cols] = sol
        residual = float(np.sum((design @ x - y) ** 2))
        if residual < best_residual:
            best, best_residual = x, residual
    return best


def train_forward_tokens_per_s(tokens: float, update_seconds: float, gradient_checkpointing: bool) -> float:
    """Forward-equivalent tokens per second of an actor update that trained ``tokens`` tokens in
    ``update_seconds``: forward + backward is 3 forward-equivalents, 4 with gradient checkpointing (the forward
    runs again in the backward), as :func:`compute_accounting.flops.step_flops` counts them."""
    if not (is_number(tokens) and is_number(update_seconds) and tokens > 0 and update_seconds > 0):
        raise ValueError(f"tokens={tokens} and update_seconds={update_seconds} must be finite numbers > 0")
    return (3 + int(gradient_checkpointing)) * tokens / update_seconds
