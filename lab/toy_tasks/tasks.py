"""The CPU evidence's tasks, by name (``--task`` of ``lab.toy_tasks.warm_start`` and ``lab.analysis.toy_loop``): what the
warm start and the loop need of a task, and nothing else.

- ``addition`` (``lab.toy_tasks.addition``): one worked path per problem, a wrong answer shares most of its tokens
  with the right one.
- ``three_sum`` (``lab.toy_tasks.three_sum``): six valid orders per problem, so right and wrong siblings share few
  tokens; the regime the paper targets.
- ``three_sum_named`` (``lab.toy_tasks.three_sum``): the same problems with the operands labelled in the prompt and
  named in the solution (no whole-number copying, which the tiny policy could not learn).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

from lab.toy_tasks import addition, three_sum


@dataclass(frozen=True)
class ToyTask:
    """A task of the CPU evidence. Problems have ``prompt_text`` and ``answer``."""

    name: str
    data_source: str  # scored by reward_fns as math (\\boxed{} answer against ``answer``)
    sample_problems: Callable[[int, int], list]  # (n, seed) -> problems
    sft_solution: Callable[[Any, random.Random], str]  # a right worked solution (a random order where several)
    wrong_and_repair: Callable[[Any, random.Random], tuple[str, str]]  # (wrong solution, its local repair)
    right_solutions: Callable[[Any], tuple[str, ...]]  # every right worked solution (the oracle's candidates)
    max_response_tokens: int  # generation budget of a response (and of a correction)


TASKS = {
    "addition": ToyTask("addition", addition.DATA_SOURCE, addition.sample_problems, lambda p, rng: p.solution,
                        lambda p, rng: (addition.wrong_solution(p, rng), p.solution), lambda p: (p.solution,), 96),
    "three_sum": ToyTask("three_sum", three_sum.DATA_SOURCE, three_sum.sample_problems, three_sum.sft_solution,
                         three_sum.wrong_and_repair, lambda p: p.right_solutions, 192),
    "three_sum_named": ToyTask("three_sum_named", three_sum.NAMED_DATA_SOURCE,
                               lambda n, seed: three_sum.sample_problems(n, seed, named=True), three_sum.sft_solution,
                               three_sum.wrong_and_repair, lambda p: p.right_solutions, 192),
}


def get_task(name: str) -> ToyTask:
    """The task ``name``; an unknown name raises ``ValueError`` listing the known ones."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown toy task {name!r}; known: {sorted(TASKS)}") from None
