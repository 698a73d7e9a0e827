"""Multi-digit addition written digit by digit, one line per digit, least significant digit first::

    What is 4572 + 3851?
    d1: 2+1+0=3 write 3 carry 0
    d2: 7+5+0=12 write 2 carry 1
    d3: 5+8+1=14 write 4 carry 1
    d4: 4+3+1=8 write 8 carry 0
    \\boxed{8423}

With 4-digit operands a solution is about 75 tokens (digits are single tokens). A mistake is a local
edit: one wrong digit sum changes that line, the carry read by the next line and one digit of the answer,
so a correction is a partial repair of the wrong response (few changed tokens), which is what IBPO's
rewrite filter (d(y, ŷ) <= α) is meant to keep.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

DATA_SOURCE = "ibpo/toy_addition"
NUM_DIGITS = 4
INSTRUCTION = "Add digit by digit and put the final answer within \\boxed{}."


@dataclass(frozen=True)
class AdditionProblem:
    """``a + b`` with two operands of the same number of digits."""

    a: int
    b: int

    @property
    def answer(self) -> int:
        return self.a + self.b

    @property
    def question(self) -> str:
        return f"What is {self.a} + {self.b}?"

    @property
    def prompt_text(self) -> str:
        """The user turn: the question and the answer-format instruction."""
        return f"{self.question} {INSTRUCTION}"

    @property
    def solution(self) -> str:
        """The correct worked solution (the SFT target)."""
        return render_solution(self.a, self.b)


def digit_lines(a: int, b: int, sum_errors: dict[int, int] | None = None) -> tuple[list[str], str]:
    """The digit lines of ``a + b`` and the answer they produce.

    ``sum_errors`` maps a digit position (0 = least significant) to an offset added to that position's
    sum: the line then writes the wrong sum, and its digit and carry follow from it, as a person who
    miscounted once would continue. The answer is what the lines write (the final carry in front).
    """
    sum_errors = sum_errors or {}
    width = max(len(str(a)), len(str(b)))
    da, db = str(a).zfill(width)[::-1], str(b).zfill(width)[::-1]
    lines, written, carry = [], [], 0
    for i in range(width):
        x, y = int(da[i]), int(db[i])
        s = min(max(x + y + carry + sum_errors.get(i, 0), 0), 19)
        lines.append(f"d{i + 1}: {x}+{y}+{carry}={s} write {s % 10} carry {s // 10}")
        written.append(str(s % 10))
        carry = s // 10
    answer = ("1" if carry else "") + "".join(reversed(written))
    return lines, answer.lstrip("0") or "0"


def render_solution(a: int, b: int, sum_errors: dict[int, int] | None = None) -> str:
    """Digit lines, then ``\\boxed{answer}``."""
    lines, answer = digit_lines(a, b, sum_errors)
    return "\n".join(lines) + f"\n\\boxed{{{answer}}}"


def wrong_solution(problem: AdditionProblem, rng: random.Random) -> str:
    """A worked solution with one local mistake (a digit sum off by ±1 or ±2) whose answer is wrong."""
    width = len(str(max(problem.a, problem.b)))
    for _ in range(100):
        errors = {rng.randrange(width): rng.choice([-2, -1, 1, 2])}
        text = render_solution(problem.a, problem.b, errors)
        if not text.endswith(f"{{{problem.answer}}}"):
            return text
    raise RuntimeError(f"could not make a wrong solution for {problem}")


def sample_problems(n: int, seed: int, num_digits: int = NUM_DIGITS) -> list[AdditionProblem]:
    """``n`` problems with ``num_digits``-digit operands, drawn with a seeded RNG."""
    if num_digits < 1:
        raise ValueError(f"num_digits={num_digits} must be >= 1")
    rng = random.Random(seed)
    lo, hi = 10 ** (num_digits - 1), 10**num_digits - 1
    return [AdditionProblem(rng.randint(lo, hi), rng.randint(lo, hi)) for _ in range(n)]
