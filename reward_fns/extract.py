"""Pure text functions that pull the final answer (math) or the program (code) out of a model response.

Nothing here runs math-verify or model code; everything is a small deterministic string function so it can be
called anywhere and unit-tested directly. The math functions are linear-time in the length of the text (one
left-to-right scan for braces; no regular expression with overlapping quantifiers), and the math worker runs
them under the same wall-clock deadline as math-verify. This module imports only the standard library so that
``_math_worker.py`` can load it by path; the one comparison by value it needs (RULE "restatement after the box")
is a function the worker passes in (:data:`SameValue`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
BOXED_COMMANDS = ("\\boxed", "\\fbox")
# "answer" + optional whitespace/bold + ":"; the value is the rest of the line. No two adjacent quantifiers can
# match the same character, so a long whitespace run costs linear time (the old pattern backtracked
# quadratically: "answer" + 1 MB of spaces took about a minute).
ANSWER_LINE_RE = re.compile(r"(?i)answer\s*(?:\*\*[^\S\n]*)?[:：]([^\n]*)")  # ASCII or full-width colon
# How much of the final answer text the fallback (stated final answer) extraction may look at.
FALLBACK_TAIL_CHARS = 2000
# Longer extracted answers are not answers (a real final answer is a short expression); scored wrong_answer.
MAX_ANSWER_CHARS = 2000
# Boxes of one multi-valued final answer may be separated only by this much connective text.
MAX_BOX_GAP_CHARS = 80
# ``same_value(restated, box)``: whether a value restated after the final box is the box's value, compared by value
# (the math worker passes math-verify's comparison, the box as the gold); ``None`` compares the text only.
SameValue = Callable[[str, str], bool] | None


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


# --- what the reader sees: ONE normalisation of the response text before any math extraction (README "Reading
# the text") --------------------------------------------------------------------------------------------------
# Invisible characters, removed: soft hyphen, combining grapheme joiner, Arabic letter mark, Mongolian vowel
# separator, zero-width space/non-joiner/joiner, left-to-right/right-to-left marks and embeddings/overrides/isolates,
# word joiner, invisible function application/times/separator/plus, byte-order mark (zero-width no-break space),
# variation selectors, Hangul fillers, Khmer inherent vowels, and every other control character but tab, line feed
# and carriage return.
INVISIBLE_CHARS = ("\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b\u200c\u200d\u200e\u200f"
                   "\u202a\u202b\u202c\u202d\u202e\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069"
                   "\u3164\ufeff\uffa0" + "".join(chr(c) for c in range(0xfe00, 0xfe10)))
_INVISIBLE_RE = re.compile("[" + INVISIBLE_CHARS + "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# Terminal escape sequences (ANSI colour codes such as ESC[31m, OSC titles): the reader sees none of it.
_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
# Characters NFKC would misread, left for RULE "Unicode math": vulgar fractions (NFKC: 2½ -> "21⁄2") and
# super/subscripts (NFKC: x² -> "x2").
_NFKC_KEPT = "½⅓⅔¼¾⅕⅖⅗⅘⅙⅚⅛⅜⅝⅞⅐⅑⅒⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺₀₁₂₃₄₅₆₇₈₉₊₋"
_NFKC_KEPT_RE = re.compile("([" + _NFKC_KEPT + "]+)")
_NON_ASCII_DIGIT_RE = re.compile(r"(?![0-9])\d")  # every other Unicode decimal digit (category Nd)


def reader_text(text: str) -> str:
    """What a reader sees, as plain text (README "Reading the text"; applied once to a math response before
    extraction): terminal escape sequences and :data:`INVISIBLE_CHARS` removed, HTML comments removed (an
    unclosed ``<!--`` hides the rest, as a browser does), Unicode NFKC (full-width letters and digits, math
    bold/double-struck digits, the full-width minus, every space such as the figure, thin, narrow no-break and
    no-break space -> ASCII) except the characters RULE "Unicode math" reads, then every decimal digit of any
    script (Arabic-Indic, Devanagari, ...) -> its ASCII digit. Each step is one pass: linear time."""
    if "\x1b" in text:
        text = _ANSI_RE.sub("", text)
    text = _without_html_comments(text)
    if text.isascii():
        return _INVISIBLE_RE.sub("", text)
    text = _INVISIBLE_RE.sub("", text)
    text = "".join(part if i % 2 else unicodedata.normalize("NFKC", part)
                   for i, part in enumerate(_NFKC_KEPT_RE.split(text)))
    return _NON_ASCII_DIGIT_RE.sub(lambda m: str(unicodedata.decimal(m.group(), 0)), text)


def _without_html_comments(text: str) -> str:
    """``text`` without ``<!-- ... -->`` (linear: each comment's end is searched once, from its start)."""
    start = text.find("<!--")
    if start < 0:
        return text
    parts, pos = [], 0
    while start >= 0:
        parts.append(text[pos:start])
        close = text.find("-->", start + 4)
        if close < 0:
            return "".join(parts)
        pos = close + 3
        start = text.find("<!--", pos)
    parts.append(text[pos:])
    return "".join(parts)


# One token per match: a box opening, an escaped character (skipped, so \{ and \} never count), or a brace.
_BOX_TOKEN_RE = re.compile(r"\\(?:boxed|fbox)[ \t]*\{|\\.|[{}]", re.DOTALL)  # "\boxed {x}" is legal LaTeX
# Connective text allowed between the boxes of one multi-valued answer: math delimiters, spaces, commas,
# "and"/"or", and an assignment such as "x =" or "x_2 =" ("$x=\boxed{3}$ and $x=\boxed{5}$").
_NAME = r"(?:[A-Za-z]|\\(?:alpha|beta|gamma|delta|epsilon|varepsilon|zeta|eta|theta|vartheta|iota|kappa|lambda|mu|nu|xi|" \
        r"pi|rho|sigma|tau|upsilon|phi|varphi|chi|psi|omega|Gamma|Delta|Theta|Lambda|Xi|Pi|Sigma|Phi|Psi|Omega)" \
        r"(?![A-Za-z]))(?:_(?:\{[A-Za-z0-9, ]{1,8}\}|[A-Za-z0-9]))?'*"
_GAP_RE = re.compile(r"(?:\s|\$|\\[\[\]()]|\\\\|[,;&]|\\q?quad(?![A-Za-z])|\\[,;:! ]|\*|[{}]|~"
                     r"|\\(?:textbf|textit|mathbf|boldsymbol|bm|underline|emph)\s*\{"  # decoration around boxes
                     r"|\\(?:Rightarrow|implies|Longrightarrow|longrightarrow|to)(?![A-Za-z])|[→⇒⟹]|=>|->"
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
# Decoration that may follow the final box without making it an operand (RULE "box decorations", README): a
# degree sign, an end-of-proof mark, closing braces/bold/math delimiters, LaTeX spaces, a unit in \text{} or
# \mathrm{} (letters only: "\text{ (or 71)}" is not a unit).
_AFTER_DECORATION_RE = re.compile(
    r"(?:[ \t]{0,8}(?:\\[,;:! ]|~|\*\*|\}|\^\s*\{?\s*\\circ\s*\}?|°"
    r"|\\(?:circ|degree|qed|blacksquare|square|Box|qedsymbol|hfill|quad|qquad)(?![A-Za-z])"
    r"|\\(?:text|textrm|mathrm|mbox|textit|mathit|textnormal)\s*\{[ A-Za-z./]{0,40}\}"
    r"(?:[ \t]{0,4}(?:/|\\cdot)[ \t]{0,4}\\(?:text|textrm|mathrm|mbox)\s*\{[ A-Za-z]{1,20}\})*"  # \mathrm{km}/\mathrm{h}
    r"(?:\^\s*\{?\s*-?[123]\s*\}?)?))*")
# Digits and a bullet-like "-", "+", "*" count only right next to the box ("2\boxed{35}", "-\boxed{984}"), so
# prose such as "1 + 1 = 2 \boxed{2}" or a list item "- \boxed{3}" is not an expression. A brace counts only as
# an argument ("\frac{1}{\boxed{2}}", "^{\boxed{2}}"); "\textbf{\boxed{70}}" and "{\boxed{70}}" are decoration,
# and so are an arrow ("\Rightarrow", "=>", "->"), bold "**" and HTML tags (removed before extraction).
_BEFORE_BOX_RE = re.compile(r"(?:(?<![-=*])[-+0-9]|(?<!\*)\*(?!\*)|(?:[}^_]|\\(?:frac|dfrac|tfrac|cfrac|sqrt|binom)"
                            r"(?:\[[^\]]{0,8}\])?)\{[ \t]{0,16}"
                            r"|(?:[/^_<|≈≠≤≥±]|(?<![-=])>|\\(?:cdot|times|div|pm|mp|approx|sim|frac|sqrt|dfrac|tfrac|"
                            r"le|ge|leq|geq|lt|gt|ne|neq|cancel|not)(?![A-Za-z]))[ \t]{0,16})\Z")
# HTML emphasis around an answer ("<b>\boxed{70}</b>"); never <sup>/<sub>, which carry math.
_HTML_TAG_RE = re.compile(r"</?(?:b|strong|i|em|u|span|div|p|mark|center|code|br|font|big|small)\b[^<>\n]{0,80}>",
                          re.IGNORECASE)


# RULE "markup beside the box": a tag is markup, not a relation: the answer tags RL recipes prompt for
# (``<answer>\boxed{70}</answer>``), a reasoning-section tag (``</REASONING_END>``), any tag named by two or more
# characters (never ``<sup>``/``<sub>``, which carry math); removed. A chat-template token a model leaks
# (``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``, ``<|eot_id|>``, DeepSeek's ``<|end▁of▁sentence|>``) marks a
# turn boundary: read as a line break, so what follows it is the next line (RULE "next line").
_MARKUP_TAG_RE = re.compile(r"</?(?!su[bp]>)[A-Za-z_][A-Za-z_-]{1,40}/?>")  # no attributes, no digits: "<x71>"
_CHAT_TOKEN_RE = re.compile(r"<\|[\w.▁-]{1,40}\|>")


def _markup_tag(match: re.Match) -> str:
    """A tag removed as markup, unless its name is a hedge or a number (``<or>``, ``<seventy>`` are kept)."""
    name = match.group()
    return name if _TAIL_HEDGE_RE.search(name) or _NUMBER_WORD_RE.search(name) else ""


# RULE "modulus after the box": ``\equiv \boxed{9} \pmod{11}`` -- the qualifier of a congruence, right after the box
_MODULUS_AFTER_BOX_RE = re.compile(r"[ \t]*(?:\\[,;! ]|~)*[ \t]*(\\pmod\s*(?:\{\s*\w+\s*\}|\w+)"
                                   r"|\\(?:bmod|mod)\s*(?:\{\s*\w+\s*\}|\w+)"
                                   r"|\\?\(\s*(?:\\bmod|\\mod|\\text\s*\{\s*mod\s*\}|\\mathrm\s*\{\s*mod\s*\}|mod)"
                                   r"\s*(?:\\[,;! ]|~)*\s*\w+\s*\\?\))")
_EQUIV_BEFORE_BOX_RE = re.compile(r"(?:\\equiv|≡)[ \t]*(?:\\[,;! ]|~)*[ \t]*\Z")


# RULE "percent": a percent mark right after a single final box is part of its value (``$\boxed{28}\%$``,
# ``$\boxed{28}$ percent``): MATH solutions box the number and write the mark after it
_PERCENT_AFTER_BOX_RE = re.compile(r"[ \t]*\$?[ \t]*(?:\\%|%|\\text\s*\{\s*(?:\\?%|percent)\s*\}|percent(?![A-Za-z]))")


def box_percent_end(text: str) -> int | None:
    """Where a percent mark written right after the single final box ends (RULE "percent"), else ``None``."""
    group = _final_box_group(text)
    match = _PERCENT_AFTER_BOX_RE.match(text, group[0][2]) if len(group) == 1 else None
    return match.end() if match else None


def box_modulus(text: str) -> tuple[str, str, int] | None:
    """RULE "modulus after the box": ``(prefix, qualifier, end)`` of a modulus written right after the final box
    (``\\pmod{11}``, ``\\pmod 11``, ``\\bmod 11``, ``(\\mathrm{mod}\\ 11)``), the qualifier prefixed by ``\\equiv`` when
    one stands right before the box (``x \\equiv \\boxed{9} \\pmod{11}`` reads ``\\equiv 9 \\pmod{11}``, a congruence
    that RULE "congruence" reads as 9); ``None`` when no modulus follows a single final box."""
    group = _final_box_group(text)
    if len(group) != 1:
        return None
    match = _MODULUS_AFTER_BOX_RE.match(text, group[0][2])
    if match is None:
        return None
    equiv = _EQUIV_BEFORE_BOX_RE.search(text, max(0, group[0][0] - 16), group[0][0])
    return ("\\equiv " if equiv else ""), match.group(1).strip(), match.end()


def boxes_embedded(text: str, same_value: SameValue = None) -> bool:
    """Whether the final box(es) are an operand of a larger expression, hedged on their line, or followed by a
    statement of another answer (then the box is not the answer): ``\\boxed{70}+1``, ``2\\boxed{35}``,
    ``$\\boxed{70}$ (or 71)``, ``\\boxed{70} OR 71``, ``\\boxed{70}`` and a later line ``The answer is 71.``"""
    group = _final_box_group(text)
    if not group:
        return False
    start, end = group[0][0], group[-1][2]
    modulus = box_modulus(text)
    end = modulus[2] if modulus else (box_percent_end(text) or end)
    value = ", ".join(text[content_start:box_end - 1] for _s, content_start, box_end in group)
    if line_after_box_hedged(text, end, value, same_value) \
            or later_statement_differs(text, _box_line_end(text, end), value, same_value):
        return True
    after = _AFTER_DECORATION_RE.match(text, end).end()
    return bool(_AFTER_BOX_RE.match(text, after) or _BEFORE_BOX_RE.search(text[max(0, start - 24):start]))


# RULE "hedge after the box" (README): what follows the final box on its line -- past the closing math delimiters
# ``$``, ``$$``, ``\)``, ``\]``, ``\end{...}`` (the last three also when they open the next line) -- may hold
# decoration, punctuation and explanatory words, but no second value and no hedge.
_BOX_OPEN_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_CLOSER_ON_NEXT_LINE_RE = re.compile(r"[ \t$*}]*\n[ \t]*(?:\\\]|\\\)|\\end\s*\{)")
_TAIL_UNIT_EXPONENT_RE = re.compile(r"(?<=[A-Za-z}])\^\s*\{?\s*-?[123]\s*\}?|\[\^[^\]\s]{1,8}\]")
_LATEX_COMMAND_NAME_RE = re.compile(r"\\[A-Za-z]+|\\.")
# Hedge words after a box, answer value or unit, any case (README "hedges after the answer"): a second value
# ("or", "alternatively", "also"), doubt ("maybe", "wait", "no", "not sure"), an approximation, a retraction
# ("actually", "wrong", "sorry", "scratch that"), a value-changing word; in English and in a named list of other
# languages (German, French, Spanish, Italian, Portuguese, Russian, Chinese, Japanese).
_TAIL_HEDGE_RE = re.compile(
    r"(?i)(?<![^\W\d_])(?:or|nor|alternatively|also|else|otherwise|maybe|perhaps|possibly|probably|likely|no|nope|not|"
    r"wait|hmm+|sorry|oops|correction|actually|instead|rather|unless|except|either|approx[a-z.]*|about|around|"
    r"roughly|nearly|almost|circa|ca|estimat[a-z]*|guess[a-z]*|unsure|uncertain|doubt[a-z]*|wrong|incorrect|"
    r"mistake[a-z]*|retract[a-z]*|scratch|round(?:ed|ing)?|nearest|truncat[a-z]*|plus|minus|if|least|most|more|"
    r"less|"
    r"oder|vielleicht|ungef[aä]hr|etwa|ou|peut-[eê]tre|environ|quiz[aá]s?|aproximadamente|forse|circa|"
    r"talvez|или|примерно|может|около)(?![^\W\d_])|或|还是|還是|可能|大约|大概|约|左右|または|くらい|ぐらい|約")
# Spelled-out numbers are numbers: "(seventy-one also works)", "\text{ or seventy-one}".
_NUMBER_WORD_RE = re.compile(
    r"(?i)(?<![A-Za-z])(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|"
    r"fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|"
    r"thousand|million|billion|trillion|dozen|half|twice|double|triple)(?![A-Za-z])")

# Words that change the value they follow ("70 thousand", "2 pi", "3 squared", "5 factorial"). "percent", "per"
# and "by" are not among them here: ``70\%`` ≡ 70 is a documented leniency, ``per`` joins compound units and
# "\boxed{70} by symmetry" explains.
_VALUE_WORDS = frozenset({"hundred", "hundreds", "thousand", "thousands", "million", "millions", "billion",
                          "billions", "trillion", "dozen", "dozens", "squared", "cubed", "half", "halves", "third",
                          "thirds", "quarter", "quarters", "tenth", "tenths", "hundredths", "thousandths", "pi",
                          "sqrt", "root", "roots", "log", "ln", "sin", "cos", "tan", "factorial", "infinity", "inf",
                          "power", "divided", "mod", "modulo", "remainder", "halved", "doubled", "tripled"})
# Magnitude suffixes and vagueness written after a number ("70k", "70 bn", "70 lakh", "70ish", "70-ish"): read
# as a unit they would make 70000 or "about 70" score as 70.
_MAGNITUDE_RE = re.compile(r"(?<![A-Za-z])(?:k|M|B|bn|mn|mln|bln|lakhs?|crores?)(?![A-Za-z])"
                           r"|(?<![A-Za-z])-?ish(?![A-Za-z])")


def value_changing_text(text: str) -> bool:
    """Whether ``text`` written beside an answer (a ``\\text{}`` group in it, or the first word after its box)
    changes the value it stands by: a value word (:data:`_VALUE_WORDS`), a magnitude suffix or ``-ish``
    (:data:`_MAGNITUDE_RE`), a ``?`` or a ``+`` (``70\\text{+}``: 70 or more), or a bracket that opens or
    closes outside it (``70 \\text{ (} 71 \\text{)}``: the bracket encloses a second value)."""
    words = {w.lower() for w in re.findall(r"[A-Za-z]+", text)}
    brackets = sum(text.count(c) for c in "([") - sum(text.count(c) for c in ")]")
    return bool(words & _VALUE_WORDS or _MAGNITUDE_RE.search(text) or re.search(r"[?+]", text) or brackets
                or re.match(r"[^(\[]*[)\]]", text))


def line_after_box_hedged(text: str, end: int, value: str | None = None, same_value: SameValue = None) -> bool:
    """RULE "hedge after the box": whether the rest of the box's line (from ``end``) holds a second value or a
    hedge. In the box's own sentence: a digit or spelled-out number (``(or 71)``, ``[or 71]``, ``— 71``,
    ``\\quad\\text{or}\\quad 71``), a hedge word in any case (``OR``, ``(maybe)``, ``(approximately)``,
    ``— wait, no``), a relation, or a question mark. Allowed: decoration and a unit (``^\\circ``,
    ``\\text{ cm}^2``, a footnote mark), punctuation, explanatory words (``(in dollars)``, ``is the final
    answer.``). A later sentence on the line is judged by :func:`_later_sentence_hedged` against the box's
    ``value``. The next line is outside the answer (RULE "next line"), unless it opens with a closing
    ``\\]``/``\\)``/``\\end{}`` of the box's math, or states an answer (:func:`later_statement_differs`). One pass
    over the line: linear."""
    tail = text[end:_box_line_end(text, end)]
    cut = _BOX_OPEN_RE.search(tail)  # a later box is unbalanced (truncated): skipped, as in the extraction
    tail = tail[:cut.start()] if cut else tail
    first_end = _SENTENCE_STOP_RE.search(tail)
    first, later = (tail[:first_end.end()], tail[first_end.end():]) if first_end else (tail, "")
    if value is not None and later.strip():
        if any(_later_sentence_hedged(sentence, value, same_value) for sentence in _SENTENCE_STOP_RE.split(later)):
            return True
        tail = first
    if not tail.strip(" \t$.,;:!*}"):
        return False
    tail = _TAIL_UNIT_EXPONENT_RE.sub(" ", tail)
    plain = _LATEX_COMMAND_NAME_RE.sub(" ", tail)
    first_word = re.match(r"[^A-Za-z]*?(-?[A-Za-z]+)", plain)  # "\boxed{70} squared", "\boxed{70}\text{k}"
    return bool(re.search(r"[0-9?]", plain) or _NUMBER_WORD_RE.search(plain) or _TAIL_HEDGE_RE.search(plain)
                or (first_word and value_changing_text(first_word.group(1)))
                or _relation_tokens(tail) - {"\\to", "\\Rightarrow", "\\implies"})


def _box_line_end(text: str, end: int) -> int:
    """Where the final box's line ends (``end``: where the box ends): at the next line break, or at the end of the
    line after it when that line opens with the closing ``\\]``/``\\)``/``\\end{}`` of the box's display math."""
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    closer = _CLOSER_ON_NEXT_LINE_RE.match(text, end)
    if closer and closer.end() > line_end:
        nxt = text.find("\n", closer.end())
        line_end = len(text) if nxt < 0 else nxt
    return line_end


# A sentence ends at a full stop (before any closing ``$``) or at the close of display math (``$$``, ``\]``),
# followed by a space or the end: ``3.5`` is a number, not two sentences.
_SENTENCE_STOP_RE = re.compile(r"(?:\.\$*|\$\$|\\\])(?=\s|$)")
# RULE "restatement after the box": a later sentence that points back at the working: it opens with a note
# ("Note that", "Recall", "Here") and names the working ("in the above calculation", "we have used", "follows from")
_WORKING_OPENER_RE = re.compile(r"(?i)^[\s$*]*(?:note|notice|recall|here|verification|explanation)(?![A-Za-z])")
_WORKING_PHRASE_RE = re.compile(r"(?i)(?<![A-Za-z])(?:in\s+the\s+above|above\s+(?:calculation|computation)|"
                                r"we\s+(?:have\s+)?used|follows\s+from)(?![A-Za-z])")
# ... claims no answer in it ("Note that the answer is 71", "Note that 71 works too")
_CLAIM_WORD_RE = re.compile(r"(?i)(?<![A-Za-z])(?:answers?|results?|solutions?|final|correct|right|true|valid|"
                            r"works?|too|another|alternative|should|would|could|might|must|equals?)(?![A-Za-z])")
_INLINE_MATH_RE = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]")
# A bare value in prose: a number and all that is written against it without a space (``14,400``, ``1/2``, ``2x``,
# ``2x^2``, ``-70``, ``204_5``); final punctuation and an unmatched closing bracket are not part of it
# (:func:`_bare_values`), nor is a word's exponent a value of its own (``cm^2``, ``m^{2}``)
_BARE_VALUE_RE = re.compile(r"(?<![\w.\\^])(?<!\^\{)-?\d[^\s$]*")
_CLOSING_BRACKETS = {")": "(", "]": "[", "}": "{"}


def _bare_values(text: str) -> list[str]:
    """The bare values (:data:`_BARE_VALUE_RE`) of prose: ``That is 1/2.`` → ``["1/2"]``, ``So 2x apples
    (14,400 ways).`` → ``["2x", "14,400"]``."""
    values = []
    for match in _BARE_VALUE_RE.finditer(text):
        value = match.group().rstrip(".,;:!?")
        while value and value[-1] in _CLOSING_BRACKETS \
                and value.count(value[-1]) > value.count(_CLOSING_BRACKETS[value[-1]]):
            value = value[:-1].rstrip(".,;:!?")
        values.append(value)
    return values


def _restates(restated: str, box: str, same_value: SameValue = None) -> bool:
    """RULE "restatement after the box": whether ``restated`` is the box's value -- the same text as
    :func:`_restated_key` compares it (either side may drop the box's percent, degree or unit:
    :func:`_numeric_core`), else the same value by ``same_value`` (math-verify in the worker: ``1/2`` restates
    ``\\frac12``, ``2x`` restates ``2 x``; ``x^2+2`` does not restate ``x^2+1``)."""
    keys = {_restated_key(box), _restated_key(_numeric_core(box))}
    if _restated_key(restated) in keys or _restated_key(_numeric_core(restated)) in keys:
        return True
    return same_value is not None and same_value(restated, box)


def _later_sentence_hedged(sentence: str, value: str, same_value: SameValue = None) -> bool:
    """RULE "restatement after the box": a later sentence on the box's line refuses the box when it holds a
    hedge word, a ``?`` or a relation; a restatement of the box's value with a word that changes it (``So 2 pi.``);
    or a value other than the box's -- unless it is a note on the working (:data:`_WORKING_OPENER_RE` and
    :data:`_WORKING_PHRASE_RE`) that claims no answer (:data:`_CLAIM_WORD_RE`). So the MATH/Minerva
    ``Final Answer: The final answer is 14400. I hope it is correct.`` and ``So 70 apples.`` restate the box,
    ``Note that in the above calculation we have used that $13_5$ divided by $2_5$ is $4_5$`` is the solution,
    and ``So 71 apples.``, ``Note that 71 is it.`` are second values. Values are compared by :func:`_restates`."""
    values = [next(g for g in m.groups() if g is not None) for m in _INLINE_MATH_RE.finditer(sentence)]
    values += _bare_values(_FOOTNOTE_RE.sub(" ", _INLINE_MATH_RE.sub(" ", sentence)))
    sentence = _TAIL_UNIT_EXPONENT_RE.sub(" ", sentence)  # a unit's exponent (\text{ cm}^2) is no hedge
    plain = _LATEX_COMMAND_NAME_RE.sub(" ", sentence)
    if "?" in sentence or _TAIL_HEDGE_RE.search(plain) or _NUMBER_WORD_RE.search(plain) \
            or _relation_tokens(sentence) - {"\\to", "\\Rightarrow", "\\implies"}:
        return True
    # the values of a list restate a box of several values together (``The answer is 3 and 5.``)
    if all(_restates(v, value, same_value) for v in values) \
            or (len(values) > 1 and "," in value and _restates(", ".join(values), value, same_value)):
        return any(value_changing_text(word) for word in re.findall(r"[A-Za-z]+", plain))  # "So 2 pi."
    return not (_WORKING_OPENER_RE.match(sentence) and _WORKING_PHRASE_RE.search(sentence)
                and not _CLAIM_WORD_RE.search(plain))


def _restated_key(text: str) -> str:
    """``text`` as compared for a restatement: no spaces, LaTeX spaces, ``$``, ``\\left``/``\\right``, a leading
    ``name =``, thousands separators, final punctuation; ``\\dfrac``/``\\tfrac`` read ``\\frac``, ``\\%`` read ``%``."""
    t = re.sub(r"\\(?:left|right)(?![A-Za-z])|\\[,;:! ]|~|\$", "", text)
    t = re.sub(r"^\s*[A-Za-z](?:_\{?\w+\}?)?\s*=(?!=)", "", join_thousands(t))
    t = re.sub(r"\\[dt]frac", r"\\frac", t).replace("\\%", "%")
    return re.sub(r"\s+", "", t).rstrip(".,;")


def _numeric_core(value: str) -> str:
    """The number a box states without its percent, degree or unit (``28\\%``, ``90^\\circ``, ``70 \\text{ cm}`` →
    the number), so ``So 70 apples.`` restates ``\\boxed{70 \\text{ apples}}``."""
    return re.sub(r"\s*(?:\\?%|\^\s*\{?\s*\\circ\s*\}?|°|\\(?:text|mathrm|mbox)\s*\{[^{}]*\})\s*$", "", value)


# RULE "answer stated after the box": how far below a statement whose verb ends its line (``The final answer is:``)
# its value is looked for: up to the next blank line, within this many characters
MAX_STATED_BELOW_CHARS = 400
MAX_LATER_STATEMENTS = 64


def later_statement_differs(text: str, line_end: int, value: str, same_value: SameValue = None) -> bool:
    """RULE "answer stated after the box": whether a sentence after the final box's line (from ``line_end``) that
    STATES the answer (:func:`_statement_verb_end`: ``Final Answer: The final answer is $14401$.``,
    ``The answer is 14401.``, ``Final answer: 14401``, ``**Therefore, the answer is** 14401``) says anything but
    the box's ``value``: the rest of its line after the verb -- or, when the verb ends the line
    (``The final answer is:``), what follows up to the next blank line (a ``\\[ \\]`` display) -- is judged
    sentence by sentence as a later sentence on the box's line is (:func:`_later_sentence_hedged`). Every other
    later line stays outside the answer (RULE "next line"): a check, a note, the next paragraph."""
    judged_to = line_end  # each character is judged once (a statement inside one already judged is skipped)
    for match in list(_ANSWER_WORD_RE.finditer(text, line_end))[-MAX_LATER_STATEMENTS:]:
        verb_end = _statement_verb_end(text, match) if match.start() >= judged_to else None
        if verb_end is None:
            continue
        judged_to = text.find("\n", verb_end)
        judged_to = len(text) if judged_to < 0 else judged_to
        stated = text[verb_end:judged_to]
        if not stated.strip(" \t*$\\[]"):  # the value is below the statement
            below = re.split(r"\n[ \t]*\n", text[judged_to:judged_to + MAX_STATED_BELOW_CHARS].lstrip(), maxsplit=1)[0]
            judged_to = text.find(below, judged_to) + len(below)
            stated += " " + below.replace("\n", " ")
        if any(_later_sentence_hedged(sentence, value, same_value) for sentence in _SENTENCE_STOP_RE.split(stated)):
            return True
    return False


def math_final_text(text: str) -> str | None:
    """The final-answer text of a math response: after ``</think>``; ``None`` if a ``<think>`` never closes.

    RULE "stray </think>": a ``</think>`` echoed AFTER the answer (``...\\boxed{70}</think>``) does not erase
    it: when the text after the last ``</think>`` holds no box and no "answer", and no ``<think>`` reopened
    after the first ``</think>``, the final text is everything after the first ``</think>`` (tags removed).
    """
    close = text.find(THINK_CLOSE)
    if close < 0:
        return None if THINK_OPEN in text else text
    after_last = text[text.rfind(THINK_CLOSE) + len(THINK_CLOSE):]
    rest = text[close + len(THINK_CLOSE):]
    if THINK_OPEN in rest or _has_answer_marker(after_last):
        return after_last
    return rest.replace(THINK_CLOSE, "\n")


def _has_answer_marker(text: str) -> bool:
    return bool(balanced_boxes(text)) or _ANSWER_WORD_RE.search(text) is not None


# "Answer:" labels its line only when nothing but markup or (final/correct/my/short) precedes it on the line:
# "Why this answer: ..." and "... of the form Answer: $Answer" are prose, not answer lines.
_ANSWER_LABEL_PREFIX_RE = re.compile(r"(?i)(?:^|\n)[ \t>*#_\-|]*(?:\d{1,2}[.)][ \t]*)?(?:\*\*)?[ \t]*"
                                    r"(?:(?:so|thus|therefore|hence|finally|overall)[ \t]*,?[ \t]+)?"
                                    r"(?:(?:the|my|our)[ \t]+)?(?:(?:final|correct|short|numerical)[ \t]+)?\Z")


def last_answer_line(text: str) -> str | None:
    """Value of the last ``Answer: <value>`` line (case-insensitive, ASCII or full-width colon) with a non-empty
    value, or ``None``. RULE "answer-line decorations": a later line whose value is prose or a placeholder
    (an echoed instruction "... in the form Answer: $ANSWER", "this answer: checks out because ...") does not
    replace an earlier real one; if every line is such, the last one is used (and scored as it is)."""
    values = []
    for m in ANSWER_LINE_RE.finditer(text):
        if not _ANSWER_LABEL_PREFIX_RE.search(text, max(0, m.start() - 40), m.start()):
            continue
        value = m.group(1)
        if not value.strip():  # "Answer:" alone on its line: the value is the next non-empty line (if short)
            following = text[m.end():m.end() + 400].lstrip("\n \t").split("\n", 1)[0]
            value = following if 0 < len(following.strip()) <= 200 and not ANSWER_LINE_RE.match(following) else ""
        if value.strip():
            values.append(value)
    for value in reversed(values):
        if not _is_prose_or_placeholder(value):
            return value
    return values[-1] if values else None


_STATEMENT_OPENING_RE = re.compile(r"(?i)^[ \t]{0,8}(?:\*\*[ \t]{0,4})?(?:so,?\s+|thus,?\s+|therefore,?\s+)?(?:the\s+|my\s+)?"
                                   r"(?:final\s+)?answer\s+is\b")
_MATH_SEGMENT_RE = re.compile(r"\$[^$]*\$|\\\(.*?\\\)|\\\[.*?\\\]|\\[A-Za-z]+\s*\{[^{}]*\}|\\[A-Za-z]+")
_WORD_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")


def _is_prose_or_placeholder(value: str) -> bool:
    value = value.strip()[:MAX_ANSWER_CHARS]  # longer values are rejected later anyway; keeps this linear
    if _STATEMENT_OPENING_RE.match(value):
        return False  # "The final answer is $70$." is read as a statement
    plain = _MATH_SEGMENT_RE.sub(" ", value)
    if _ANSWER_WORD_RE.search(plain) or re.search(r"(?i)\$?\b(?:your|final)[ _]?answer\b|<[a-z_ ]+>|\[[a-z_ ]+\]", value):
        return True  # "$ANSWER", "<answer>", "[your answer]", "... answer ..."
    return len(_WORD_RE.findall(plain)) >= 4 or (
        len(_WORD_RE.findall(plain)) >= 2 and not re.search(r"[0-9$\\]", value))


_FOOTNOTE_RE = re.compile(r"(?<=\S)\[\^[^\]\s]{1,8}\]\s*")  # a markdown footnote mark: "70[^1]"


def normalise_answer(answer: str) -> str:
    """Strip decoration around an extracted answer: whitespace, ``**bold**``, ``$...$``, ``\\(...\\)``,
    ``\\[...\\]``, a code span, a footnote mark and a trailing ``.``/``,``/``;``, however deeply repeated.
    Each pass moves two indices inwards (no copy), so the whole is linear time."""
    s = answer
    lo, hi = 0, len(s)
    while True:
        before = (lo, hi)
        while lo < hi and (s[lo].isspace() or s[lo] == "$"):
            lo += 1
        while hi > lo and (s[hi - 1].isspace() or s[hi - 1] in "$.,;"):
            hi -= 1
        if s.startswith("**", lo) and hi - lo >= 2:
            lo += 2
        if s.endswith("**", lo, hi) and hi - lo >= 2:
            hi -= 2
        for left, right in (("\\(", "\\)"), ("\\[", "\\]")):
            if hi - lo >= 4 and s.startswith(left, lo) and s.endswith(right, lo, hi):
                lo, hi = lo + 2, hi - 2
        if hi - lo >= 2 and s[lo] == "`" and s[hi - 1] == "`":  # a code span
            lo, hi = lo + 1, hi - 1
        footnote = _FOOTNOTE_RE.search(s, max(lo, hi - 16), hi)
        if footnote and footnote.end() == hi and footnote.start() > lo:
            hi = footnote.start()
        if (lo, hi) == before:
            return s[lo:hi]


def extract_math_answer(final_text: str, same_value: SameValue = None) -> tuple[str | None, str]:
    """Pick the ONE final answer from the final-answer text (see README "Math"):

    1. the boxes of the final answer (:func:`final_boxes`): one box gives its content, several boxes joined by
       connective text give their contents joined as a list ``"3, 5"`` (``how == "boxed_list"``);
    2. else the value of the last ``Answer:`` line.

    A final box that is an operand of a larger expression (``\\boxed{70}+1``, ``2\\boxed{35}``) gives
    ``how == "boxed_embedded"``: the stated answer is the expression, not the box, and is scored wrong; so is a box
    hedged after it (:func:`boxes_embedded`; ``same_value`` compares a value restated after it with it).
    Returns ``(answer, how)`` with ``how`` in ``{"boxed", "boxed_list", "boxed_embedded", "answer_line", "none"}``.
    """
    final_text = _MARKUP_TAG_RE.sub(_markup_tag, _HTML_TAG_RE.sub("", _without_html_comments(final_text)))
    final_text = _CHAT_TOKEN_RE.sub("\n", final_text)
    contents = [strip_grouping_braces(normalise_answer(c)) for c in final_boxes(final_text)]
    contents = [c for c in contents if c]
    if contents and boxes_embedded(final_text, same_value):
        return ", ".join(contents), "boxed_embedded"
    if len(contents) == 1:
        modulus = box_modulus(final_text)
        if modulus:
            return f"{modulus[0]}{contents[0]} {modulus[1]}", "boxed"
        return contents[0] + ("\\%" if box_percent_end(final_text) else ""), "boxed"
    if contents:
        return ", ".join(contents), "boxed_list"
    line = last_answer_line(final_text)
    if line is not None:
        # "Answer: \boxed{70}" was handled above; "Answer: $70$." is normalised here.
        if _STATEMENT_OPENING_RE.match(line.strip()[:MAX_ANSWER_CHARS]):  # "Final Answer: The final answer is $70$. I hope it is correct."
            stated = stated_final_answer(line.strip())
            if stated is None:
                return None, "none"
            return stated, "answer_line"
        value = normalise_answer(line)
        if value.endswith("?"):  # "Answer: 70?" asks, it does not state
            return None, "none"
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
# Doubt right after a stated answer withdraws it (RULE "stated answer"): the statement is not a final answer.
_DOUBT_RE = re.compile(r"(?i)\?|(?<![A-Za-z])(?:not\s+(?:sure|certain|confident)|unsure|uncertain|maybe|perhaps|"
                       r"possibly|probably|i\s+think|i\s+guess|might\s+be|could\s+be|double[- ]check|let\s+me\s+check|"
                       r"wait|hmm|or\s+(?:maybe|perhaps|possibly)|i'?m\s+not)(?![A-Za-z])")


def _statement_verb_end(text: str, match: re.Match) -> int | None:
    """Where the verb of a sentence STATING the answer ends, ``match`` being its ``answer`` word in ``text``
    (``The final answer is``, ``So the answer:``, ``Final Answer:``): the sentence opens with ``answer`` after
    nothing but :data:`_STATEMENT_PREFIX_WORDS` and markup, and ``is``, ``=`` or ``:`` follows; else ``None``."""
    prefix = text[max(0, match.start() - 60):match.start()]
    cut = max(prefix.rfind(c) for c in ".!?:\n")
    if cut < 0 and match.start() > 60:
        return None  # no sentence start within reach: "answer" is in the middle of a long sentence
    opening = prefix[cut + 1:]
    if re.sub(r"[A-Za-z\s*#,]", "", opening):
        return None
    if any(w.lower() not in _STATEMENT_PREFIX_WORDS for w in re.findall(r"[A-Za-z]+", opening)):
        return None  # "If the answer were ...", "Suppose the answer is ..."
    verb = _STATEMENT_VERB_RE.match(text[match.end():match.end() + 40].replace("\t", " "))
    if verb is None or not verb.group().strip():
        return None
    return match.end() + verb.end()


def _statement_value(text: str, match: re.Match) -> str | None:
    verb_end = _statement_verb_end(text, match)
    if verb_end is None:
        return None
    rest = text[verb_end:match.end() + 1000]
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if rest.startswith(left):
            close = rest.find(right, len(left))
            if close < 0:
                return None  # truncated inside the math
            value = rest[len(left):close]
            after = rest[close + len(right):].lstrip(" \t*")
            if after and after[0] not in ".!\n":
                return None  # "the answer is $70$ if ..." -- not a plain statement
            if _DOUBT_RE.search(after.split("\n", 1)[0][:200]):
                return None  # "The answer is $70$. Not sure."
            return value.strip() or None
    line = rest.split("\n", 1)[0]
    end = _SENTENCE_END_RE.search(line)
    if end and end.group() == "?":
        return None  # "The answer is 70? Not sure." asks, it does not state
    if end and _DOUBT_RE.search(line[end.end():end.end() + 200]):
        return None  # "The answer is 70. Not sure."
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
                       r"instead|rather|except|unless|if|otherwise|round(?:ed|ing)?|nearest|truncat[a-z]*|wait|hmm+|sorry|oops|"
                       r"alternatively|also|else|unsure|uncertain|mistake[a-z]*|retract[a-z]*|scratch|"
                       r"oder|vielleicht|ungef[aä]hr|etwa|environ|quiz[aá]s?|aproximadamente|forse|talvez|или|"
                       r"примерно|около)(?![A-Za-z])|或|还是|還是|可能|大约|大概|约|左右|または|くらい|ぐらい|約")
_TEXT_GROUP_RE = re.compile(r"\\(?:text[a-z]*|mbox|mathrm|operatorname|mathit|mathbf)\s*\{([^{}]*)\}")
_LIST_TEXT_RE = re.compile(r"\s*(?:and|or)?\s*")
_LIST_WORD_RE = re.compile(r"\\(?:text|mbox|textrm)\{\s*(?:and|or)\s*\}|(?<![A-Za-z])(?:and|or)(?![A-Za-z])")
_LHS_RE = re.compile(rf"\s*(?:(?:{_NAME}\s*){{1,4}}(?:\(\s*{_NAME}\s*\))?|\(\s*{_NAME}(?:\s*,\s*{_NAME})*\s*\))\s*")
_PERCENT_RE = re.compile(r"\s*\\?%\s*$")
# RULE "percent": the percent mark in every spelling a response uses: \%, %, \text{\%}, percent, \text{ percent}
_PERCENT_MARK_RE = re.compile(r"(?:\s|\\[,;! ]|~)*(?:\\?%|\\(?:text|textrm|mathrm|mbox)\s*\{\s*(?:\\?%|percent)\s*\}"
                              r"|(?<![A-Za-z])percent)\s*$")


def percent_value(text: str, *, spelled: bool = True) -> str | None:
    """RULE "percent": the value a percent states (``28\\%``, ``28 \\%``, ``28%``, ``28 percent``,
    ``28 \\text{ percent}`` → ``"28"``), or ``None`` when ``text`` has no percent mark at its end. With
    ``spelled=False`` only a ``%`` sign counts (a gold written with the word is parsed by math-verify as its
    number, which every spelling already meets)."""
    match = _PERCENT_MARK_RE.search(text)
    if match is None or (not spelled and "%" not in match.group()):
        return None
    value = text[:match.start()].strip()
    return value or None


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


# RULE "one relation, several spellings": each spelling of a relation is read as one token, so a gold written
# ``x \ge 3`` admits ``x \geq 3`` and ``x >= 3`` (math-verify parses all three alike), never ``x > 3``.
_RELATION_SPELLINGS = {"\\geq": "\\ge", "\\geqq": "\\ge", "\\geqslant": "\\ge", ">=": "\\ge", "≥": "\\ge",
                       "⩾": "\\ge", "\\leq": "\\le", "\\leqq": "\\le", "\\leqslant": "\\le", "<=": "\\le",
                       "≤": "\\le", "⩽": "\\le", "\\neq": "\\ne", "!=": "\\ne", "≠": "\\ne", "\\lt": "<",
                       "\\gt": ">"}
_ORDER_RELATIONS = frozenset({"<", ">", "\\le", "\\ge"})
_TWO_CHAR_RELATION_RE = re.compile(r"[<>!]=")
_EQUALS_RE = re.compile(r"(?<![<>!=])=(?!=)")  # an equals sign that is not part of >=, <=, !=, ==


def _relation_tokens(expr: str) -> set[str]:
    tokens = {"\\" + c for c in _COMMAND_RE.findall(expr) if c in RELATION_COMMANDS}
    tokens.update(_TWO_CHAR_RELATION_RE.findall(expr))
    tokens.update(ch for ch in _TWO_CHAR_RELATION_RE.sub(" ", expr) if ch in RELATION_CHARS)
    tokens.update(w.lower() for w in _HEDGE_RE.findall(expr))
    return {_RELATION_SPELLINGS.get(t, t) for t in tokens}


def _max_equals(expr: str) -> int:
    return max(len(_EQUALS_RE.findall(part)) for part in split_top_level(_LIST_WORD_RE.sub(",", expr)))


# A number carrying a subscript: 70_{8}, {70}_8, 1010_2, 3.5_{10} (not a name's index: x_1, a1_2, \log_2); the
# subscript (group 1) is the numeral's base
_NUMBER_SUBSCRIPT_RE = re.compile(r"(?<![A-Za-z_\\\d.])\d+(?:\.\d+)?\s*\}?\s*_\s*(\{(?:[^{}]|\{[^{}]*\})*\}|\w)?")


def numeral_bases(expr: str) -> list[str]:
    """RULE "bases": the base written under each subscripted numeral of ``expr``, in order (``101_2`` → ``["2"]``,
    ``77_{(8)}`` → ``["8"]``, ``{70}_{10}`` → ``["10"]``); any other subscript is kept as written
    (``70_{x}`` → ``["x"]``, ``1_{\\text{two}}`` → ``["two"]``: not base 2, so never paid as it). A name's index
    (``x_1``, ``\\log_2``) is not a numeral's."""
    return [re.sub(r"\\(?:text|mathrm|textrm|mbox)\s*|[{}()\s]", "", m.group(1) or "").lower()
            for m in _NUMBER_SUBSCRIPT_RE.finditer(expr)]


def base_problem(answer: str, gold: str) -> str | None:
    """RULE "bases": a numeral's base is part of its value. An answer's subscripted numerals must carry the
    gold's bases, in order (``101_3`` is not ``101_2``); an answer without subscripts is read in the gold's bases
    (``\\boxed{204}`` for ``204_5``: the question names the base); against a gold without bases only ``_{10}``
    is admitted (``77_{10}`` is 77). ``None`` when the bases agree."""
    answer_bases, gold_bases = numeral_bases(answer), numeral_bases(gold)
    if not answer_bases or answer_bases == gold_bases or (not gold_bases and set(answer_bases) == {"10"}):
        return None
    if not gold_bases:
        return "a subscript on a number (a base or an index: 70_{8} is 56, not 70; math-verify drops it)"
    return f"a numeral in base {', '.join(answer_bases)} where the gold is in base {', '.join(gold_bases)}"


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
    if _relation_tokens(gold) & _ORDER_RELATIONS:  # an inequality gold: math-verify compares the relations
        extra -= _ORDER_RELATIONS                   # (5 \ge x is x \le 5; x > 5 is not x \ge 5)
    if extra:
        return "relation, approximation or hedge in the answer: " + " ".join(sorted(extra))
    bases = base_problem(answer, gold)
    if bases is not None:
        return bases
    gold_texts = "".join(_TEXT_GROUP_RE.findall(gold))
    texts = "".join(_TEXT_GROUP_RE.findall(answer))
    beside_math = bool(_TEXT_GROUP_RE.sub("", answer).strip())
    if beside_math and (any(ch.isdigit() for ch in texts) or _NUMBER_WORD_RE.search(texts)) \
            and not (any(ch.isdigit() for ch in gold_texts) or _NUMBER_WORD_RE.search(gold_texts)):
        return "number inside \\text{} next to other math"
    for words in _TEXT_GROUP_RE.findall(answer):  # "70 \text{ or seventy-one}": a hedge, not a list connective
        if beside_math and not _LIST_TEXT_RE.fullmatch(words) and _TAIL_HEDGE_RE.search(words) \
                and not _TAIL_HEDGE_RE.search(gold_texts):
            return "hedge inside \\text{} next to other math"
        # "70 \text{ squared}", "70\text{k}", "70 \text{ (} 71 \text{)}": math-verify drops the text, not its sense
        if beside_math and value_changing_text(words) and not value_changing_text(gold_texts):
            return "value-changing word inside \\text{} next to other math"
    if answer.count("\\boxed") + answer.count("\\fbox"):
        inner = answer.replace("\\boxed", "").replace("\\fbox", "")
        return answer_problem(inner, gold)
    gold_equals = _max_equals(gold)
    for item in split_top_level(_LIST_WORD_RE.sub(",", answer)):
        equals = len(_EQUALS_RE.findall(item))
        if equals > max(1, gold_equals):
            return "chained equation"
        if equals == 1 and gold_equals == 0:
            lhs = _EQUALS_RE.split(item, 1)[0]
            if not _LHS_RE.fullmatch(lhs):
                return "equation whose left side is not a variable"
    return None


def answer_for_parsing(answer: str, keep_percent: bool = False) -> str:
    """The string math-verify parses (wrapped in ``\\boxed{}``): nested box commands removed (their braces
    stay), grouping braces around the whole answer removed, a trailing percent sign dropped (``70\\%`` ≡ 70, a
    documented leniency)."""
    s = strip_grouping_braces(answer.replace("\\boxed", "").replace("\\fbox", ""))
    return s if keep_percent else (_PERCENT_RE.sub("", s) or s)  # a gold "50\\%" parses only as text


def strip_grouping_braces(s: str) -> str:
    """``s`` without the grouping braces around the whole of it, however many (``{{{(1, 2)}}}`` -> ``(1, 2)``;
    ``{1}{2}`` is kept): one scan pairs the braces, a second walks inwards. Linear time."""
    s = s.strip()
    if not s.startswith("{"):
        return s
    partner, stack = {}, []
    for match in re.finditer(r"\\.|[{}]", s, re.DOTALL):
        token = match.group()
        if token == "{":
            stack.append(match.start())
        elif token == "}" and stack:
            partner[stack.pop()] = match.start()
    lo, hi = 0, len(s) - 1
    while lo < hi and s[lo] == "{" and partner.get(lo) == hi:
        lo, hi = lo + 1, hi - 1
        while lo <= hi and s[lo].isspace():
            lo += 1
        while hi >= lo and s[hi].isspace():
            hi -= 1
    return s[lo:hi + 1]


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


# --- admitted forms: rewritten to the value they state before the rule and math-verify see them ---------------
# Each rewrite is one RULE of reward_fns/README.md ("Leniency rules"), with the hedge it must not admit.
_UNICODE_FRACTIONS = {"½": (1, 2), "⅓": (1, 3), "⅔": (2, 3), "¼": (1, 4), "¾": (3, 4), "⅕": (1, 5), "⅖": (2, 5),
                      "⅗": (3, 5), "⅘": (4, 5), "⅙": (1, 6), "⅚": (5, 6), "⅛": (1, 8), "⅜": (3, 8), "⅝": (5, 8),
                      "⅞": (7, 8), "⅐": (1, 7), "⅑": (1, 9), "⅒": (1, 10)}
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_SUPERSCRIPT_RUN_RE = re.compile("[⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺]+")
_UNICODE_SYMBOLS = {"−": "-", "–": "-", "×": r"\times ", "·": r"\cdot ", "⋅": r"\cdot ", "÷": r"\div ", "π": r"\pi ",
                    "∞": r"\infty ", "±": r"\pm ", "∓": r"\mp ", "\u2009": " ", "\u202f": " ", "\u00a0": " "}
_ROOT_RE = re.compile(r"([√∛∜])\s*(\d+(?:\.\d+)?|[A-Za-z]|\([^()]*\)|\{[^{}]*\})")
_DEGREE_RE = re.compile(r"\s*(?:\^\s*\{?\s*\\circ\s*\}?|\\circ|\\degree|°|\^\s*\{\s*\\text\{\s*o\s*\}\s*\})\s*$")
_END_MARK_RE = re.compile(r"\s*\\(?:qed|blacksquare|square|Box|qedsymbol)\s*$")
# RULE "answer-line decorations" / units: a unit after the number, in \text{}/\mathrm{} (``\text{ cm}``,
# ``\text{ km/h}``, ``\mathrm{km}/\mathrm{h}``) or as plain words (``70 marbles``, ``70 square units``, ``70 cm^2``),
# a COMPOUND unit (``km/h``, ``m/s^2``, ``m/s²``, ``miles per hour``, ``N \cdot m``: words joined by ``/``, ``per``
# or ``\cdot``, never a number: ``km/2`` is a division), or an explanatory parenthesis holding no number
# (``70 (the total number of apples)``): words, at least one of three letters or two words, so a function's or a
# factor's argument is never a remark (``\sec^2(y)``, ``x^2(x-y)``). Whatever is stripped must hold no hedge
# (:func:`_unit_is_hedge`).
_UNIT_WORD = r"[A-Za-z]{1,15}(?:\^\{?-?[123]\}?|[²³])?"
_COMPOUND_UNIT = rf"{_UNIT_WORD}(?:[ \t]*(?:/|\\cdot|·)[ \t]*{_UNIT_WORD}|[ \t]+per[ \t]+{_UNIT_WORD}){{1,3}}"
_TEXT_UNIT = r"\\(?:text|textrm|mathrm|mbox)\s*\{\s*[A-Za-z][A-Za-z ./]{0,30}\}"
_TRAILING_UNIT_RE = re.compile(
    rf"(?<=[\d}}])(?:\s|\\[,;! ]|~)*({_TEXT_UNIT}(?:\s*(?:/|\\cdot)\s*{_TEXT_UNIT}){{0,3}}(?:\^\{{?-?[123]\}}?)?)\s*$"
    rf"|(?<=[\d$])\s+\(?({_COMPOUND_UNIT}|[A-Za-z]{{2,15}}(?:\s+[A-Za-z]{{2,15}}){{0,2}})\)?"
    r"(?:\^\{?[23]\}?|[²³])?\s*$"
    r"|(?<=[\d$}])\s*\(((?=[^()]*(?:[A-Za-z]{3}|[A-Za-z]{2}\s|\s[A-Za-z]{2}))[A-Za-z][A-Za-z ,.'/-]{0,60})\)\s*$")


def _unit_is_hedge(unit: str) -> bool:
    """Whether a stripped unit or remark hides a hedge: a number (``km/2``, ``(or 71)``) or a hedge word
    (``approximately``, ``or``, ``rounded``, ``not``, ...). ``per`` between two unit words (``miles per hour``)
    is part of the unit."""
    text = re.sub(r"\^\{?-?[123]\}?", "", unit)
    if re.search(r"\d", text):
        return True
    words = [w.lower() for w in re.findall(r"[A-Za-z]+", re.sub(r"\\[A-Za-z]+", " ", text))]
    words = [w for i, w in enumerate(words) if not (w == "per" and 0 < i < len(words) - 1)]
    return bool(set(words) & _HEDGE_WORDS) or _HEDGE_RE.search(" ".join(words)) is not None \
        or _TAIL_HEDGE_RE.search(text) is not None or _NUMBER_WORD_RE.search(text) is not None \
        or _MAGNITUDE_RE.search(text) is not None or re.search(r"[?+]", text) is not None
# a row break ``\\`` (matrices, arrays, cases) is matched first so that its second backslash is never read as
# the start of a LaTeX space ``\ `` (``1 & 2 \\ 3 & 4`` kept, not ``1 & 2 \  3 & 4``)
_LATEX_SPACE_RE = re.compile(r"\\\\|\\[,;:! ]|~|\\q?quad(?![A-Za-z])")
_THOUSANDS_RE = re.compile(r"(?<![\d.,])\d{1,3}(?:(?: |\{,\}|,)\d{3})+(?![\d])")
_REPEATING_RE = re.compile(r"^(-?)(\d*)\.(\d*)(?:\\overline\s*\{(\d{1,12})\}|\\dot\s*\{?(\d)\}?|\((\d{1,12})\))$")
_CONGRUENCE_RE = re.compile(r"^(?P<lhs>[^=]*?)\s*(?:\\equiv|≡)\s*(?P<value>[-\w{}\\]+?)\s*"
                            r"(?:\\pmod\s*\{?\s*(?P<m1>\w+)\s*\}?|\(\s*(?:\\bmod|\\mod|\\text\{\s*mod\s*\}|"
                            r"\\mathrm\{\s*mod\s*\}|mod)\s*(?P<m2>\w+)\s*\)|\\(?:bmod|mod)\s*\{?\s*(?P<m3>\w+)\s*\}?)\s*$")
_E_NOTATION_RE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[eE]([-+]?\d{1,4})(?![\w.])")
_PM_RE = re.compile(r"^(?P<a>[^=,;]*?)\s*\\(?:pm|mp)\s*(?P<b>[^=,;]+)$")
_HEDGE_WORDS = frozenset({"or", "and", "not", "approximately", "about", "around", "roughly", "nearly", "maybe",
                          "perhaps", "possibly", "probably", "either", "plus", "minus", "times", "over", "than",
                          "less", "more", "at", "least", "most", "to", "if", "unless", "except", "wrong", "no",
                          "percent", "per", "by"}) | _VALUE_WORDS  # and the words that change the value


def _unicode_math(s: str) -> str:
    """RULE "Unicode math": ½ → \\frac{1}{2} (2½ → 2+\\frac{1}{2}), √2 → \\sqrt{2}, x² → x^{2}, ° → ^\\circ,
    − × · ÷ π ∞ ± → their LaTeX. Hedge kept: ± stays a hedge unless the gold lists both roots (RULE "±")."""
    if s.isascii():
        return s
    for char, (num, den) in _UNICODE_FRACTIONS.items():
        if char in s:
            s = re.sub(rf"(\d)\s*{char}", rf"(\1+\\frac{{{num}}}{{{den}}})", s)
            s = s.replace(char, rf"\frac{{{num}}}{{{den}}}")
    s = _ROOT_RE.sub(lambda m: {"√": r"\sqrt", "∛": r"\sqrt[3]", "∜": r"\sqrt[4]"}[m.group(1)]
                     + "{" + m.group(2).strip("(){}") + "}", s)
    s = _SUPERSCRIPT_RUN_RE.sub(lambda m: "^{" + m.group().translate(_SUPERSCRIPTS) + "}", s)
    for char, latex in _UNICODE_SYMBOLS.items():
        s = s.replace(char, latex)
    return s.replace("°", r"^\circ").strip()


def _label_side(side: str) -> bool:
    """RULE "labelled statement": does ``side`` NAME a quantity (``m+n``, ``|AB|``, ``\\angle ABC``, ``[ABC]``,
    ``f(3)``, ``a_1``, ``x``)? No free numeral (``x+1``, ``2x`` are equations, not names), no relation."""
    t = side.strip()
    if not t or len(t) > 60:
        return False
    has_name = bool(re.search(r"[A-Za-z]", re.sub(r"\\(?:angle|measuredangle|triangle|overline|left|right|text|"
                                                   r"mathrm|operatorname|lvert|rvert|vert|lbrack|rbrack)", "", t)))
    t = re.sub(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])", "", t)
    t = re.sub(r"[_^](?:\{[^{}]*\}|\\?[A-Za-z0-9])", "", t)          # subscripts, superscripts: a_1, x^{(2)}
    t = re.sub(r"(?<=[A-Za-z)}])\s*\([^()=]*\)", "", t)               # arguments: f(3), P(A)
    if re.search(r"\d", t) or _relation_tokens(t):
        return False
    t = re.sub(r"\\[A-Za-z]+", "", t)
    return has_name and re.fullmatch(r"[A-Za-z{}|\[\]()+\-*/ ,'.:]*", t) is not None


def _gold_items(gold: str) -> list[str]:
    return [g for g in split_top_level(_LIST_WORD_RE.sub(",", _thousands_marks(gold))) if g.strip()]


# MATH's thousands separator: ``10,\!000`` (a comma and a negative thin space), read as ``10{,}000``
_MATH_THOUSANDS_RE = re.compile(r"(?<=\d),\s*\\!\s*(?=\d{3}(?!\d))")


def _thousands_marks(s: str) -> str:
    """``s`` with MATH's thousands separator ``,\\!`` written ``{,}`` (one separator, never a list comma)."""
    return _MATH_THOUSANDS_RE.sub("{,}", s)


def join_thousands(s: str) -> str:
    """RULE "thousands": every number written in groups of three (``1 000 000``, ``1{,}000``, ``10,\\!000``,
    ``1,000``) as one integer. A plain comma joins groups only outside brackets: inside a tuple, interval or set
    it separates items (``(3,100)`` is a pair, as math-verify reads it). Linear: the bracket depth is counted
    once, left to right, as the matches come."""
    s = _thousands_marks(s)
    depth, pos, out = 0, 0, []
    for match in _THOUSANDS_RE.finditer(s):
        gap = s[pos:match.start()]
        depth += sum(gap.count(c) for c in ("(", "[", "\\{")) - sum(gap.count(c) for c in (")", "]", "\\}"))
        text = match.group()
        out += [gap, text if depth > 0 and re.search(r"\d,\d", text) else re.sub(r"\D", "", text)]
        depth += text.count("(") - text.count(")")
        pos = match.end()
    return "".join(out) + s[pos:]


def rewrite_admitted_forms(answer: str, gold: str) -> str:
    """The extracted answer with every ADMITTED form rewritten to the value it states (README "Leniency
    rules"); everything else is left for :func:`answer_problem` to judge. Pure, linear-ish in the answer."""
    if len(answer) > MAX_ANSWER_CHARS:
        return answer  # rejected by answer_problem; no rewrite scans it
    s = _thousands_marks(_unicode_math(answer))
    s = _LATEX_SPACE_RE.sub(lambda m: m.group() if m.group() == "\\\\" else " ", s).strip()  # \\ is a row break
    gold_has = lambda token: token in gold  # noqa: E731
    for _ in range(2):
        s = _END_MARK_RE.sub("", s)
        if not any(gold_has(t) for t in ("circ", "°", "degree")):
            s = _DEGREE_RE.sub("", s)
        unit = _TRAILING_UNIT_RE.search(s)
        if unit and not _unit_is_hedge(next(g for g in unit.groups() if g)) \
                and not gold_has("\\text") and not re.search(r"[A-Za-z]{2}", _MATH_SEGMENT_RE.sub("", gold)):
            s = s[:unit.start()].strip()
            if s.startswith("$") and s.endswith("$"):  # "$70$ dollars"
                s = s.strip("$").strip()
    if not re.search(r"\d[eE]", gold):  # RULE "numbers": 9.31e-10 is 9.31 \times 10^{-10}, never Euler's e
        s = _E_NOTATION_RE.sub(r"\1 \\times 10^{\2}", s)
    single_gold = len(_gold_items(gold)) == 1
    if single_gold and not re.search(r"\d(?: |\{,\}|,)\d", gold):
        s = join_thousands(s)  # RULE "thousands": 1 000 000, 1{,}000, 10,\!000
    if "mod" in gold and not any(gold_has(t) for t in ("\\equiv", "≡")):
        s = re.sub(r"^\s*(?:\\equiv|≡)\s*", "", s)  # RULE "modulus after the box": the gold's own qualifier
    before_items = s
    items = split_top_level(s)
    if not any(gold_has(t) for t in ("\\equiv", "≡", "mod")):
        rewritten = []
        for item in items:
            m = _CONGRUENCE_RE.match(item.strip())
            if m and (not m.group("lhs").strip() or _label_side(m.group("lhs"))):
                item = m.group("value")  # RULE "congruence": x \equiv 3 \pmod 7 states the remainder 3
            rewritten.append(item)
        items = rewritten
    if "=" not in gold:
        rewritten = []
        for item in items:
            if item.count("=") == 1 and not re.search(r"[<>!]=|=[<>]|\\(?:le|ge|ne)q?", item):
                left, right = item.split("=")
                if _label_side(left) and not _label_side(right):
                    item = right  # RULE "labelled statement": m+n = 70, |AB| = 70
                elif _label_side(right) and not _label_side(left):
                    item = left   # 70 = x
            rewritten.append(item)
        items = rewritten
    items = [_repeating_decimal(item.strip()) for item in items]
    if len(items) == 1 and len(_gold_items(gold)) == 2 and not any(gold_has(t) for t in ("\\pm", "±", "\\mp")):
        m = _PM_RE.match(items[0].strip())
        if m and not _relation_tokens(m.group("a") + m.group("b")) and m.group("b").strip():
            a, b = m.group("a").strip(), m.group("b").strip()
            b = f"({b})" if re.search(r"(?<!^)[-+]", b) else b
            items = [f"{a}+{b}" if a else b, f"{a}-{b}"]  # RULE "±": a \pm b lists a+b, a-b for a two-root gold
    if _SEPARATOR_GOLD_RE.search(gold) and [i.strip() for i in items] == [o.strip() for o in
                                                                        split_top_level(before_items)]:
        # a gold whose separators carry meaning (``14,916`` one number, ``p=5,q=2;p=7,q=2`` two groups): an
        # answer no rule rewrote keeps its own separators, so the same text parses as the gold does
        return before_items.strip()
    return ", ".join(item.strip() for item in items)


# a comma followed by a digit (``14,916``: thousands, as math-verify reads it) or a semicolon (groups)
_SEPARATOR_GOLD_RE = re.compile(r",(?=\d)|;")


def _repeating_decimal(item: str) -> str:
    """RULE "repeating decimal": 0.\\overline{3}, 0.1\\dot{6}, 0.(142857) → the exact fraction. A truncated
    decimal (0.333) stays a decimal (relative tolerance, not exactness)."""
    m = _REPEATING_RE.match(item)
    if not m:
        return item
    sign, whole, fixed = m.group(1), m.group(2) or "0", m.group(3)
    repeat = m.group(4) or m.group(5) or m.group(6)
    numerator = int(whole + fixed + repeat) - int(whole + fixed)
    denominator = (10 ** len(repeat) - 1) * 10 ** len(fixed)
    return f"{sign}\\frac{{{numerator}}}{{{denominator}}}"


# --- gold answers with a colon (clock times, ratios): compared as normalised text ---------------------------
_COLON_GOLD_RE = re.compile(r"^\d{1,4}(?::\d{1,4}){1,2}$")


def colon_form(text: str) -> str | None:
    """``12:00``, ``12 : 00``, ``12\\colon 00``, ``\\text{12:00}`` → ``"12:00"``; ``None`` if ``text`` is not
    digits separated by colons (RULE "colon golds": math-verify reads ``12:00`` as something else)."""
    t = re.sub(r"\\(?:text|mathrm|textrm|mbox)\s*\{([^{}]*)\}", r"\1", text)
    t = re.sub(r"\\colon|\\!:|\\mathrel\{:\}|：", ":", t)
    t = re.sub(r"\s|\\[,;! ]|~|\$", "", t)
    return t if _COLON_GOLD_RE.match(t) else None


# --- ground-truth check (fast, no math-verify): an unusable gold is a dataset bug ---------------------------
MAX_GOLD_CHARS = 1000


def gold_problem(gold: object) -> str | None:
    """Why ``gold`` cannot be a math ground truth (``None`` if it can), without math-verify (microseconds):
    not a non-empty string, longer than MAX_GOLD_CHARS, unbalanced braces (``\\frac{1}{``, ``{70``), an
    unclosed ``\\left``/``$``, or prose (two or more plain words and no digit or LaTeX: ``some words``).
    The math worker additionally checks that math-verify parses the gold and accepts ``\\boxed{gold}``."""
    if not isinstance(gold, str):
        return f"must be a string, got {type(gold).__name__}"
    g = gold.strip()
    if not g:
        return "is empty"
    if len(g) > MAX_GOLD_CHARS:
        return f"is longer than {MAX_GOLD_CHARS} characters"
    seen = reader_text(g)
    if seen != g:  # every response is read through reader_text: such a gold could never be met as written
        return ("holds characters a reader does not see as written (invisible or control characters, non-ASCII "
                f"digits, full-width or other compatibility forms); responses are read as {seen!r:.80}: write it so")
    if re.search(r"(?<!\\)#", g):
        return "holds '#', a LaTeX parameter character and never part of a value (a raw answer line such as '#### 70'?)"
    depth = 0
    for match in re.finditer(r"\\.|[{}]", g):
        token = match.group()
        if token == "{":
            depth += 1
        elif token == "}":
            depth -= 1
            if depth < 0:
                return "has an unmatched '}'"
    if depth:
        return "has an unclosed '{'"
    if g.count("\\left") != g.count("\\right"):
        return "has unmatched \\left/\\right"
    if len(re.findall(r"(?<!\\)\$", g)) % 2:
        return "has an unclosed '$'"
    if re.search(r"\\(?:frac|dfrac|tfrac|sqrt|binom)\s*$|[\^_]\s*$|\\$", g):
        return "ends inside a command"
    if not re.search(r"[0-9\\^_=+*/()\[\]<>|]", g) and len(re.findall(r"[A-Za-z]+", g)) >= 2:
        return "is prose, not a math answer"
    return None
