"""Pure text functions that pull the final answer (math) or the program (code) out of a model response.

Nothing here runs math-verify or model code; everything is a small deterministic string function so it can be
called anywhere and unit-tested directly. The math functions are linear-time in the length of the text (one
left-to-right scan for braces; no regular expression with overlapping quantifiers), and the math worker runs
them under the same wall-clock deadline as math-verify. This module imports nothing but ``re`` so that
``_math_worker.py`` can load it by path.
"""

from __future__ import annotations

import re

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
BOXED_COMMANDS = ("\\boxed", "\\fbox")
# "answer" + optional whitespace/bold + ":"; the value is the rest of the line. No two adjacent quantifiers can
# match the same character, so a long whitespace run costs linear time (the old pattern backtracked
# quadratically: "answer" + 1 MB of spaces took about a minute).
ANSWER_LINE_RE = re.compile(r"(?i)answer\s*(?:\*\*[^\S\n]*)?:([^\n]*)")
# How much of the final answer text the fallback (stated final answer) extraction may look at.
FALLBACK_TAIL_CHARS = 2000
# Longer extracted answers are not answers (a real final answer is a short expression); scored wrong_answer.
MAX_ANSWER_CHARS = 2000
# Boxes of one multi-valued final answer may be separated only by this much connective text.
MAX_BOX_GAP_CHARS = 80


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


# One token per match: a box opening, an escaped character (skipped, so \{ and \} never count), or a brace.
_BOX_TOKEN_RE = re.compile(r"\\(?:boxed|fbox)\{|\\.|[{}]", re.DOTALL)
# Connective text allowed between the boxes of one multi-valued answer: math delimiters, spaces, commas,
# "and"/"or", and an assignment such as "x =" or "x_2 =" ("$x=\boxed{3}$ and $x=\boxed{5}$").
_NAME = r"(?:[A-Za-z]|\\(?:alpha|beta|gamma|delta|epsilon|varepsilon|zeta|eta|theta|vartheta|iota|kappa|lambda|mu|nu|xi|" \
        r"pi|rho|sigma|tau|upsilon|phi|varphi|chi|psi|omega|Gamma|Delta|Theta|Lambda|Xi|Pi|Sigma|Phi|Psi|Omega)" \
        r"(?![A-Za-z]))(?:_(?:\{[A-Za-z0-9, ]{1,8}\}|[A-Za-z0-9]))?'*"
_GAP_RE = re.compile(r"(?:\s|\$|\\[\[\]()]|\\\\|[,;&]|\\q?quad(?![A-Za-z])|\\[,;:! ]"
                     r"|\\(?:text|mbox|textrm)\{[\s,]*(?:(?:and|or)[\s,]*)?\}|(?<![A-Za-z])(?:and|or)(?![A-Za-z])"
                     rf"|{_NAME} ?=)*", re.IGNORECASE)
MAX_BOXES_IN_ANSWER = 16


def balanced_boxes(text: str) -> list[tuple[int, int, int]]:
    """All balanced ``\\boxed{...}`` / ``\\fbox{...}`` as ``(start, content_start, end)``, ordered by ``end``.

    One left-to-right scan with a stack of open braces (linear time however many boxes never close); a
    backslash escapes the next character, so ``\\{`` and ``\\}`` never count.
    """
    stack: list[tuple[int, int] | None] = []
    boxes: list[tuple[int, int, int]] = []
    for match in _BOX_TOKEN_RE.finditer(text):
        token = match.group()
        if token == "{":
            stack.append(None)
        elif token == "}":
            if stack:
                opened = stack.pop()
                if opened is not None:
                    boxes.append((opened[0], opened[1], match.end()))
        elif token.endswith("{") and len(token) > 2:
            stack.append((match.start(), match.end()))
    return boxes


def last_boxed_content(text: str) -> str | None:
    """Content of the last balanced ``\\boxed{...}`` or ``\\fbox{...}`` in ``text`` (``None`` if there is none).

    "Last" is the box that closes last, so for nested boxes it is the outer one (``\\boxed{\\boxed{70}+1}``
    yields ``\\boxed{70}+1``, not ``70``). Unbalanced (truncated) boxes are skipped, so
    ``\\boxed{70} ... \\boxed{7`` yields ``70``.
    """
    boxes = balanced_boxes(text)
    if not boxes:
        return None
    _start, content_start, end = boxes[-1]
    return text[content_start:end - 1]


def _final_box_group(text: str) -> list[tuple[int, int, int]]:
    boxes = balanced_boxes(text)
    group: list[tuple[int, int, int]] = []
    for box in reversed(boxes):
        if group:
            if box[2] > group[-1][0]:
                continue  # nested inside a box already taken
            gap = text[box[2]:group[-1][0]]
            if len(gap) > MAX_BOX_GAP_CHARS or not _GAP_RE.fullmatch(gap) or len(group) >= MAX_BOXES_IN_ANSWER:
                break
        group.append(box)
    group.reverse()
    return group


def final_boxes(text: str) -> list[str]:
    """Contents of the boxes that make up the final answer: the last top-level box, plus the boxes before it
    that are joined to it only by connective text (``$x=\\boxed{3}$ and $x=\\boxed{5}$`` gives ``["3", "5"]``).
    Boxes nested inside a final box are part of its content. Empty if there is no balanced box."""
    return [text[content_start:end - 1] for _start, content_start, end in _final_box_group(text)]


# An operand or operator right next to the final box makes the box part of a larger expression:
# "\boxed{70}+1", "\boxed{70}^2", "\boxed{70} \approx 71", "2\boxed{35}", "-\boxed{984}", "\frac{1}{\boxed{70}}".
_AFTER_BOX_RE = re.compile(r"[-+*/^_=<>!'0-9(\[|≈≠≤≥±]|[ \t]{1,16}(?:[-+*/^_=<>|≈≠≤≥±]|\\(?:cdot|times|div|pm|mp|"
                           r"approx|sim|simeq|cong|le|ge|leq|geq|lt|gt|ne|neq|to|equiv)(?![A-Za-z]))"
                           r"|\\(?!(?:text|mbox|textrm|textbf|quad|qquad|end|right|tag|label|hfill|hspace|newline|nonumber)(?![A-Za-z]))"
                           r"[A-Za-z]")
# Digits and a bullet-like "-", "+", "*" count only right next to the box ("2\boxed{35}", "-\boxed{984}"), so
# prose such as "1 + 1 = 2 \boxed{2}" or a list item "- \boxed{3}" is not an expression.
_BEFORE_BOX_RE = re.compile(r"(?:[-+*0-9]|(?:[/^_<>|≈≠≤≥±{]|\\(?:cdot|times|div|pm|mp|approx|sim|frac|sqrt|dfrac|tfrac|"
                            r"le|ge|leq|geq|lt|gt|ne|neq|cancel|not)(?![A-Za-z]))[ \t]{0,16})\Z")


def boxes_embedded(text: str) -> bool:
    """Whether the final box(es) are an operand of a larger expression (then the box is not the answer)."""
    group = _final_box_group(text)
    if not group:
        return False
    start, end = group[0][0], group[-1][2]
    return bool(_AFTER_BOX_RE.match(text, end) or _BEFORE_BOX_RE.search(text[max(0, start - 24):start]))


def last_answer_line(text: str) -> str | None:
    """Value of the last ``Answer: <value>`` line (case-insensitive) with a non-empty value, or ``None``."""
    value = None
    for match in ANSWER_LINE_RE.finditer(text):
        if match.group(1).strip():
            value = match.group(1)
    return value


def normalise_answer(answer: str) -> str:
    """Strip decoration around an extracted answer: whitespace, ``**bold**``, ``$...$``, ``\\(...\\)``,
    ``\\[...\\]`` and a trailing ``.``/``,``/``;`` (a bounded number of passes: linear time)."""
    s = answer.strip()
    for _ in range(8):
        previous = s
        if s.startswith("**"):
            s = s[2:]
        if s.endswith("**"):
            s = s[:-2]
        s = s.strip().strip("$").strip()
        for left, right in (("\\(", "\\)"), ("\\[", "\\]")):
            if s.startswith(left) and s.endswith(right) and len(s) >= 4:
                s = s[2:-2].strip()
        s = s.rstrip(".,;").strip()
        if s == previous:
            break
    return s


def extract_math_answer(final_text: str) -> tuple[str | None, str]:
    """Pick the ONE final answer from the final-answer text (see README "Math"):

    1. the boxes of the final answer (:func:`final_boxes`): one box gives its content, several boxes joined by
       connective text give their contents joined as a list ``"3, 5"`` (``how == "boxed_list"``);
    2. else the value of the last ``Answer:`` line.

    A final box that is an operand of a larger expression (``\\boxed{70}+1``, ``2\\boxed{35}``) gives
    ``how == "boxed_embedded"``: the stated answer is the expression, not the box, and is scored wrong.
    Returns ``(answer, how)`` with ``how`` in ``{"boxed", "boxed_list", "boxed_embedded", "answer_line", "none"}``.
    """
    contents = [normalise_answer(c) for c in final_boxes(final_text)]
    contents = [c for c in contents if c]
    if contents and boxes_embedded(final_text):
        return ", ".join(contents), "boxed_embedded"
    if len(contents) == 1:
        return contents[0], "boxed"
    if contents:
        return ", ".join(contents), "boxed_list"
    line = last_answer_line(final_text)
    if line is not None:
        # "Answer: \boxed{70}" was handled above; "Answer: $70$." is normalised here.
        value = normalise_answer(line)
        if value:
            return value, "answer_line"
    return None, "none"


# --- fallback for evaluation sets: a STATED final answer ("The final answer is $70$.") ------------------------
_ANSWER_WORD_RE = re.compile(r"(?i)(?<![A-Za-z])answer(?![A-Za-z])")
# Words that may open the sentence before "answer": "So the final answer is", "Therefore, my answer:".
_STATEMENT_PREFIX_WORDS = frozenset({"so", "thus", "therefore", "hence", "finally", "overall", "in", "conclusion",
                                     "summary", "the", "my", "our", "final", "correct", "and"})
_STATEMENT_VERB_RE = re.compile(r"(?i)(?:\*\*)? ?(?:is|=|:)(?![A-Za-z]) ?:? ?(?:\*\*)? ?")
_SENTENCE_END_RE = re.compile(r"[.!?](?=\s|$)")
MAX_STATEMENT_VALUE_CHARS = 200


def _statement_value(text: str, match: re.Match) -> str | None:
    prefix = text[max(0, match.start() - 60):match.start()]
    cut = max(prefix.rfind(c) for c in ".!?:\n")
    if cut < 0 and match.start() > 60:
        return None  # no sentence start within reach: "answer" is in the middle of a long sentence
    opening = prefix[cut + 1:]
    if re.sub(r"[A-Za-z\s*#,]", "", opening):
        return None
    if any(w.lower() not in _STATEMENT_PREFIX_WORDS for w in re.findall(r"[A-Za-z]+", opening)):
        return None  # "If the answer were ...", "Suppose the answer is ..."
    rest = text[match.end():match.end() + 1000]
    verb = _STATEMENT_VERB_RE.match(rest.replace("\t", " "))
    if verb is None or not verb.group().strip():
        return None
    rest = rest[verb.end():]
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if rest.startswith(left):
            close = rest.find(right, len(left))
            if close < 0:
                return None  # truncated inside the math
            value = rest[len(left):close]
            after = rest[close + len(right):].lstrip(" \t*")
            if after and after[0] not in ".!\n":
                return None  # "the answer is $70$ if ..." -- not a plain statement
            return value.strip() or None
    line = rest.split("\n", 1)[0]
    end = _SENTENCE_END_RE.search(line)
    value = (line[:end.start()] if end else line).strip().strip("*").strip()
    if not value or len(value) > MAX_STATEMENT_VALUE_CHARS:
        return None
    return value


def stated_final_answer(final_text: str) -> str | None:
    """The value of the last sentence STATING the final answer in the last ``FALLBACK_TAIL_CHARS`` characters
    (``The final answer is $70$.``, ``So the answer is 70.``), or ``None``.

    Only a sentence that opens with (so/thus/therefore/the/final/...) ``answer`` followed by ``is``, ``:`` or
    ``=`` counts, and a math-delimited value must be followed by the end of the sentence. A bare mention
    (``If the answer were $70$ then we would need``) or a response cut off inside the value is no answer.
    """
    tail = final_text[-FALLBACK_TAIL_CHARS:]
    matches = list(_ANSWER_WORD_RE.finditer(tail))
    for match in reversed(matches[-64:]):
        value = _statement_value(tail, match)
        if value is not None:
            return normalise_answer(value) or None
    return None


# --- the rule: the one final answer must BE the value, not contain it -----------------------------------------
# Relations, approximations and hedges. A prediction containing one of these (and the gold does not) is wrong:
# "70 \approx 71", "a = b \approx c", "70 < 71", "G \pm 1", "x \to G".
RELATION_COMMANDS = frozenset({
    "approx", "thickapprox", "approxeq", "sim", "simeq", "backsim", "eqsim", "thicksim", "cong", "doteq",
    "doteqdot", "propto", "lt", "gt", "le", "leq", "leqq", "leqslant", "ge", "geq", "geqq", "geqslant", "ne",
    "neq", "ll", "gg", "lll", "ggg", "lesssim", "gtrsim", "lessapprox", "gtrapprox", "nless", "ngtr", "nleq",
    "ngeq", "prec", "succ", "preceq", "succeq", "to", "rightarrow", "Rightarrow", "longrightarrow",
    "Longrightarrow", "leftarrow", "Leftarrow", "implies", "impliedby", "iff", "leftrightarrow", "Leftrightarrow",
    "mapsto", "equiv", "pm", "mp", "vee", "lor", "wedge", "land", "lnot", "neg", "not", "cancel", "bcancel",
    "xcancel", "sout", "st", "xrightarrow", "gtrless", "lessgtr", "asymp", "bumpeq", "risingdotseq",
    "fallingdotseq", "triangleq", "stackrel", "overset", "underset", "overbrace", "underbrace", "phantom",
    "hphantom", "vphantom", "color", "textcolor", "tag", "pmod", "bmod", "mod", "pod"})
RELATION_CHARS = frozenset("<>≈≠≤≥∼≃≅≡≪≫∝⩽⩾≲≳±∓→⇒⇔↔←⟹⟸⟺≒≐")  # not "~": a LaTeX space
_COMMAND_RE = re.compile(r"\\([A-Za-z]+)")
_HEDGE_RE = re.compile(r"(?i)(?<![A-Za-z])(?:approx[a-z]*|about|around|roughly|nearly|almost|circa|ca|estimat[a-z]*|"
                       r"maybe|perhaps|possibly|probably|likely|either|guess|close|not|wrong|incorrect|actually|"
                       r"instead|rather|except|unless|if|otherwise)(?![A-Za-z])")
_TEXT_GROUP_RE = re.compile(r"\\(?:text[a-z]*|mbox|mathrm|operatorname|mathit|mathbf)\s*\{([^{}]*)\}")
_LIST_WORD_RE = re.compile(r"\\(?:text|mbox|textrm)\{\s*(?:and|or)\s*\}|(?<![A-Za-z])(?:and|or)(?![A-Za-z])")
_LHS_RE = re.compile(rf"\s*(?:(?:{_NAME}\s*){{1,4}}(?:\(\s*{_NAME}\s*\))?|\(\s*{_NAME}(?:\s*,\s*{_NAME})*\s*\))\s*")
_PERCENT_RE = re.compile(r"\s*\\?%\s*$")


def split_top_level(expr: str, separators: str = ",;") -> list[str]:
    """Split ``expr`` at separators outside any bracket (``()[]{}`` counted alike, so ``[1,3)`` stays whole)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch in separators and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    parts.append(expr[start:])
    return parts


def _relation_tokens(expr: str) -> set[str]:
    tokens = {"\\" + c for c in _COMMAND_RE.findall(expr) if c in RELATION_COMMANDS}
    tokens.update(ch for ch in expr if ch in RELATION_CHARS)
    tokens.update(w.lower() for w in _HEDGE_RE.findall(expr))
    return tokens


def _max_equals(expr: str) -> int:
    return max(part.count("=") for part in split_top_level(_LIST_WORD_RE.sub(",", expr)))


def answer_problem(answer: str, gold: str) -> str | None:
    """Why ``answer`` cannot be accepted as a whole final answer (``None`` if it can be verified).

    The answer must BE one value (or the list of values): anything that only CONTAINS a value is rejected
    before math-verify sees it, because math-verify would pick the value out of it:
    relations and approximations (``70 \\approx 71``, ``70 < 71``, ``G \\pm 1``, ``x \\to G``), hedging words
    (``approximately``, ``or not``), numbers hidden in ``\\text{}``, struck-out or coloured parts, and chained
    or reversed equations (``x = G+1 = G``, ``G+1 = G``). The single leniency is ``name = value`` per list item
    (``x = 70``, ``x_1 = 3, x_2 = 5``, ``(a, b) = (1, 2)``). A token the gold itself uses is allowed
    (a gold ``x \\le 3`` permits ``\\le``).
    """
    if len(answer) > MAX_ANSWER_CHARS:
        return f"answer longer than {MAX_ANSWER_CHARS} characters"
    extra = _relation_tokens(answer) - _relation_tokens(gold)
    if extra:
        return "relation, approximation or hedge in the answer: " + " ".join(sorted(extra))
    gold_texts = "".join(_TEXT_GROUP_RE.findall(gold))
    texts = "".join(_TEXT_GROUP_RE.findall(answer))
    if any(ch.isdigit() for ch in texts) and not any(ch.isdigit() for ch in gold_texts) \
            and _TEXT_GROUP_RE.sub("", answer).strip():
        return "number inside \\text{} next to other math"
    if answer.count("\\boxed") + answer.count("\\fbox"):
        inner = answer.replace("\\boxed", "").replace("\\fbox", "")
        return answer_problem(inner, gold)
    gold_equals = _max_equals(gold)
    for item in split_top_level(_LIST_WORD_RE.sub(",", answer)):
        equals = item.count("=")
        if equals > max(1, gold_equals):
            return "chained equation"
        if equals == 1 and gold_equals == 0:
            lhs = item.split("=", 1)[0]
            if not _LHS_RE.fullmatch(lhs):
                return "equation whose left side is not a variable"
    return None


def answer_for_parsing(answer: str) -> str:
    """The string math-verify parses (wrapped in ``\\boxed{}``): nested box commands removed (their braces
    stay), grouping braces around the whole answer removed, a trailing percent sign dropped (``70\\%`` ≡ 70, a
    documented leniency)."""
    s = answer.replace("\\boxed", "").replace("\\fbox", "").strip()
    for _ in range(4):  # redundant grouping braces around the whole answer: {(1, 2)}
        if not (s.startswith("{") and s.endswith("}")) or not _outer_braces_match(s):
            break
        s = s[1:-1].strip()
    return _PERCENT_RE.sub("", s) or s


def _outer_braces_match(s: str) -> bool:
    depth = 0
    for i, ch in enumerate(s):
        if ch == "{" and (i == 0 or s[i - 1] != "\\"):
            depth += 1
        elif ch == "}" and s[i - 1] != "\\":
            depth -= 1
            if depth == 0:
                return i == len(s) - 1
    return False


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
