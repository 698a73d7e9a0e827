"""Prompt templates, verbatim from their sources (``data_prep/README.md``, "Prompts").

Math sets (AIME, HMMT, DAPO-Math, GSM8K) share one pair of templates so that training and evaluation
prompts look alike: ``boxed`` (default; the answer goes in ``\\boxed{}``) and ``dapo`` (the
DAPO-Math-17k wording; the answer goes on a final ``Answer:`` line). The math verifier accepts both.
Code sets use LiveCodeBench's official generic prompt (``lcb_runner/prompts/code_generation.py`` at
LiveCodeBench@28fef95).
"""

from __future__ import annotations

MATH_TEMPLATES = ("boxed", "dapo")

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'

# LiveCodeBench PromptConstants (LiveCodeBench@28fef95).
LCB_SYSTEM_MESSAGE_GENERIC = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will "
    "generate a correct Python program that matches the specification and passes all tests."
)
LCB_FORMAT_WITH_STARTER_CODE = (
    "You will use the following starter code to write the solution to the problem and enclose your code "
    "within delimiters."
)
LCB_FORMAT_WITHOUT_STARTER_CODE = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on "
    "the sample inputs). Enclose your code within delimiters as follows. Ensure that when the python program "
    "runs, it reads the inputs, runs the algorithm and writes output to STDOUT."
)

# `chat`: system + user turn (LCB's OpenAIChat style). `single_turn`: the system text prefixed to the user
# turn (LCB's style for reasoning models, OpenAIReasonPreview), for chat templates that drop system turns.
CODE_PROMPT_STYLES = ("chat", "single_turn")


def render_math_prompt(problem: str, template: str) -> str:
    """The user-turn text for a math problem under ``template`` (``boxed`` or ``dapo``)."""
    if template == "boxed":
        return f"{problem}\n\n{BOXED_INSTRUCTION}"
    if template == "dapo":
        return f"{DAPO_PREFIX}{problem}{DAPO_SUFFIX}"
    raise ValueError(f"unknown math template {template!r}; choose one of {MATH_TEMPLATES}")


def strip_dapo_template(text: str) -> str | None:
    """The bare problem inside a DAPO-templated prompt, or ``None`` if ``text`` is not in that template."""
    if text.startswith(DAPO_PREFIX) and text.endswith(DAPO_SUFFIX):
        return text[len(DAPO_PREFIX) : len(text) - len(DAPO_SUFFIX)]
    return None


def lcb_question_prompt(question_content: str, starter_code: str) -> str:
    """LiveCodeBench ``get_generic_question_template_answer``: the user-turn body for one problem."""
    prompt = f"### Question:\n{question_content}\n\n"
    if starter_code:
        prompt += f"### Format: {LCB_FORMAT_WITH_STARTER_CODE}\n"
        prompt += f"```python\n{starter_code}\n```\n\n"
    else:
        prompt += f"### Format: {LCB_FORMAT_WITHOUT_STARTER_CODE}\n"
        prompt += "```python\n# YOUR CODE HERE\n```\n\n"
    prompt += "### Answer: (use the provided format with backticks)\n\n"
    return prompt


def lcb_messages(question_content: str, starter_code: str, style: str = "chat") -> list[dict[str, str]]:
    """Chat messages for a LiveCodeBench problem in one of :data:`CODE_PROMPT_STYLES`."""
    body = lcb_question_prompt(question_content, starter_code)
    if style == "chat":
        return [
            {"role": "system", "content": LCB_SYSTEM_MESSAGE_GENERIC},
            {"role": "user", "content": body},
        ]
    if style == "single_turn":
        return [{"role": "user", "content": LCB_SYSTEM_MESSAGE_GENERIC + "\n\n" + body}]
    raise ValueError(f"unknown code prompt style {style!r}; choose one of {CODE_PROMPT_STYLES}")
