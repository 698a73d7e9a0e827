"""Does a correction change the tokens that were wrong? Credit localisation on the toy task, as pure functions.

For a wrong response y with a right correction ŷ, IBPO-mask trains the tokens the alignment marks as modified,
M = {t : t ∉ U(y, ŷ)} (paper Eq. 7/17, ``ibpo.alignment``). On the toy task the tokens that were actually
wrong are known from the task's own ground truth y*: W = {t : t ∉ U(y, y*)}, the tokens a minimal edit of y
into the right worked solution changes (the first wrong digit sum, the carry and digit it writes, what the
next lines read from it, the answer digits). Per correction:

- precision |M ∩ W| / |M| (share of the trained tokens that were wrong; undefined when M is empty),
- recall |M ∩ W| / |W| (share of the wrong tokens the correction changed; undefined when W is empty),
- covers the first error: every wrong token of the first line holding a wrong token is in M,
- copy: ŷ is token for token the reference it was shown (the "correction" copied the other candidate).

Sequences are token-id lists; the line of every token comes from the caller (the tokenizer knows which
tokens hold a line break).
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import numpy as np

from ibpo.alignment import unmodified_positions


def modified_mask(response: Sequence[int], correction: Sequence[int]) -> np.ndarray:
    """M: True on the tokens of ``response`` an optimal alignment with ``correction`` does not keep."""
    return ~unmodified_positions(response, correction)[0]


def wrong_mask(response: Sequence[int], truth: Sequence[int]) -> np.ndarray:
    """W: True on the tokens of ``response`` that a minimal edit into the ground-truth solution changes."""
    return ~unmodified_positions(response, truth)[0]


def line_index(token_texts: Sequence[str]) -> np.ndarray:
    """Line number of every token (a token that contains a line break ends its line)."""
    lines, current = np.zeros(len(token_texts), dtype=np.int64), 0
    for i, text in enumerate(token_texts):
        lines[i] = current
        current += text.count("\n")
    return lines


def first_error_mask(wrong: np.ndarray, lines: np.ndarray) -> np.ndarray:
    """The wrong tokens of the first line that holds a wrong token (all False when nothing is wrong)."""
    wrong = np.asarray(wrong, dtype=bool)
    lines = np.asarray(lines)
    if wrong.shape != lines.shape:
        raise ValueError(f"wrong mask {wrong.shape} and line index {lines.shape} must have the same shape")
    if not wrong.any():
        return wrong.copy()
    first_line = lines[np.argmax(wrong)]
    return wrong & (lines == first_line)


@dataclass(frozen=True)
class Localisation:
    """One right correction of one wrong response."""

    modified: int  # |M|
    wrong: int  # |W|
    overlap: int  # |M ∩ W|
    covers_first_error: bool
    copy_of_reference: bool
    reference_right: bool

    @property
    def precision(self) -> float:
        return self.overlap / self.modified if self.modified else float("nan")

    @property
    def recall(self) -> float:
        return self.overlap / self.wrong if self.wrong else float("nan")

    def as_dict(self) -> dict:
        return {**asdict(self), "precision": self.precision, "recall": self.recall}


def _strip(ids: Sequence[int], eos_ids: frozenset[int]) -> list[int]:
    ids = list(ids)
    while ids and ids[-1] in eos_ids:
        ids.pop()
    return ids


def localise(response: Sequence[int], correction: Sequence[int], truth: Sequence[int], reference: Sequence[int],
             lines: np.ndarray, reference_right: bool, eos_ids: Iterable[int] = ()) -> Localisation:
    """Compare M (what the correction changed) with W (what was wrong) for one right correction.

    ``lines`` is the line index of every token of ``response`` (:func:`line_index`). Trailing EOS tokens are
    ignored in the copy test (a copy may differ from its reference only by where generation stopped).
    """
    eos = frozenset(int(i) for i in eos_ids)
    m = modified_mask(response, correction)
    w = wrong_mask(response, truth)
    first = first_error_mask(w, lines)
    copy = _strip(correction, eos) == _strip(reference, eos)
    return Localisation(int(m.sum()), int(w.sum()), int((m & w).sum()), bool(first.any() and not (first & ~m).any()),
                        bool(copy), bool(reference_right))


def summarise(items: Sequence[Localisation]) -> dict[str, float]:
    """Means over corrections: precision and recall (over the corrections where each is defined), the shares
    that cover the first error and that are copies of the reference, and the count."""
    if not items:
        return {"count": 0, "precision": float("nan"), "recall": float("nan"), "covers_first_error": float("nan"),
                "copy_of_reference": float("nan")}
    precision = [i.precision for i in items if i.modified]
    recall = [i.recall for i in items if i.wrong]
    return {
        "count": len(items),
        "precision": float(np.mean(precision)) if precision else float("nan"),
        "recall": float(np.mean(recall)) if recall else float("nan"),
        "covers_first_error": float(np.mean([i.covers_first_error for i in items])),
        "copy_of_reference": float(np.mean([i.copy_of_reference for i in items])),
    }


if __name__ == "__main__":
    sys.exit('lab.analysis.credit_localisation is a module of pure functions, not a command: '
             'its numbers come from `python -m lab.analysis.toy_loop` runs and are tabled by `python -m lab.analysis.curves_report`')
