"""The one encoding of code-problem tests shared by data_prep (writer) and the code verifier (reader).

Ground truth for a code row is ``base64(zlib(utf-8 JSON))`` of ``{"inputs": [...], "outputs": [...],
"fn_name": str | None}`` -- exactly LiveCodeBench's ``get_evaluation_sample()["input_output"]`` with the public
tests first. No pickle: the payload travels through Ray for every rollout and must be safe to decode.
The decoder also accepts plain JSON (small hand-written datasets).
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from keyword import iskeyword
from typing import Any


class TestsDecodeError(ValueError):
    """Raised when a code ground truth cannot be decoded into a valid test specification."""


# LiveCodeBench's ``get_evaluation_sample()["input_output"]`` has exactly these keys; ``fn_name`` may be left out
# (null: a stdin problem) in hand-written plain JSON.
TEST_FIELDS = ("inputs", "outputs", "fn_name")


def validate_tests(obj: Any) -> dict:
    """Check the ``{inputs, outputs, fn_name}`` shape; returns a normalised copy or raises ``TestsDecodeError``."""
    if not isinstance(obj, dict):
        raise TestsDecodeError(f"tests must be a JSON object, got {type(obj).__name__}")
    unknown = [key for key in obj if key not in TEST_FIELDS]
    if unknown:
        # a misspelt 'fn_name' ('fn-name', 'func_name') would turn a functional problem into a stdin one: every
        # response then scores 0
        raise TestsDecodeError(f"tests object has unknown field(s) {', '.join(repr(k) for k in unknown)}; "
                               f"the fields are {list(TEST_FIELDS)} ('fn_name' optional)")
    missing = [k for k in ("inputs", "outputs") if k not in obj]
    if missing:
        raise TestsDecodeError(f"tests object lacks field(s) {missing}; has {sorted(obj)}")
    inputs, outputs = obj["inputs"], obj["outputs"]
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise TestsDecodeError("tests fields 'inputs' and 'outputs' must be lists")
    for field, values in (("inputs", inputs), ("outputs", outputs)):
        for i, value in enumerate(values):
            if not isinstance(value, str):
                raise TestsDecodeError(f"tests field '{field}'[{i}] must be a string, got {type(value).__name__}")
    if len(inputs) != len(outputs):
        raise TestsDecodeError(f"tests have {len(inputs)} inputs but {len(outputs)} outputs")
    if not inputs:
        raise TestsDecodeError("tests have no test cases (empty 'inputs')")
    fn_name = obj.get("fn_name")
    if fn_name is not None and not (isinstance(fn_name, str) and fn_name.isidentifier() and not iskeyword(fn_name)):
        # a name no solution can define would score every response runtime_error: a silent 0
        raise TestsDecodeError(f"tests field 'fn_name' must be a Python identifier or null, got {fn_name!r:.80}")
    return {"inputs": list(inputs), "outputs": list(outputs), "fn_name": fn_name or None}


def encode_tests(obj: dict) -> str:
    """Encode a validated tests object as base64(zlib(utf-8 JSON))."""
    payload = json.dumps(validate_tests(obj), ensure_ascii=False).encode("utf-8")
    return base64.b64encode(zlib.compress(payload, 9)).decode("ascii")


def decode_tests(ground_truth: str) -> dict:
    """Decode a ground truth written by :func:`encode_tests` (or plain JSON) and validate it."""
    if not isinstance(ground_truth, str):
        raise TestsDecodeError(f"code ground truth must be a str, got {type(ground_truth).__name__}")
    text = ground_truth.strip().lstrip("\ufeff").strip()  # a UTF-8 byte-order mark written by some editors/tools
    if not text:
        raise TestsDecodeError("code ground truth is empty")
    if text.startswith("{"):
        try:
            return validate_tests(json.loads(text))
        except json.JSONDecodeError as exc:
            raise TestsDecodeError(f"code ground truth looks like JSON but does not parse: {exc}") from exc
    try:
        raw = zlib.decompress(base64.b64decode(text, validate=True))
        return validate_tests(json.loads(raw.decode("utf-8-sig")))
    except TestsDecodeError:
        raise
    except (binascii.Error, zlib.error, UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
        raise TestsDecodeError(f"code ground truth is neither JSON nor base64(zlib(JSON)): {exc}") from exc
