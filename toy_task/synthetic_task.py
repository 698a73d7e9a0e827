"""The synthetic CPU task (``data_source="ibpo/synthetic_arith"``) and a seconds-long SFT warm start.

A randomly initialised tiny model never produces a correct answer, so every GRPO group is all-wrong,
every advantage is 0 and nothing trains. IBPO additionally needs wrong answers that have right
siblings. This module provides:

* verl-format parquet rows of small integer arithmetic problems (``a + b`` / ``a - b``), written with
  the project's math row schema (:func:`data_prep.common.make_math_row`, ``boxed`` template), ground
  truth an integer string, answers expected as ``\\boxed{N}``;
* :func:`sft_warm_start`: a plain-torch supervised loop on ``"a op b = N \\boxed{N}"`` completions
  that makes the tiny model answer in format and sometimes correctly (accuracy under temperature-1
  sampling is measured by :func:`sampled_accuracy`, not assumed);
* :func:`build_cpu_demo_assets`: tokenizer + warm-started model + train/val parquet in one call.

    python -m toy_task.synthetic_task --out /tmp/ibpo_cpu_demo
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from option_types.cli import output_folder, positive_int
from toy_task.sft import collate, sampled_accuracy  # shared with lab.toy_tasks.warm_start

DATA_SOURCE = "ibpo/synthetic_arith"
OPERATORS = ("+", "-")
TEMPLATE = "boxed"
# Single-digit operands: the ~0.1M-parameter model learns them to ~40% sampled accuracy in 450 SFT steps.
MAX_OPERAND = 9
SFT_STEPS = 450



@dataclass(frozen=True)
class ArithProblem:
    """``a op b`` with its integer answer."""

    a: int
    op: str
    b: int

    @property
    def answer(self) -> int:
        return self.a + self.b if self.op == "+" else self.a - self.b

    @property
    def question(self) -> str:
        return f"What is {self.a} {self.op} {self.b}?"

    @property
    def solution(self) -> str:
        """The SFT target: the worked equation, then the boxed answer."""
        return f"{self.a} {self.op} {self.b} = {self.answer} \\boxed{{{self.answer}}}"


def sample_problems(n: int, seed: int, max_operand: int = MAX_OPERAND) -> list[ArithProblem]:
    """``n`` problems with operands in ``[0, max_operand]``, drawn with a seeded RNG."""
    rng = random.Random(seed)
    return [
        ArithProblem(rng.randint(0, max_operand), rng.choice(OPERATORS), rng.randint(0, max_operand)) for _ in range(n)
    ]


def problem_row(problem: ArithProblem, split: str, index: int) -> dict:
    """One verl row (the project's math schema) for ``problem``."""
    from data_prep.common import make_math_row

    return make_math_row(
        data_source=DATA_SOURCE,
        problem=problem.question,
        answer=str(problem.answer),
        template=TEMPLATE,
        split=split,
        index=index,
        problem_id=f"synthetic_arith-{split}-{index}",
        source="toy_task.synthetic_task",
    )


def write_task_parquets(
    out_dir: str | Path, n_train: int = 64, n_val: int = 16, seed: int = 0, max_operand: int = MAX_OPERAND
) -> dict[str, str]:
    """Write ``train.parquet`` and ``val.parquet`` (disjoint seeds); returns their paths."""
    from data_prep.common import MATH_EXTRA_INFO, write_verl_parquet

    out = Path(out_dir)
    paths = {}
    for split, n, split_seed in (("train", n_train, seed), ("val", n_val, seed + 1)):
        rows = [problem_row(p, split, i) for i, p in enumerate(sample_problems(n, split_seed, max_operand))]
        paths[split] = str(write_verl_parquet(rows, out / f"{split}.parquet", MATH_EXTRA_INFO))
    return paths


# ---------------------------------------------------------------------------------------------
# SFT warm start
# ---------------------------------------------------------------------------------------------


def encode_sft_example(tokenizer, problem: ArithProblem, prompt_text: str | list[dict]) -> tuple[list[int], list[int]]:
    """``(input_ids, labels)`` for one chat example (a user text or chat messages); labels are -100 on the
    prompt (loss on the answer)."""
    messages = [{"role": "user", "content": prompt_text}] if isinstance(prompt_text, str) else prompt_text
    prompt_ids = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"])
    answer_ids = tokenizer(problem.solution, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return prompt_ids + answer_ids, [-100] * len(prompt_ids) + answer_ids


def wrong_solution(problem: ArithProblem, rng: random.Random) -> str:
    """A plausible wrong worked answer: the right equation with the result off by 1-3."""
    wrong = problem.answer + rng.choice([-3, -2, -1, 1, 2, 3])
    return f"{problem.a} {problem.op} {problem.b} = {wrong} \\boxed{{{wrong}}}"


def correction_example_messages(problem: ArithProblem, rng: random.Random) -> list[dict]:
    """An IBPO correction prompt (the trainer's own template, ``ibpo.prompts``) for this problem: a wrong
    target and, 3 times in 4, the right solution as reference (else another wrong one)."""
    from data_prep.templates import render_math_prompt
    from ibpo.options import IBPOConfig
    from ibpo.prompts import build_correction_messages

    reference = problem.solution if rng.random() < 0.75 else wrong_solution(problem, rng)
    original = [{"role": "user", "content": render_math_prompt(problem.question, TEMPLATE)}]
    return build_correction_messages(original, wrong_solution(problem, rng), [reference], IBPOConfig())


def sft_warm_start(
    model_dir: str | Path,
    out_dir: str | Path,
    steps: int = SFT_STEPS,
    batch_size: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
    max_operand: int = MAX_OPERAND,
    num_problems: int = 2000,
    correction_fraction: float = 0.25,
    log_every: int = 50,
) -> dict[str, float]:
    """Fine-tune the model in ``model_dir`` on synthetic solutions and save it (with tokenizer) to ``out_dir``.

    A ``correction_fraction`` of the examples are IBPO correction prompts (a wrong candidate and a
    reference) answered with the locally repaired solution, so the tiny model can also perform the
    compare-and-correct step the trainer asks of it (a real reasoning model brings that ability along).
    Problems are drawn from a seed disjoint from the RL train/val seeds. Prints a progress line every
    ``log_every`` steps (0 = silent). Returns the first and last training losses and the wall time.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from data_prep.templates import render_math_prompt

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
    problems = sample_problems(num_problems, seed + 1000, max_operand)

    prompt_rng = random.Random(seed + 7)
    examples = [
        encode_sft_example(tokenizer, p, correction_example_messages(p, prompt_rng)
                           if prompt_rng.random() < correction_fraction else render_math_prompt(p.question, TEMPLATE))
        for p in problems
    ]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rng = random.Random(seed)
    model.train()
    start, losses = time.perf_counter(), []
    for step in range(1, steps + 1):
        batch = collate(rng.sample(examples, batch_size), tokenizer.pad_token_id)
        loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        if log_every and (step % log_every == 0 or step == steps):
            recent = losses[-log_every:]
            print(f"[warm start] SFT step {step}/{steps}: loss {sum(recent) / len(recent):.3f} "
                  f"(mean of the last {len(recent)}), {time.perf_counter() - start:.0f} s", flush=True)
    model.eval()
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    return {"first_loss": losses[0], "last_loss": losses[-1], "seconds": time.perf_counter() - start}


# ---------------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------------


def demo_assets_config(sft_steps: int = SFT_STEPS, n_train: int = 64, n_val: int = 16, seed: int = 0) -> dict:
    """What :func:`build_cpu_demo_assets` was called with, recorded beside the paths it returns (``built_with``):
    a cache of the assets (the quickstart's ``assets.json``) is reused only for the configuration that built it."""
    return {"builder": "toy_task.synthetic_task", "sft_steps": sft_steps, "n_train": n_train, "n_val": n_val,
            "seed": seed}


def build_cpu_demo_assets(
    out_dir: str | Path, sft_steps: int = SFT_STEPS, n_train: int = 64, n_val: int = 16, seed: int = 0
) -> dict:
    """Tokenizer, warm-started tiny model and train/val parquet under ``out_dir``; returns their paths and
    ``built_with`` (:func:`demo_assets_config`)."""
    from verl_cpu.tiny_assets import build_tiny_assets

    out = Path(out_dir)
    tiny = build_tiny_assets(out / "tiny", seed=seed)
    sft_warm_start(tiny["model"], out / "model_sft", steps=sft_steps, seed=seed)
    data = write_task_parquets(out / "data", n_train=n_train, n_val=n_val, seed=seed)
    return {"tokenizer": tiny["tokenizer"], "model": str(out / "model_sft"), "train": data["train"], "val": data["val"],
            "built_with": demo_assets_config(sft_steps, n_train, n_val, seed)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=output_folder, required=True, help="output directory")
    parser.add_argument("--sft-steps", type=positive_int, default=SFT_STEPS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--measure", action="store_true", help="report sampled accuracy on the val rows")
    args = parser.parse_args(argv)
    paths = build_cpu_demo_assets(args.out, sft_steps=args.sft_steps, seed=args.seed)
    print(json.dumps(paths, indent=1))
    if args.measure:
        from data_prep.common import read_verl_parquet

        print(json.dumps(sampled_accuracy(paths["model"], read_verl_parquet(paths["val"]))))


if __name__ == "__main__":
    main()
