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
(``analysis.correction_workload``). Each phase is also run prefill-only (``max_tokens = 1``, cache reset
before) to split prefill from decode.

    python scripts/bench_correction_pass.py --smoke                  # a minute: tiny L, few prompts
    python scripts/bench_correction_pass.py --lengths 2048           # the docs table (32 prompts, G = 8)
    python scripts/bench_correction_pass.py --lengths 8192 32768 --prompts 8

Without CUDA or vLLM it prints why and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from analysis.correction_workload import (
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


def skip_reason() -> str | None:
    """Why the benchmark cannot run here (no CUDA device, no vLLM), or None."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device (this benchmark runs vLLM on a GPU; the CPU proxy is scripts/bench_correction_prompts.py)"
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


def build_phases(tokenizer, num_prompts: int, group_size: int, num_correct: int, length: int,
                 layouts: list[str], seed: int = 0) -> list[Phase]:
    """Main generation, then the corrections with no prefix reuse (first layout) and each layout."""
    workload = build_workload(tokenizer, num_prompts, group_size, num_correct, length, seed=seed)
    phases = [Phase(f"main generation, {len(workload.main_messages)} requests",
                    [chat_prompt_ids(tokenizer, m) for m in workload.main_messages])]
    for i, name in enumerate(layouts):
        requests = correction_requests(tokenizer, workload, LAYOUTS[name], max_candidate_tokens=length, seed=seed)
        prompts = [chat_prompt_ids(tokenizer, r.messages) for r in requests]
        if i == 0:
            phases.append(Phase(f"corrections, {name}, no prefix reuse", prompts, unique_salt=True))
        phases.append(Phase(f"corrections, {name}, prefix cache on", prompts))
    return phases


def run_phase(llm, phase: Phase, length: int, seed: int, sampling_params_cls=None) -> dict:
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
    full = SamplingParams(min_tokens=length, max_tokens=length, ignore_eos=True, temperature=1.0, seed=seed,
                          detokenize=False)
    total_s, outs = timed(full, "full")
    prompt_tokens = sum(len(p) for p in phase.prompts)
    cached = [getattr(o, "num_cached_tokens", None) for o in outs]
    generated = sum(len(o.outputs[0].token_ids) for o in outs)
    return {"phase": phase.name, "requests": len(phase.prompts), "mean_prompt_tokens": prompt_tokens / len(outs),
            "cached_frac": (sum(cached) / prompt_tokens) if all(c is not None for c in cached) else None,
            "time_s": total_s, "prefill_only_s": prefill_s, "generated_tokens": generated}


def format_table(rows: list[dict]) -> str:
    """Markdown table; ``vs main`` is each phase's time over the first row's."""
    lines = ["| phase | requests | prompt tokens | cached | time | prefill only | vs main |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    base = rows[0]["time_s"] if rows and rows[0]["time_s"] else None
    for r in rows:
        cached = "n/a" if r["cached_frac"] is None else f"{100 * r['cached_frac']:.1f}%"
        ratio = f"{r['time_s'] / base:.2f}" if base else ""
        lines.append(f"| {r['phase']} | {r['requests']} | {r['mean_prompt_tokens']:,.0f} | {cached} | "
                     f"{r['time_s']:.1f} s | {r['prefill_only_s']:.1f} s | {ratio} |")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048], help="L: forced response length(s)")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--correct", type=int, default=2, help="correct responses per group")
    parser.add_argument("--layouts", nargs="+", default=DEFAULT_LAYOUTS, choices=list(LAYOUTS))
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny run to check the script works: L=64, 2 prompts, G=4, 1 right, eager mode")
    args = parser.parse_args(argv)
    if args.smoke:
        args.lengths, args.prompts, args.group_size, args.correct = [64], 2, 4, 1
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    reason = skip_reason()
    if reason is not None:
        print(f"bench_correction_pass: skipped: {reason}")
        return 0
    # skip_reason() initialised CUDA in this process; vLLM's forked engine workers cannot re-initialise it
    # ("Cannot re-initialize CUDA in forked subprocess", seen on an H100 with vLLM 0.24.0)
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    from vllm import LLM

    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(Path(tmp) / "tokenizer")
        phases_by_length = {L: build_phases(tokenizer, args.prompts, args.group_size, args.correct, L, args.layouts,
                                            args.seed) for L in args.lengths}
        longest = max(len(p) for phases in phases_by_length.values() for ph in phases for p in ph.prompts)
        max_model_len = longest + max(args.lengths) + 16
        model_dir = write_model_dir(Path(tmp) / "model", max_model_len)
        print(f"vLLM dummy Qwen2-1.5B-shaped model, max_model_len={max_model_len}; {args.prompts} prompts x "
              f"G={args.group_size}, {args.correct} right; lengths {args.lengths}", flush=True)
        llm = LLM(model=str(model_dir), load_format="dummy", dtype="bfloat16", max_model_len=max_model_len,
                  enable_prefix_caching=True, skip_tokenizer_init=True, seed=args.seed,
                  gpu_memory_utilization=args.gpu_memory_utilization, max_num_seqs=args.max_num_seqs,
                  enforce_eager=args.smoke)
        results = {}
        for length, phases in phases_by_length.items():
            rows = []
            for phase in phases:
                try:
                    rows.append(run_phase(llm, phase, length, args.seed))
                except Exception as exc:  # one phase (e.g. a vLLM without cache_salt) must not lose the others
                    print(f"  L={length}: {phase.name}: FAILED ({type(exc).__name__}: {exc})", flush=True)
                    if not rows:
                        raise
                    continue
                print(f"  L={length}: {rows[-1]['phase']}: {rows[-1]['time_s']:.1f} s", flush=True)
            results[length] = rows
            print(f"\nL = {length}\n{format_table(rows)}\n", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({str(k): v for k, v in results.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
