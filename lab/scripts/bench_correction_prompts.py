"""CPU proxy benchmark: how much of a step's correction prompts a prefix cache can skip, per layout.

Builds one step's correction prompts (``lab.analysis.correction_workload``: P prompts × G responses of L
tokens of Zipf text, ``--correct`` of each group right, the project's ``plan_corrections`` with each
layout, the locally built ChatML tokenizer of ``verl_cpu.tiny_assets``, candidates cut to L re-tokenised
tokens) and reports the share of prompt tokens lying in a prefix shared with an earlier prompt of the
batch (``ibpo.prefix_sharing``: longest common prefix against all earlier prompts, token level and in
whole 16-token KV blocks as vLLM caches them). That is what an unbounded prefix cache could skip; vLLM
skips less (requests prefilled in the same scheduler step do not hit each other, and eviction):
``lab/scripts/bench_correction_pass.py`` measures it on a GPU.

    python lab/scripts/bench_correction_prompts.py                       # 32 prompts, G=8, 2 right, L=2048
    python lab/scripts/bench_correction_prompts.py --response-tokens 512 --prompts 8
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the clone's root: lab/ is not installed
from lab.analysis.correction_workload import (  # noqa: E402
    LAYOUTS,
    build_tokenizer,
    build_workload,
    chat_prompt_ids,
    correction_requests,
    distinct_references_per_prompt,
)
from ibpo.prefix_sharing import shared_prefix_lengths
from option_types.cli import int_at_least, nonnegative_int, positive_int

VLLM_BLOCK_SIZE = 16


def layout_row(name: str, prompts: list[list[int]], distinct_refs: float | None) -> dict:
    total = sum(len(p) for p in prompts)
    token = sum(shared_prefix_lengths(prompts))
    block = sum(shared_prefix_lengths(prompts, VLLM_BLOCK_SIZE))
    return {"layout": name, "requests": len(prompts), "mean_prompt_tokens": total / max(1, len(prompts)),
            "shared_token_frac": token / total if total else 0.0,
            "shared_block_frac": block / total if total else 0.0, "distinct_refs": distinct_refs}


def run(num_prompts: int, group_size: int, num_correct: int, response_tokens: int, seed: int,
        layouts: list[str]) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(tmp)
    workload = build_workload(tokenizer, num_prompts, group_size, num_correct, response_tokens, seed=seed)
    rows = [layout_row("main generation (x, G copies)", [chat_prompt_ids(tokenizer, m) for m in
                                                        workload.main_messages], None)]
    for name in layouts:
        requests = correction_requests(tokenizer, workload, LAYOUTS[name], max_candidate_tokens=response_tokens,
                                       seed=seed)
        prompts = [chat_prompt_ids(tokenizer, r.messages) for r in requests]
        rows.append(layout_row(f"corrections, {name}", prompts, distinct_references_per_prompt(requests)))
    return rows


def format_table(rows: list[dict]) -> str:
    lines = ["| prompts | requests | mean prompt tokens | shared prefix (token) | shared prefix (16-token blocks) "
             "| distinct references per prompt |", "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        refs = "" if r["distinct_refs"] is None else f"{r['distinct_refs']:.2f}"
        lines.append(f"| {r['layout']} | {r['requests']} | {r['mean_prompt_tokens']:,.0f} | "
                     f"{100 * r['shared_token_frac']:.1f}% | {100 * r['shared_block_frac']:.1f}% | {refs} |")
    return "\n".join(lines)


def check_group_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--correct`` right responses per group of ``--group-size``: at least one must be wrong, or there is no
    correction to measure (a table of zero requests)."""
    if args.correct >= args.group_size:
        parser.error(f"--correct {args.correct} must be below --group-size {args.group_size}: with no wrong "
                     "response in a group there is no correction to measure")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=positive_int, default=32)
    parser.add_argument("--group-size", type=int_at_least(2), default=8)
    parser.add_argument("--correct", type=nonnegative_int, default=2, help="correct responses per group")
    parser.add_argument("--response-tokens", type=positive_int, default=2048, help="L: tokens per response and candidate budget")
    parser.add_argument("--seed", type=nonnegative_int, default=0)
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    args = parser.parse_args(argv)
    check_group_options(parser, args)
    start = time.perf_counter()
    rows = run(args.prompts, args.group_size, args.correct, args.response_tokens, args.seed, args.layouts)
    print(f"{args.prompts} prompts x G={args.group_size}, {args.correct} right, L={args.response_tokens}, "
          f"seed {args.seed} ({time.perf_counter() - start:.1f} s)")
    print(format_table(rows))


if __name__ == "__main__":
    main()
