"""GPU benchmark: the correction pass at real lengths on vLLM's offline engine, per prompt layout.

Reproduces the table of docs/correction_pass.md: one step's main generation (P prompts × G, forced to L
tokens) and its correction pass (the 6 of 8 wrong responses' correction prompts from the project's
``plan_corrections``, candidates cut to L re-tokenised tokens) under each layout, with vLLM's prefix
cache reset between phases (``llm.reset_prefix_cache()``) and the cached prompt tokens read from
``RequestOutput.num_cached_tokens``. "no prefix reuse" gives every request its own ``cache_salt``.

Model: a Qwen2-1.5B-shaped config with dummy weights (``load_format="dummy"``) written locally with the
project's tiny ChatML tokenizer (``verl_cpu.tiny_assets``; no hub access). The engine takes token ids
(``skip_tokenizer_init``), so the tokenizer only builds the prompts. Responses are forced to L tokens
(``min_tokens = max_tokens = L``, ``ignore_eos``); candidates are Zipf text of L tokens
(``lab.analysis.correction_workload``). Each phase is also run prefill-only (``max_tokens = 1``, cache reset
before) to split prefill from decode.

    python lab/scripts/bench_correction_pass.py --smoke                  # a minute: tiny L, few prompts
    python lab/scripts/bench_correction_pass.py --lengths 2048           # the docs table (32 prompts, G = 8)
    python lab/scripts/bench_correction_pass.py --lengths 8192 32768 --prompts 8

Speculation and the length bound (docs/correction_pass.md, "GPU rows"): ``--speculation off ngram suffix``
builds one engine per setting (``speculative_config`` is an engine argument) and runs every phase on each;
``--bound-factor c`` adds, per layout, the corrections with max_tokens = ceil(c·|y|) + ``--closing`` tokens.
Correction lengths are forced per request (``min_tokens = max_tokens``) to |y| times a ratio drawn from
``--length-ratios`` (the toy's measured correction/target length ratios by default), so the bound cuts what
it would cut on real corrections; "bound on" forces min(that, the bound). Accepted-length statistics come
from vLLM's own counters (``LLM.get_metrics()``: ``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``,
``..._num_accepted_tokens``). With dummy weights the sampled text is random, so lookup finds few drafts:
these rows measure what speculation *costs*; what it saves on real corrections is the CPU proxy's
decode-step reduction (``lab/scripts/bench_correction_lookup.py``).

    python lab/scripts/bench_correction_pass.py --lengths 2048 8192 --speculation off ngram suffix --bound-factor 1.5 --logprobs

Without CUDA or vLLM it prints why and exits 0.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from option_types.cli import float_in, int_at_least, nonnegative_float, nonnegative_int, positive_int  # noqa: E402

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the clone's root: lab/ is not installed
from lab.analysis.correction_workload import (  # noqa: E402
    LAYOUTS,
    build_tokenizer,
    build_workload,
    chat_prompt_ids,
    correction_requests,
)

# Qwen2-1.5B's shape (its config.json), with dummy weights.
QWEN2_1_5B_SHAPE = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960,
    "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
    "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
    "use_sliding_window": False, "max_window_layers": 28, "torch_dtype": "bfloat16", "attention_dropout": 0.0,
    "initializer_range": 0.02, "bos_token_id": 0, "eos_token_id": 2,
}
DEFAULT_LAYOUTS = ["target_first", "reference_first", "reference_first+per_group"]
# correction length / target length of the toy's 252 corrections (10 training steps, docs/correction_pass.md),
# its deciles (quantiles 0.05, 0.15, ..., 0.95); the longest was 1.81
TOY_LENGTH_RATIOS = [0.983, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.012, 1.129]
SPEC_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens")


def speculative_config(name: str, ngram: str = "2:5:8") -> dict | None:
    """vLLM ``speculative_config`` of a setting: off, ngram (``min:max:k``) or suffix (vLLM's defaults)."""
    if name == "off":
        return None
    if name == "ngram":
        lo, hi, k = (int(x) for x in ngram.split(":"))
        return {"method": "ngram", "prompt_lookup_min": lo, "prompt_lookup_max": hi, "num_speculative_tokens": k}
    if name == "suffix":
        return {"method": "suffix"}
    raise ValueError(f"unknown speculation setting {name!r} (off, ngram, suffix)")


def forced_correction_lengths(num: int, length: int, ratios: list[float], seed: int) -> list[int]:
    """Per-correction forced lengths: L times a ratio drawn from ``ratios`` (at least 1, at most L: the
    rollout's own bound is the response length)."""
    rng = np.random.default_rng([seed, length, 7])
    drawn = rng.choice(np.asarray(ratios, dtype=float), size=num)
    return [int(min(length, max(1, round(r * length)))) for r in drawn]


def bounded(lengths: list[int], target_length: int, factor: float, closing: int, response_length: int) -> list[int]:
    """min(forced length, ceil(c·|y|) + closing, response_length): what the bound lets each correction write."""
    bound = min(response_length, math.ceil(factor * target_length) + closing)
    return [min(n, bound) for n in lengths]


def skip_reason() -> str | None:
    """Why the benchmark cannot run here (no CUDA device, no vLLM), or None."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device (this benchmark runs vLLM on a GPU; the CPU proxy is lab/scripts/bench_correction_prompts.py)"
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        return f"vLLM is not installed ({exc})"
    return None


def model_config(max_positions: int) -> dict:
    """config.json of the dummy Qwen2-1.5B-shaped model with room for ``max_positions`` tokens."""
    return {**QWEN2_1_5B_SHAPE, "max_position_embeddings": int(max_positions)}


def write_model_dir(out: Path, max_positions: int) -> Path:
    """A model directory vLLM can load with ``load_format="dummy"``: config.json + the local tokenizer."""
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out)
    (out / "config.json").write_text(json.dumps(model_config(max_positions), indent=2))
    return out


@dataclass
class Phase:
    name: str
    prompts: list[list[int]]
    unique_salt: bool = False  # True: no request can reuse another's prefix
    lengths: list[int] | None = None  # forced length per request (None: every request L)


def build_phases(tokenizer, num_prompts: int, group_size: int, num_correct: int, length: int,
                 layouts: list[str], seed: int = 0, length_ratios: list[float] | None = None,
                 bound_factor: float = 0.0, closing: int = 64, unique_salt_row: bool = True) -> list[Phase]:
    """Main generation, then the corrections with no prefix reuse (first layout, ``unique_salt_row``) and
    each layout; with ``length_ratios`` the corrections are forced to per-request lengths, and with
    ``bound_factor > 0`` each layout also runs bounded (every target has L tokens)."""
    workload = build_workload(tokenizer, num_prompts, group_size, num_correct, length, seed=seed)
    phases = [Phase(f"main generation, {len(workload.main_messages)} requests",
                    [chat_prompt_ids(tokenizer, m) for m in workload.main_messages])]
    for i, name in enumerate(layouts):
        requests = correction_requests(tokenizer, workload, LAYOUTS[name], max_candidate_tokens=length, seed=seed)
        prompts = [chat_prompt_ids(tokenizer, r.messages) for r in requests]
        lengths = None if length_ratios is None else forced_correction_lengths(len(prompts), length, length_ratios, seed)
        if i == 0 and unique_salt_row:
            phases.append(Phase(f"corrections, {name}, no prefix reuse", prompts, unique_salt=True, lengths=lengths))
        phases.append(Phase(f"corrections, {name}, prefix cache on", prompts, lengths=lengths))
        if bound_factor > 0:
            capped = bounded(lengths or [length] * len(prompts), length, bound_factor, closing, length)
            phases.append(Phase(f"corrections, {name}, prefix cache on, bound c={bound_factor:g}", prompts,
                                lengths=capped))
    return phases


def spec_counters(llm) -> dict[str, float] | None:
    """vLLM's cumulative speculative-decoding counters (None when the engine exposes none)."""
    try:
        metrics = llm.get_metrics()
    except Exception:  # an engine without get_metrics / with stats disabled
        return None
    out = {name: 0.0 for name in SPEC_COUNTERS}
    found = False
    for metric in metrics:
        if getattr(metric, "name", None) in out:
            out[metric.name] += float(getattr(metric, "value", 0.0))
            found = True
    return out if found else None


def acceptance_stats(before: dict | None, after: dict | None) -> dict:
    """Mean accepted length (1 + accepted / drafts, vLLM's definition) and acceptance rate over a phase."""
    if before is None or after is None:
        return {"accept_length": None, "accept_rate": None}
    drafts, draft_tokens, accepted = (after[k] - before[k] for k in SPEC_COUNTERS)
    return {"accept_length": 1.0 + accepted / drafts if drafts else None,
            "accept_rate": accepted / draft_tokens if draft_tokens else None}


def run_phase(llm, phase: Phase, length: int, seed: int, sampling_params_cls=None, logprobs: bool = False) -> dict:
    """Time the phase's generation (forced to ``length`` tokens) and, separately, its prefill alone
    (``sampling_params_cls``: vLLM's ``SamplingParams`` unless given, e.g. by a test)."""
    if sampling_params_cls is None:
        from vllm import SamplingParams as sampling_params_cls
    SamplingParams = sampling_params_cls

    def inputs(tag: str):
        return [{"prompt_token_ids": ids, **({"cache_salt": f"{tag}-{i}"} if phase.unique_salt else {})}
                for i, ids in enumerate(phase.prompts)]

    def timed(params, tag):
        llm.reset_prefix_cache()
        start = time.perf_counter()
        outs = llm.generate(inputs(tag), params, use_tqdm=False)
        return time.perf_counter() - start, outs

    prefill_s, _ = timed(SamplingParams(max_tokens=1, temperature=1.0, seed=seed, detokenize=False), "prefill")

    def forced(n: int):  # logprobs=0: the sampled token's log-prob, as verl requests (rollout.calculate_log_probs)
        extra = {"logprobs": 0} if logprobs else {}
        return SamplingParams(min_tokens=n, max_tokens=n, ignore_eos=True, temperature=1.0, seed=seed,
                              detokenize=False, **extra)

    full = forced(length) if phase.lengths is None else [forced(n) for n in phase.lengths]
    before = spec_counters(llm)
    total_s, outs = timed(full, "full")
    prompt_tokens = sum(len(p) for p in phase.prompts)
    cached = [getattr(o, "num_cached_tokens", None) for o in outs]
    generated = sum(len(o.outputs[0].token_ids) for o in outs)
    return {"phase": phase.name, "requests": len(phase.prompts), "mean_prompt_tokens": prompt_tokens / len(outs),
            "cached_frac": (sum(cached) / prompt_tokens) if all(c is not None for c in cached) else None,
            "time_s": total_s, "prefill_only_s": prefill_s, "generated_tokens": generated,
            **acceptance_stats(before, spec_counters(llm))}


def format_table(rows: list[dict], base_time_s: float | None = None) -> str:
    """Markdown table; ``vs main`` is each phase's time over ``base_time_s`` (default: the first row's, the
    main generation without speculation when several settings are listed). Rows with a ``speculation``
    key also show it and vLLM's accepted length."""
    spec = any("speculation" in r for r in rows)
    head = "| phase | requests | prompt tokens | cached | time | prefill only | vs main |"
    sep = "|---|---:|---:|---:|---:|---:|---:|"
    if spec:
        head = "| speculation " + head + " generated | accepted length |"
        sep = "|---" + sep + "---:|---:|"
    lines = [head, sep]
    base = base_time_s if base_time_s else (rows[0]["time_s"] if rows and rows[0]["time_s"] else None)
    for r in rows:
        cached = "n/a" if r["cached_frac"] is None else f"{100 * r['cached_frac']:.1f}%"
        ratio = f"{r['time_s'] / base:.2f}" if base else ""
        line = (f"| {r['phase']} | {r['requests']} | {r['mean_prompt_tokens']:,.0f} | {cached} | "
                f"{r['time_s']:.1f} s | {r['prefill_only_s']:.1f} s | {ratio} |")
        if spec:
            accept = "n/a" if r.get("accept_length") is None else f"{r['accept_length']:.2f}"
            line = f"| {r.get('speculation', 'off')} " + line + f" {r['generated_tokens']:,} | {accept} |"
        lines.append(line)
    return "\n".join(lines)


def check_group_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--correct`` right responses per group of ``--group-size``: at least one must be wrong, or there is no
    correction to measure (a table of zero requests)."""
    if args.correct >= args.group_size:
        parser.error(f"--correct {args.correct} must be below --group-size {args.group_size}: with no wrong "
                     "response in a group there is no correction to measure")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=[2048], help="L: forced response length(s)")
    parser.add_argument("--prompts", type=positive_int, default=32)
    parser.add_argument("--group-size", type=int_at_least(2), default=8)
    parser.add_argument("--correct", type=nonnegative_int, default=2, help="correct responses per group")
    parser.add_argument("--layouts", nargs="+", default=DEFAULT_LAYOUTS, choices=list(LAYOUTS))
    parser.add_argument("--speculation", nargs="+", default=["off"], choices=["off", "ngram", "suffix"],
                        help="one engine per setting; every phase runs on each")
    parser.add_argument("--ngram", default="2:5:8", help="ngram setting min:max:k (prompt_lookup_min/max, "
                        "num_speculative_tokens)")
    parser.add_argument("--bound-factor", type=nonnegative_float, default=0.0,
                        help="c > 0: also run each layout with max_tokens = ceil(c·|y|) + --closing")
    parser.add_argument("--closing", type=nonnegative_int, default=64)
    parser.add_argument("--length-ratios", type=Path, default=None,
                        help="JSON list of correction/target length ratios (default: the toy's); 'none' in "
                             "--no-ratios forces every correction to L")
    parser.add_argument("--no-ratios", action="store_true", help="force every correction to L (the first table)")
    parser.add_argument("--logprobs", action="store_true",
                        help="request the sampled token's log-prob, as verl does by default (rollout.calculate_log_probs): "
                             "some vLLM versions do not speculate for such requests")
    parser.add_argument("--gpu-memory-utilization", type=float_in(0.0, 1.0, low_open=True), default=0.85)
    parser.add_argument("--max-num-seqs", type=positive_int, default=256)
    parser.add_argument("--seed", type=nonnegative_int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny run to check the script works: L=64, 2 prompts, G=4, 1 right, eager mode")
    args = parser.parse_args(argv)
    if args.smoke:
        args.lengths, args.prompts, args.group_size, args.correct = [64], 2, 4, 1
    check_group_options(parser, args)
    return args


def length_ratios(args: argparse.Namespace) -> list[float] | None:
    """The correction/target length ratios the corrections are forced to (None: all L)."""
    if args.no_ratios:
        return None
    if args.length_ratios is not None:
        ratios = json.loads(args.length_ratios.read_text())
        if not isinstance(ratios, list) or not ratios or not all(isinstance(r, (int, float)) and r > 0 for r in ratios):
            raise SystemExit(f"--length-ratios {args.length_ratios}: expected a non-empty JSON list of positive numbers")
        return [float(r) for r in ratios]
    return list(TOY_LENGTH_RATIOS)


def build_engine(model_dir: Path, max_model_len: int, args: argparse.Namespace, spec: dict | None):
    """vLLM's offline engine on the dummy model, with the speculation setting (None: off)."""
    from vllm import LLM

    kwargs = {} if spec is None else {"speculative_config": spec}
    return LLM(model=str(model_dir), load_format="dummy", dtype="bfloat16", max_model_len=max_model_len,
               enable_prefix_caching=True, skip_tokenizer_init=True, seed=args.seed,
               gpu_memory_utilization=args.gpu_memory_utilization, max_num_seqs=args.max_num_seqs,
               enforce_eager=args.smoke, disable_log_stats=False, **kwargs)


def release_engine(llm) -> None:
    """Free the GPU for the next setting's engine. ``LLM`` itself has no ``shutdown`` in vLLM 0.24.0: its engine
    core's does it (a separate process: ended; in this process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the
    executor shut down and the start-up's ``gc.freeze()`` undone, without which deleting an in-process engine
    leaks its GPU memory, vLLM's own comment). Then vLLM's ``cleanup_dist_env_and_memory``, as its tests do
    between engines in one process. The caller drops its own reference too."""
    import torch

    engine = getattr(llm, "llm_engine", None)
    for owner in (getattr(engine, "engine_core", None), engine):
        shutdown = getattr(owner, "shutdown", None)
        if callable(shutdown):
            shutdown()
            break
    del llm, engine
    try:
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
    except ImportError:
        cleanup_dist_env_and_memory = None
    if cleanup_dist_env_and_memory is not None:
        cleanup_dist_env_and_memory()
    gc.collect()
    torch.cuda.empty_cache()


def main(argv=None) -> int:
    args = parse_args(argv)
    reason = skip_reason()
    if reason is not None:
        print(f"bench_correction_pass: skipped: {reason}")
        return 0
    # skip_reason() initialised CUDA in this process; vLLM's forked engine workers cannot re-initialise it
    # ("Cannot re-initialize CUDA in forked subprocess", seen on an H100 with vLLM 0.24.0)
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    ratios = length_ratios(args)

    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(Path(tmp) / "tokenizer")
        phases_by_length = {L: build_phases(tokenizer, args.prompts, args.group_size, args.correct, L, args.layouts,
                                            args.seed, ratios, args.bound_factor, args.closing)
                            for L in args.lengths}
        longest = max(len(p) for phases in phases_by_length.values() for ph in phases for p in ph.prompts)
        max_model_len = longest + max(args.lengths) + 16
        model_dir = write_model_dir(Path(tmp) / "model", max_model_len)
        print(f"vLLM dummy Qwen2-1.5B-shaped model, max_model_len={max_model_len}; {args.prompts} prompts x "
              f"G={args.group_size}, {args.correct} right; lengths {args.lengths}; speculation {args.speculation}",
              flush=True)
        results: dict[int, list[dict]] = {L: [] for L in args.lengths}
        for setting in args.speculation:
            spec = speculative_config(setting, args.ngram)
            label = setting if spec is None or setting != "ngram" else f"ngram {args.ngram}"
            try:
                llm = build_engine(model_dir, max_model_len, args, spec)
            except Exception as exc:  # e.g. suffix without arctic-inference installed
                print(f"  speculation {label}: engine FAILED ({type(exc).__name__}: {exc})", flush=True)
                continue
            for length, phases in phases_by_length.items():
                for phase in phases:
                    if spec is not None and phase.unique_salt:
                        continue  # the no-reuse row is the layout baseline; once is enough
                    try:
                        row = run_phase(llm, phase, length, args.seed, logprobs=args.logprobs)
                    except Exception as exc:  # one phase (e.g. a vLLM without cache_salt) must not lose the others
                        print(f"  L={length} {label}: {phase.name}: FAILED ({type(exc).__name__}: {exc})", flush=True)
                        continue
                    row["speculation"] = label
                    results[length].append(row)
                    print(f"  L={length} {label}: {row['phase']}: {row['time_s']:.1f} s", flush=True)
            release_engine(llm)
        for length, rows in results.items():
            base = next((r["time_s"] for r in rows if r["phase"].startswith("main") and r["speculation"] == "off"), None)
            print(f"\nL = {length} (vs main: over the main generation without speculation)\n"
                  f"{format_table(rows, base)}\n", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({str(k): v for k, v in results.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
