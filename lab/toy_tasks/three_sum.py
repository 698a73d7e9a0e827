"""The second CPU task, built for the regime the IBPO paper targets (``docs/evidence.md``, "A task in the
paper's regime"; designed and committed before its first RL run): ``a + b + c`` with three 3-digit numbers,
solved in any of **six orders** — add two of the numbers digit by digit, then the third to their sum::

    What is 352 + 918 + 461? Add two of the numbers digit by digit, then add the third to their sum, ...
    first 918 + 461
    d1: 8+1+0=9 write 9 carry 0
    d2: 1+6+0=7 write 7 carry 0
    d3: 9+4+0=13 write 3 carry 1
    sum 1379
    then 1379 + 352
    d1: 9+2+0=11 write 1 carry 1
    ...
    \\boxed{1731}

Why this task (the properties the issue asks for, decided before any run):

- **Right siblings do not share their token sequences**: two right answers in different orders share the line
  format but few digits; a wrong answer in one order and a right one in another differ almost everywhere, so
  GSPO's group contrast cannot isolate the slip (the toy addition's single path shares ~93% of its tokens).
- **Errors of several kinds stay local within a path**: a digit-sum slip in either addition, a dropped carry,
  a miscopied partial sum; each changes a line, what reads it, and the answer.
- **Some wrong answers are far from any right one**: stopping after the first addition (the third number
  forgotten) leaves half the solution missing.
- **An oracle exists**: the right worked solution *in the response's own order* (the nearest of the six by
  token edit distance), so the oracle mask trains exactly the wrong tokens of the path the policy took.

About 140 tokens per solution (digits are single tokens), 1.7x the toy addition.

**The named variant** (``three_sum_named``; added after the first design's warm starts, before any RL run on
either): the 0.2M-parameter policy learned the first design's arithmetic but not to copy whole 3-digit numbers
(it writes ``first 700 + 195`` for 900, 795, 181: copying by "the token after the last one copied" is ambiguous
when digits repeat). The named variant labels the operands in the prompt (``a=900 b=795 c=181``) and the
solution names the pair it adds (``first a + c`` ... ``then sum + b``), so every digit is fetched by its
position, as in the toy addition; the six orders, the four error kinds and the oracle are the same::

    first a + c
    d1: 0+1+0=1 write 1 carry 0
    ...
    sum 1081
    then sum + b
    d1: 1+5+0=6 write 6 carry 0
    ...
    \\boxed{1876}
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from lab.toy_tasks.addition import digit_lines

DATA_SOURCE = "ibpo/toy_three_sum"
NAMED_DATA_SOURCE = "ibpo/toy_three_sum_named"
NAMES = "abc"
NUM_DIGITS = 3
INSTRUCTION = ("Add two of the numbers digit by digit, then add the third to their sum, and put the final answer "
               "within \\boxed{}.")
ORDERS = tuple(itertools.permutations(range(3)))  # (first, second, third) operand indices: six orders


@dataclass(frozen=True)
class ThreeSumProblem:
    """``a + b + c`` with three ``NUM_DIGITS``-digit operands."""

    a: int
    b: int
    c: int

    @property
    def operands(self) -> tuple[int, int, int]:
        return (self.a, self.b, self.c)

    @property
    def answer(self) -> int:
        return self.a + self.b + self.c

    @property
    def prompt_text(self) -> str:
        return f"What is {self.a} + {self.b} + {self.c}? {INSTRUCTION}"

    @property
    def solution(self) -> str:
        """The right worked solution in the canonical order (a + b, then + c)."""
        return render_solution(self, ORDERS[0])

    @property
    def right_solutions(self) -> tuple[str, ...]:
        """The right worked solution in each of the six orders (the oracle's candidates)."""
        return tuple(dict.fromkeys(render_solution(self, order) for order in ORDERS))


@dataclass(frozen=True)
class NamedThreeSumProblem(ThreeSumProblem):
    """The named variant: operands labelled in the prompt and named, not copied, in the solution."""

    @property
    def prompt_text(self) -> str:
        return f"a={self.a} b={self.b} c={self.c}. What is a + b + c? {INSTRUCTION}"


def render_solution(problem: ThreeSumProblem, order: tuple[int, int, int], first_errors: dict[int, int] | None = None,
                    second_errors: dict[int, int] | None = None, copied_sum_offset: int = 0,
                    stop_after_first: bool = False) -> str:
    """The worked solution in ``order``; the error arguments make a wrong one (``digit_lines``' ``sum_errors``
    in either addition, a miscopied partial sum, or the third number forgotten). A ``NamedThreeSumProblem``'s
    solution names the operands (``first a + c``, ``sum 1081`` as it is carried on, ``then sum + b``)."""
    x, y, z = (problem.operands[i] for i in order)
    named = isinstance(problem, NamedThreeSumProblem)
    first, partial = digit_lines(x, y, first_errors)
    lines = [f"first {NAMES[order[0]]} + {NAMES[order[1]]}" if named else f"first {x} + {y}", *first]
    if stop_after_first:
        return "\n".join(lines) + f"\n\\boxed{{{partial}}}"
    carried = max(int(partial) + copied_sum_offset, 0)
    second, total = digit_lines(carried, z, second_errors)
    lines += ([f"sum {carried}", f"then sum + {NAMES[order[2]]}"] if named
              else [f"sum {partial}", f"then {carried} + {z}"])
    return "\n".join(lines + second) + f"\n\\boxed{{{total}}}"


def wrong_and_repair(problem: ThreeSumProblem, rng: random.Random) -> tuple[str, str]:
    """A wrong worked solution with one error of a random kind, in a random order, and the right solution in
    the same order (the local repair a correction should write)."""
    order = rng.choice(ORDERS)
    right = render_solution(problem, order)
    for _ in range(100):
        kind = rng.randrange(4)
        slip = {rng.randrange(NUM_DIGITS): rng.choice([-2, -1, 1, 2])}
        text = render_solution(problem, order,
                               first_errors=slip if kind == 0 else None,
                               second_errors={rng.randrange(NUM_DIGITS + 1): rng.choice([-2, -1, 1, 2])} if kind == 1 else None,
                               copied_sum_offset=rng.choice([-10, -1, 1, 10]) if kind == 2 else 0,
                               stop_after_first=kind == 3)
        if not text.endswith(f"{{{problem.answer}}}"):
            return text, right
    raise RuntimeError(f"could not make a wrong solution for {problem}")


def sft_solution(problem: ThreeSumProblem, rng: random.Random) -> str:
    """An SFT target: the right solution in a uniformly drawn order."""
    return render_solution(problem, rng.choice(ORDERS))


def sample_problems(n: int, seed: int, num_digits: int = NUM_DIGITS, named: bool = False) -> list[ThreeSumProblem]:
    """``n`` problems with ``num_digits``-digit operands, drawn with a seeded RNG (the same operands for both
    variants; ``named`` gives ``NamedThreeSumProblem``)."""
    if num_digits < 1:
        raise ValueError(f"num_digits={num_digits} must be >= 1")
    rng = random.Random(seed)
    lo, hi = 10 ** (num_digits - 1), 10**num_digits - 1
    kind = NamedThreeSumProblem if named else ThreeSumProblem
    return [kind(rng.randint(lo, hi), rng.randint(lo, hi), rng.randint(lo, hi)) for _ in range(n)]
