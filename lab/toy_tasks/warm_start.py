"""The toy task's tiny model and its SFT warm start, and the assets a CPU run needs.

    python -m lab.toy_tasks.warm_start --out /tmp/toy --measure

builds ``tokenizer/`` (byte-level BPE with one token per digit, trained on this task's text and the IBPO
correction prompt), ``model_sft/`` (a tiny Qwen2 LM fine-tuned on worked solutions, and on correction
prompts answered with the repaired solution so the policy can also correct) and ``data/{train,val}.parquet``.
The warm start is deliberately short: the policy is partly right, so groups mix right and wrong answers
and RL has something to learn. ``--measure`` reports sampled (temperature 1) and greedy accuracy on val.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from option_types.cli import output_folder, positive_int
from lab.toy_tasks.tasks import TASKS, ToyTask, get_task
from data_prep.common import read_verl_parquet
from lab.toy_tasks.rows import write_task_parquets
from toy_task.sft import collate, sampled_accuracy

HIDDEN_SIZE = 96
NUM_LAYERS = 2
SFT_STEPS = 1000
SFT_SEED_OFFSET = 1000  # SFT problems come from a seed disjoint from the RL train (seed) / val (seed + 1) ones
MAX_RESPONSE_TOKENS = 96


def correction_example(problem, rng: random.Random, task: ToyTask = TASKS["addition"]) -> tuple[list[dict], str]:
    """The trainer's correction prompt (``ibpo.prompts``, default template) for a wrong target with one local
    mistake and, 3 times in 4, a right solution as reference (else another wrong one), and its target: the
    target's local repair (the right solution in the target's own order)."""
    from ibpo.options import IBPOConfig
    from ibpo.prompts import build_correction_messages

    # this draw order keeps the addition warm starts byte-identical to the ones built before tasks existed
    reference = task.sft_solution(problem, rng) if rng.random() < 0.75 else task.wrong_and_repair(problem, rng)[0]
    wrong, repair = task.wrong_and_repair(problem, rng)
    original = [{"role": "user", "content": problem.prompt_text}]
    return build_correction_messages(original, wrong, [reference], IBPOConfig()), repair


def correction_messages(problem, rng: random.Random) -> list[dict]:
    """The toy addition's correction prompt (:func:`correction_example` without its target)."""
    return correction_example(problem, rng)[0]


def tokenizer_corpus(seed: int, num_lines: int = 600, task: ToyTask = TASKS["addition"]) -> list[str]:
    """Chat-formatted task text (prompts, worked solutions, correction prompts) to train the BPE on."""
    rng = random.Random(seed)
    lines = []
    for problem in task.sample_problems(num_lines, seed + 17):
        if rng.random() < 0.3:
            messages, target = correction_example(problem, rng, task)
        else:
            messages, target = [{"role": "user", "content": problem.prompt_text}], task.sft_solution(problem, rng)
        body = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        lines.append(f"{body}<|im_start|>assistant\n{target}<|im_end|>\n")
    return lines


def encode_example(tokenizer, messages: list[dict], target: str) -> tuple[list[int], list[int]]:
    """``(input_ids, labels)``: the chat prompt (labels -100) then the target and EOS."""
    prompt = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"])
    answer = tokenizer(target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return prompt + answer, [-100] * len(prompt) + answer


def sft_warm_start(model_dir: str | Path, out_dir: str | Path, steps: int = SFT_STEPS, batch_size: int = 16,
                   lr: float = 3e-3, seed: int = 0, num_problems: int = 4000,
                   correction_fraction: float = 0.25, num_threads: int = 1,
                   task: ToyTask = TASKS["addition"]) -> dict[str, float]:
    """Fine-tune ``model_dir`` on worked solutions (and a ``correction_fraction`` of batches of correction prompts
    answered with the correct solution) and save it with its tokenizer to ``out_dir``; returns losses and seconds.

    Batches are either all plain prompts (~120 tokens) or all correction prompts (~360 tokens), so plain batches
    are not padded to correction length. ``num_threads`` torch threads (1: on a shared 2-core machine a second
    thread mostly waits, measured 8x slower per step).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(num_threads)
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    rng = random.Random(seed + 7)
    plain, corrections = [], []
    for problem in task.sample_problems(num_problems, seed + SFT_SEED_OFFSET):
        if rng.random() < correction_fraction:
            corrections.append(encode_example(tokenizer, *correction_example(problem, rng, task)))
        else:
            plain.append(encode_example(tokenizer, [{"role": "user", "content": problem.prompt_text}],
                                        task.sft_solution(problem, rng)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 20))
    model.train()
    start, losses = time.perf_counter(), []
    for _ in range(steps):
        pool = corrections if rng.random() < correction_fraction else plain
        loss = model(**collate(rng.sample(pool, batch_size), tokenizer.pad_token_id)).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
    model.eval()
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    return {"first_loss": losses[0], "last_loss": losses[-1], "seconds": time.perf_counter() - start}


def build_toy_assets(out_dir: str | Path, sft_steps: int = SFT_STEPS, n_train: int = 1024, n_val: int = 64,
                     seed: int = 0, hidden_size: int = HIDDEN_SIZE, num_layers: int = NUM_LAYERS,
                     task: str = "addition") -> dict:
    """Tokenizer, warm-started model and train/val parquet under ``out_dir``; returns their paths and the
    SFT losses."""
    from verl_cpu.tiny_assets import build_tiny_model, build_tiny_tokenizer

    out = Path(out_dir).resolve()  # absolute paths in the returned dict: runs start in other directories
    spec = get_task(task)
    tokenizer = build_tiny_tokenizer(out / "tokenizer", seed=seed, corpus=tokenizer_corpus(seed, task=spec),
                                     individual_digits=True)
    build_tiny_model(out / "model_init", tokenizer, hidden_size=hidden_size, num_layers=num_layers, seed=seed)
    sft = sft_warm_start(out / "model_init", out / "model_sft", steps=sft_steps, seed=seed, task=spec)
    if task != "addition":  # the verl parquet rows exist for the addition task only (the loop needs none)
        return {"tokenizer": str(out / "tokenizer"), "model": str(out / "model_sft"), "task": task, "sft": sft}
    data = write_task_parquets(out / "data", n_train=n_train, n_val=n_val, seed=seed)
    return {"tokenizer": str(out / "tokenizer"), "model": str(out / "model_sft"), "train": data["train"],
            "val": data["val"], "sft": sft}


def measure(model_dir: str | Path, val_path: str | Path, samples_per_prompt: int = 4, seed: int = 0) -> dict:
    """Sampled (temperature 1) and greedy per-sample accuracy of ``model_dir`` on the val rows, scored by
    ``reward_fns``; the sampled one also reports the share of prompts whose samples mix right and wrong."""

    rows = read_verl_parquet(val_path)
    sampled = sampled_accuracy(model_dir, rows, samples_per_prompt=samples_per_prompt, temperature=1.0,
                               max_tokens=MAX_RESPONSE_TOKENS, seed=seed)
    greedy = sampled_accuracy(model_dir, rows, samples_per_prompt=1, temperature=0.0,
                              max_tokens=MAX_RESPONSE_TOKENS, seed=seed)
    return {"sampled": sampled, "greedy_accuracy": greedy["accuracy"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=output_folder, required=True, help="output directory")
    parser.add_argument("--sft-steps", type=positive_int, default=SFT_STEPS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--task", default="addition", choices=sorted(TASKS), help="lab.toy_tasks.tasks")
    parser.add_argument("--hidden-size", type=int, default=HIDDEN_SIZE, help="the policy's width (default: the toy's)")
    parser.add_argument("--num-layers", type=int, default=NUM_LAYERS, help="the policy's depth (default: the toy's)")
    parser.add_argument("--measure", action="store_true", help="report sampled and greedy accuracy on val")
    args = parser.parse_args(argv)
    if args.measure and args.task != "addition":  # the accuracy is measured on the addition task's val rows
        parser.error(f"--measure: the addition task only (its val rows), not --task {args.task}")
    if args.hidden_size < 8 or args.hidden_size % 8 or args.num_layers < 1:
        parser.error(f"--hidden-size must be a multiple of 8 (4 attention heads of even width), >= 8, and --num-layers >= 1; "
                     f"got {args.hidden_size}, {args.num_layers}")
    assets = build_toy_assets(args.out, sft_steps=args.sft_steps, seed=args.seed, task=args.task,
                              hidden_size=args.hidden_size, num_layers=args.num_layers)
    (Path(args.out) / "assets.json").write_text(json.dumps(assets, indent=1))  # read by lab/scripts/compare_methods.py
    print(json.dumps(assets, indent=1))
    if args.measure:
        print(json.dumps(measure(assets["model"], assets["val"])))


if __name__ == "__main__":
    main()
