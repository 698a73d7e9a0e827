"""Pure text functions that pull the final answer (math) or the program (code) out of a model response.

Nothing here runs math-verify or model code; everything is a small deterministic string function so it can be
called in the reward worker's threads and unit-tested directly.
"""

from __future__ import annotations

import re

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
BOXED_COMMANDS = ("\\boxed", "\\fbox")
# A final "Answer: ..." line (DAPO / Minerva prompt style). Case-insensitive, the value is the rest of the line.
ANSWER_LINE_RE = re.compile(r"(?i)answer\s*(?:\*\*)?[^\S\n]*:[^\S\n]*(?:\*\*)?[^\S\n]*([^\n]+)")
# How much of the final answer text math-verify's own extraction may look at (fallback mode only).
FALLBACK_TAIL_CHARS = 2000


def strip_thinking(text: str) -> str | None:
    """Return the part of ``text`` after the last ``</think>``; ``None`` if a ``<think>`` block never closes.

    A response without any think tags is returned unchanged. An unclosed ``<think>`` means the model ran out of
    tokens while reasoning, so it has no final answer (and no final code) at all.
    """
    close = text.rfind(THINK_CLOSE)
    if close >= 0:
        return text[close + len(THINK_CLOSE):]
    if THINK_OPEN in text:
        return None
    return text


def _balanced_braces_end(text: str, open_index: int) -> int | None:
    """Index just past the ``}`` matching the ``{`` at ``open_index``, or ``None`` if it never closes."""
    depth = 0
    i = open_index
    while i < len(text):
        ch = text[i]
        if ch == "\\":  # skip escaped characters such as \{ and \}
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def last_boxed_content(text: str) -> str | None:
    """Content of the last balanced ``\\boxed{...}`` or ``\\fbox{...}`` in ``text`` (``None`` if there is none).

    Unbalanced (truncated) boxes are skipped, so ``\\boxed{70} ... \\boxed{7`` yields ``70``.
    """
    best_start = -1
    best_content: str | None = None
    for command in BOXED_COMMANDS:
        search_from = len(text)
        while True:
            start = text.rfind(command + "{", 0, search_from)
            if start < 0:
                break
            brace = start + len(command)
            end = _balanced_braces_end(text, brace)
            if end is not None:
                if start > best_start:
                    best_start, best_content = start, text[brace + 1:end - 1]
                break
            search_from = start
    return best_content


def last_answer_line(text: str) -> str | None:
    """Value of the last ``Answer: <value>`` line (case-insensitive), or ``None``."""
    matches = ANSWER_LINE_RE.findall(text)
    for value in reversed(matches):
        if value.strip():
            return value
    return None


def normalise_answer(answer: str) -> str:
    """Strip decoration around an extracted answer: whitespace, ``**bold**``, ``$...$`` and a trailing ``.``/``,``."""
    s = answer.strip()
    previous = None
    while s != previous:
        previous = s
        s = s.strip()
        if s.startswith("**") and s.endswith("**") and len(s) >= 4:
            s = s[2:-2]
        if s.startswith("$") and s.endswith("$") and len(s) >= 2:
            s = s.strip("$")
        s = s.rstrip(".,;").strip()
    return s


def extract_math_answer(final_text: str) -> tuple[str | None, str]:
    """Pick the answer string from the final-answer text: last boxed, else last ``Answer:`` line.

    Returns ``(answer, how)`` with ``how`` in ``{"boxed", "answer_line", "none"}``.
    """
    boxed = last_boxed_content(final_text)
    if boxed is not None and boxed.strip():
        return normalise_answer(boxed), "boxed"
    line = last_answer_line(final_text)
    if line is not None:
        # "Answer: \boxed{70}" was handled above; "Answer: $70$." is normalised here.
        value = normalise_answer(line)
        if value:
            return value, "answer_line"
    return None, "none"


def extract_code_lcb(text: str) -> str:
    """LiveCodeBench's ``extract_code`` for chat models: the text between the last two lines containing a fence.

    Reproduces ``lcb_runner/utils/extraction_utils.py``: lines containing three backticks are fence lines; fewer
    than two such lines means no code (``""``).
    """
    lines = text.split("\n")
    fence_lines = [i for i, line in enumerate(lines) if "```" in line]
    if len(fence_lines) < 2:
        return ""
    return "\n".join(lines[fence_lines[-2] + 1:fence_lines[-1]])


def truncate_middle(text: str, limit: int) -> str:
    """Shorten ``text`` to about ``limit`` characters keeping both ends (for the ``pred`` field in logs)."""
    if len(text) <= limit:
        return text
    half = max(1, (limit - 5) // 2)
    return text[:half] + " ... " + text[-half:]
