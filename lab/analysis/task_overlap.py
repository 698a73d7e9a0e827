"""How much of a wrong answer its right siblings already share, per task, from the task's own worked solutions
(``ibpo.mechanism.sibling_overlap`` on synthetic groups; ``docs/evidence.md`` section 2).

Each group holds ``right`` right worked solutions (a random order where the task has several) and ``wrong``
wrong ones with one error each (``ToyTask.wrong_and_repair``), tokenised with the task's tokenizer. This is the
task's property under a policy that writes its solutions the way the SFT data does; the RL runs measure the
same metric on the policy's own samples (``mechanism/wrong_tokens_shared_with_right_sibling``).

    python -m lab.analysis.task_overlap --task three_sum --tokenizer DIR
"""

from __future__ import annotations

import argparse
import random
import sys

from ibpo.mechanism import sibling_overlap
from lab.toy_tasks.tasks import get_task


def synthetic_overlap(task_name: str, encode, problems: int = 200, right: int = 2, wrong: int = 2,
                      seed: int = 0) -> dict[str, float]:
    """``sibling_overlap`` over ``problems`` synthetic groups of ``right`` right and ``wrong`` wrong solutions."""
    task = get_task(task_name)
    rng = random.Random(seed)
    responses, correct, groups = [], [], []
    for g, problem in enumerate(task.sample_problems(problems, seed + 99)):
        texts = [(task.sft_solution(problem, rng), True) for _ in range(right)]
        texts += [(task.wrong_and_repair(problem, rng)[0], False) for _ in range(wrong)]
        for text, ok in texts:
            responses.append(encode(text))
            correct.append(ok)
            groups.append(g)
    return sibling_overlap(responses, correct, groups)


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoTokenizer

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True)
    p.add_argument("--tokenizer", required=True, help="the task's tokenizer (a warm start's model directory)")
    p.add_argument("--problems", type=int, default=200)
    args = p.parse_args(argv)
    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    out = synthetic_overlap(args.task, lambda t: tok(t, add_special_tokens=False)["input_ids"], args.problems)
    print(f"{args.task}: wrong tokens shared with a right sibling {out['wrong_tokens_shared_with_right_sibling']:.3f} "
          f"over {int(out['wrong_in_mixed_groups'])} wrong responses (2 right + 2 wrong per group)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
