"""Code verifier with LiveCodeBench's semantics (spec section 5), running model code only inside the sandbox.

* Code extraction: LCB's rule (text between the last two fence lines) on the text after ``</think>``.
* Tests: ``{inputs, outputs, fn_name}`` from :mod:`reward_fns.code_tests`; ``fn_name`` null means stdin programs.
* Comparison (done here, in the trusted process; expected outputs never enter the sandbox):
  stdin -- LCB's ``get_stripped_lines`` + per-line exact-or-``Decimal`` rule; functional -- plain ``==`` against
  ``json.loads(output)`` after LCB's top-level tuple-to-list conversion.
* Limits: ``timeout_s`` (default 6, LCB ``--timeout 6``) per test, ``(timeout_s + 1) * n + 5`` seconds overall;
  stop at the first failure; binary reward.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import math
import os
import re
import select
import threading
import time
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from .code_tests import TestsDecodeError, decode_tests
from .extract import extract_code_lcb, strip_thinking, truncate_middle
from .sandbox import IsolationReport, detect_isolation, launch

logger = logging.getLogger(__name__)

PRED_CHARS = 300
MIB = 1024 * 1024
# Harness messages nested deeper than this are never handed to json.loads (whose C recursion could exhaust the
# stack of a verl executor thread, or raise RecursionError): the harness caps return values at 150 levels.
MAX_MESSAGE_DEPTH = 200
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]+|\\.)*"|[\[\]{}]')


def json_depth_exceeds(data: bytes, limit: int = MAX_MESSAGE_DEPTH) -> bool:
    """True when the JSON text ``data`` nests arrays/objects deeper than ``limit`` (linear, no recursion)."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    depth = 0
    for match in _JSON_TOKEN.finditer(data):
        char = match.group()[0]
        if char in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return True
        elif char in (0x5D, 0x7D):
            depth -= 1
    return False


class HarnessMessageError(ValueError):
    """A message from the sandbox could not be read (too deep, not JSON): the program's fault, a verdict."""


class HarnessMessageTooLong(HarnessMessageError):
    """A message from the sandbox exceeded the output cap."""


class BadCodeGroundTruth(ValueError):
    """The tests in a ground truth are unusable (a dataset bug, never the model's fault)."""


class SandboxError(RuntimeError):
    """The sandbox failed before any model code ran (infrastructure problem; never scored as 0)."""


@dataclass(frozen=True)
class CodeLimits:
    """Per-run limits. Defaults follow LiveCodeBench (6 s per test); memory follows spec section 5 (4 GiB)."""

    timeout_s: float = 6.0
    memory_mb: int = 4096
    max_file_mb: int = 16
    max_open_files: int = 256
    max_processes: int = 64
    min_output_mb: int = 1
    max_output_mb: int = 64

    def global_timeout_s(self, n_tests: int) -> float:
        """LiveCodeBench's overall budget ``(timeout + 1) * n + 5``."""
        return (self.timeout_s + 1) * n_tests + 5

    @classmethod
    def from_env(cls, **overrides: Any) -> "CodeLimits":
        """Defaults, then ``IBPO_CODE_MEMORY_MB`` / ``IBPO_CODE_TIMEOUT_S`` from the environment, then overrides.
        Raises ``ValueError`` naming the variable when one is not a finite number > 0."""
        values: dict[str, Any] = {}
        env = (("memory_mb", "IBPO_CODE_MEMORY_MB", int), ("timeout_s", "IBPO_CODE_TIMEOUT_S", float))
        for field, name, kind in env:
            raw = os.environ.get(name)
            if not raw:
                continue
            try:
                values[field] = kind(raw)
            except ValueError as exc:
                raise ValueError(f"environment variable {name}={raw!r} is not {kind.__name__}") from exc
            if not math.isfinite(values[field]) or values[field] <= 0:
                raise ValueError(f"environment variable {name}={raw!r} must be a finite number > 0")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


@dataclass(frozen=True)
class PreparedTests:
    """Decoded, validated tests. ``inputs`` are the raw strings (stdin text, or one JSON argument per line);
    ``expected`` holds stdin strings or, for functional tests, the parsed JSON values."""

    fn_name: str | None
    inputs: tuple
    expected: tuple
    reply_caps: tuple = ()  # functional: largest reply decoded per test (see :func:`reply_cap`)

    @property
    def mode(self) -> str:
        return "stdin" if self.fn_name is None else "functional"


@functools.lru_cache(maxsize=32)  # decoded LCB tests can be tens of MB; the n samples of a prompt arrive together
def prepare_tests(ground_truth: str) -> PreparedTests:
    """Decode a code ground truth and parse functional arguments/outputs once (cached: n samples share it)."""
    try:
        tests = decode_tests(ground_truth)
    except TestsDecodeError as exc:
        raise BadCodeGroundTruth(str(exc)) from exc
    fn_name = tests["fn_name"]
    if fn_name is None:
        return PreparedTests(None, tuple(tests["inputs"]), tuple(tests["outputs"]))
    expected = []
    for i, (raw_in, raw_out) in enumerate(zip(tests["inputs"], tests["outputs"])):
        try:  # validated here; the harness parses the same text again inside the sandbox
            [json.loads(line, parse_int=_parse_json_int) for line in raw_in.split("\n")]
        except ValueError as exc:
            raise BadCodeGroundTruth(f"functional test {i}: 'inputs'[{i}] is not one JSON value per line: {exc}")
        try:
            expected.append(json.loads(raw_out, parse_int=_parse_json_int, parse_constant=_expected_constant))
        except _UnmatchableNaN:
            raise BadCodeGroundTruth(f"functional test {i}: 'outputs'[{i}] holds NaN, which no return value "
                                     f"equals (nan != nan): every response would score 0") from None
        except ValueError as exc:
            raise BadCodeGroundTruth(f"functional test {i}: 'outputs'[{i}] is not JSON: {exc}")
    caps = tuple(reply_cap(len(raw.encode("utf-8"))) for raw in tests["outputs"])
    return PreparedTests(fn_name, tuple(tests["inputs"]), tuple(expected), caps)


class _UnmatchableNaN(Exception):
    """An expected functional output holds NaN (raised by :func:`_expected_constant`)."""


def _expected_constant(name: str) -> float:
    """``Infinity`` / ``-Infinity`` in an expected output are floats a program can return; ``NaN`` is refused:
    ``prediction == expected`` is False for every prediction (LCB scores every response of the problem 0)."""
    if name == "NaN":
        raise _UnmatchableNaN
    return float(name)


def _parse_json_int(text: str) -> int:
    """``int`` for JSON numbers in expected outputs, also beyond Python's 4300-digit str->int default limit
    (LiveCodeBench raises that limit to 50000 digits process-wide; we do not touch the trainer's setting)."""
    return int(text) if len(text) <= 4000 else int(Decimal(text))


# ------------------------------------------------------------------------------------------------ comparison (LCB)
def lcb_stripped_lines(text: str) -> list[str]:
    """LCB ``get_stripped_lines``: strip the whole text, split on ``\\n``, strip each line."""
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except Exception:  # LCB: any conversion failure means "not a numeric line"
        return None


def lcb_stdout_matches(output: str, expected: str) -> bool:
    """LCB ``grade_stdio`` comparison: same number of stripped lines; each line equal as a string or, failing
    that, as a list of ``Decimal`` tokens (so ``0.5`` == ``0.50`` but there is no float tolerance)."""
    got, want = lcb_stripped_lines(output), lcb_stripped_lines(expected)
    if len(got) != len(want):
        return False
    for got_line, want_line in zip(got, want):
        if got_line == want_line:
            continue
        got_dec, want_dec = _decimals(got_line), _decimals(want_line)
        if got_dec is None or want_dec is None:
            return False
        try:
            if got_dec != want_dec:
                return False
        except Exception:  # signalling NaN comparisons raise; LCB scores that as a failure too
            return False
    return True


class _Opaque:
    """Stands for a return value of a non-builtin type: equal to nothing (its own ``__eq__`` is never run)."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


def from_wire(value: Any) -> Any:
    """Rebuild a value encoded by the harness's ``to_wire`` (lists, tuples, dicts, sets keep their types)."""
    if isinstance(value, list):
        return [from_wire(v) for v in value]
    if isinstance(value, dict):
        if "__x" in value:
            return int(value["__x"], 16)
        if "__t" in value:
            return tuple(from_wire(v) for v in value["__t"])
        if "__d" in value:
            return {_hashable(from_wire(k)): from_wire(v) for k, v in value["__d"]}
        if "__s" in value:
            return {_hashable(from_wire(v)) for v in value["__s"]}
        if "__f" in value:
            return frozenset(_hashable(from_wire(v)) for v in value["__f"])
        if "__q" in value:  # fractions.Fraction, exact
            numerator, denominator = value["__q"]
            return Fraction(int(numerator, 16), int(denominator, 16))
        if "__m" in value:  # decimal.Decimal, exact
            return Decimal(str(value["__m"])[:100000])
        if "__c" in value:
            real, imag = value["__c"]
            return complex(float(real), float(imag))
        if "__n" in value:  # a numpy scalar or one-element array
            rebuilt = _numpy_value(value["__n"])
            return _Opaque("numpy") if rebuilt is _MISSING else rebuilt
        return _Opaque(str(value.get("__o", "object")))
    return value


def _hashable(value: Any) -> Any:
    return value if not isinstance(value, (list, dict, set)) else _Opaque("unhashable")


# Bounds on what the trusted process decodes and compares (stated in the isolation report, README "Code").
# A functional reply may be at most REPLY_BYTES_PER_EXPECTED_BYTE x the expected output's JSON size plus
# REPLY_BYTES_FLOOR bytes (a right answer's encoding is within a few times the expected text: tuples, floats'
# repr); longer replies are wrong answers and are never decoded. Decoding is then linear in that size, and
# comparison never rebuilds the program's value: no set or dict is built from untrusted elements (keys that all
# hash alike cannot cost quadratic time), no Fraction is normalised (megabit gcds), no reference is expanded
# (a million references to one list arrive as a million bytes, capped above).
REPLY_BYTES_PER_EXPECTED_BYTE = 16
REPLY_BYTES_FLOOR = 64 * 1024
MAX_WIRE_TEXT = 1 << 20  # longest hex/decimal text of one number decoded in the trusted process
_MISSING = object()


def reply_cap(expected_json_bytes: int) -> int:
    """Largest functional reply (bytes on the wire) decoded for an expected output of this JSON size."""
    return REPLY_BYTES_PER_EXPECTED_BYTE * expected_json_bytes + REPLY_BYTES_FLOOR


def _wire_number(wire: Any) -> Any:
    """A number from the wire as a cheap exact Python value (int, float, Decimal, complex) or ``(n, d)`` for a
    Fraction (never normalised); ``_MISSING`` when ``wire`` is not a number."""
    if isinstance(wire, (bool, int, float)):
        return wire
    if not isinstance(wire, dict) or len(wire) != 1:
        return _MISSING
    (marker, payload), = wire.items()
    if marker == "__x" and isinstance(payload, str) and len(payload) <= MAX_WIRE_TEXT:
        return int(payload, 16)
    if marker == "__q" and isinstance(payload, list) and len(payload) == 2 \
            and all(isinstance(p, str) and len(p) <= MAX_WIRE_TEXT for p in payload):
        return (int(payload[0], 16), int(payload[1], 16))
    if marker == "__m" and isinstance(payload, str) and len(payload) <= MAX_WIRE_TEXT:
        return Decimal(payload)
    if marker == "__c" and isinstance(payload, list) and len(payload) == 2 \
            and all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in payload):
        return complex(float(payload[0]), float(payload[1]))
    return _MISSING


def _number_equals(wire: Any, expected: Any) -> bool:
    got = _wire_number(wire)
    if got is _MISSING:
        return False
    if isinstance(got, tuple):  # Fraction n/d == expected, by cross-multiplication (exact, no gcd)
        n, d = got
        if d == 0:
            return False
        if isinstance(expected, float):
            if not math.isfinite(expected):
                return False
            p, q = expected.as_integer_ratio()
        else:
            p, q = int(expected), 1
        return n * q == p * d
    return bool(got == expected)


# numpy dtypes a functional return value arrives as (the harness's numpy_to_wire writes these names), and the type
# its element has on the wire (str: any unicode width; object: a Python object, compared on its own wire)
NUMPY_WIRE_DTYPES = {"bool": bool, "int8": int, "int16": int, "int32": int, "int64": int, "uint8": int,
                     "uint16": int, "uint32": int, "uint64": int, "float16": float, "float32": float, "float64": float,
                     "longdouble": str, "complex64": complex, "complex128": complex, "str": str, "object": object}


def _numpy_value(payload: Any) -> Any:
    """The numpy scalar or one-element array the harness's ``{"__n": [form, dtype, item]}`` stands for, rebuilt
    from its dtype name and primitive element only (never from the program's objects; an object array's element
    is rebuilt with :func:`from_wire`); ``_MISSING`` for a malformed one."""
    if not (isinstance(payload, list) and len(payload) == 3 and payload[0] in ("scalar", "array")
            and payload[1] in NUMPY_WIRE_DTYPES):
        return _MISSING
    import numpy  # only here: the harness sends numpy values only from a program that imported numpy

    form, dtype, item = payload
    if dtype == "object":  # (numpy has no object scalar)
        if form != "array":
            return _MISSING
        array = numpy.empty(1, dtype=object)
        array[0] = from_wire(item)  # assigned, not converted: a list element stays one element
        return array
    value = item if NUMPY_WIRE_DTYPES[dtype] is str else _wire_number(item)
    if type(value) is not NUMPY_WIRE_DTYPES[dtype] or dtype == "longdouble" and len(value) > 100:
        return _MISSING
    scalar_type = {"str": numpy.str_, "longdouble": numpy.longdouble}.get(dtype) or numpy.dtype(dtype).type
    try:
        return scalar_type(value) if form == "scalar" else numpy.array([scalar_type(value)])
    except (OverflowError, ValueError):  # an int outside the dtype's range: no program's value
        return _MISSING


def _numpy_equals(payload: Any, expected: Any) -> bool:
    """LCB's verdict on a numpy return value, ``not (prediction == expected)`` with numpy's own ``==`` and its
    casting (``np.array([5]) == [5]``, ``np.float32(0.1) == 0.1``, ``np.int64(5) == [5]`` pass): the truth of
    a result with more than one element or none raises there (a runtime error), one element decides. The value
    is rebuilt from primitives (:func:`_numpy_value`); an object array's element is compared on its wire against
    the expected value's one element, as numpy compares object elements with Python's ``==``."""
    if isinstance(payload, list) and len(payload) == 3 and payload[1] == "object":
        element = _only_element(expected)
        return payload[0] == "array" and element is not _MISSING and wire_equals(payload[2], element)
    value = _numpy_value(payload)
    if value is _MISSING:
        return False
    try:
        return bool(value == expected)
    except (ValueError, TypeError):  # LCB: "The truth value of an array with more than one element ..." (-4)
        return False


def _only_element(expected: Any) -> Any:
    """The one element of ``expected`` as numpy converts it to an array (``[[5]]`` -> 5, a dict or scalar is
    itself), ``_MISSING`` when that array has another size (``[]``, ``[1, 2]``)."""
    while isinstance(expected, list):
        if len(expected) != 1:
            return _MISSING
        expected = expected[0]
    return expected


def _wire_key(wire: Any) -> Any:
    """A dict key or set element from the wire: only scalars can equal a JSON key; else ``_MISSING``. A numpy
    scalar is its Python value (its hash and ``==`` are its value's)."""
    if wire is None or isinstance(wire, str):
        return wire
    numpy_scalar = wire.get("__n") if isinstance(wire, dict) and len(wire) == 1 else None
    if isinstance(numpy_scalar, list) and len(numpy_scalar) == 3 and numpy_scalar[0] == "scalar":
        return _wire_key(numpy_scalar[2])
    got = _wire_number(wire)
    return _MISSING if isinstance(got, tuple) else got


def _keyed_equals(items: list, expected: Any, values: bool) -> bool:
    """Dict pairs / set elements against a TRUSTED dict/set: each untrusted key is only looked up in the
    trusted container (no container is built from untrusted keys, so colliding hashes cost nothing)."""
    if not isinstance(items, list) or len(items) != len(expected):
        return False
    used: set = set()  # holds only keys equal to expected ones (at most len(expected))
    for item in items:
        if values:
            if not (isinstance(item, list) and len(item) == 2):
                return False
            key_wire, value_wire = item
        else:
            key_wire, value_wire = item, None
        key = _wire_key(key_wire)
        if key is _MISSING or key not in expected or key in used:
            return False
        used.add(key)
        if values and not wire_equals(value_wire, expected[key]):
            return False
    return True


def wire_equals(wire: Any, expected: Any) -> bool:
    """``prediction == expected`` (Python semantics, LCB ``grade_call_based``) evaluated on the harness's wire
    encoding WITHOUT rebuilding the prediction: linear in the reply's size, bounded recursion (the reply's
    depth is capped before decoding)."""
    if isinstance(wire, dict) and len(wire) == 1 and "__n" in wire:  # numpy: its own == (LCB compares with it)
        return _numpy_equals(wire["__n"], expected)
    if expected is None:
        return wire is None
    if isinstance(expected, (bool, int, float)):
        return _number_equals(wire, expected)
    if isinstance(expected, str):
        return isinstance(wire, str) and wire == expected
    if isinstance(expected, list):
        return isinstance(wire, list) and len(wire) == len(expected) \
            and all(wire_equals(w, e) for w, e in zip(wire, expected))
    if not isinstance(wire, dict) or len(wire) != 1:
        return False
    (marker, payload), = wire.items()
    if isinstance(expected, tuple):
        return marker == "__t" and isinstance(payload, list) and len(payload) == len(expected) \
            and all(wire_equals(w, e) for w, e in zip(payload, expected))
    if isinstance(expected, dict):
        return marker == "__d" and _keyed_equals(payload, expected, values=True)
    if isinstance(expected, (set, frozenset)):
        return marker in ("__s", "__f") and _keyed_equals(payload, expected, values=False)
    return False


def functional_matches(value_wire: Any, expected: Any) -> bool:
    """LCB ``grade_call_based``: ``prediction == json.loads(output)``, decided on the wire encoding
    (:func:`wire_equals`; the program's value is never rebuilt in the trusted process)."""
    try:
        return wire_equals(value_wire, expected)
    except Exception:  # decimal.InvalidOperation (sNaN), malformed hex: never equal
        return False


# ------------------------------------------------------------------------------------------------------ running
@dataclass
class CodeRunResult:
    """Outcome of running one program against its tests."""

    verdict: str
    passed: int
    total: int
    detail: str = ""
    seconds: float = 0.0
    isolation: str = ""

    @property
    def correct(self) -> bool:
        return self.verdict == "correct"


_semaphore: threading.BoundedSemaphore | None = None
_semaphore_lock = threading.Lock()


def _sandbox_slots() -> threading.BoundedSemaphore:
    """Process-wide bound on concurrent sandboxes: ``IBPO_CODE_WORKERS`` or ``min(cpu_count, 8)``."""
    global _semaphore
    with _semaphore_lock:
        if _semaphore is None:
            n = int(os.environ.get("IBPO_CODE_WORKERS") or min(os.cpu_count() or 1, 8))
            _semaphore = threading.BoundedSemaphore(max(1, n))
        return _semaphore


def set_max_concurrent_sandboxes(n: int) -> None:
    """Replace the process-wide bound on concurrent sandboxes (benchmarks, tests; runs in flight keep theirs)."""
    global _semaphore
    if n < 1:
        raise ValueError(f"need at least one sandbox slot, got {n}")
    with _semaphore_lock:
        _semaphore = threading.BoundedSemaphore(n)


def _output_cap(expected: tuple, limits: CodeLimits) -> int:
    longest = max((len(e) for e in expected if isinstance(e, str)), default=0)
    return int(min(max(10 * longest, limits.min_output_mb * MIB), limits.max_output_mb * MIB))


# Test hook only: extra job fields (e.g. ``test_exit_check_delay_s``, a delay the harness inserts between a
# select timeout and its exit check, to prove output is drained after the child exits; ``test_after_ready_delay_s``,
# a pause of the program's process right after it says it is readable, under the monitor's first poll).
TEST_JOB_OVERRIDES: dict = {}


def _build_job(code: str, tests: PreparedTests, limits: CodeLimits) -> dict:
    n = len(tests.inputs)
    return {**TEST_JOB_OVERRIDES,
        "mode": tests.mode, "code": code, "fn_name": tests.fn_name, "inputs": list(tests.inputs),
        "timeout_s": limits.timeout_s,
        "cpu_seconds_per_test": int(math.ceil(limits.timeout_s)) + 1,
        "cpu_seconds_total": int(math.ceil(limits.global_timeout_s(n))),
        "memory_bytes": limits.memory_mb * MIB, "sample_memory_bytes": limits.memory_mb * MIB,
        "max_file_bytes": limits.max_file_mb * MIB,
        "max_open_files": limits.max_open_files, "max_processes": limits.max_processes,
        "max_output_bytes": _output_cap(tests.expected, limits) if tests.mode == "stdin" else limits.max_output_mb * MIB,
    }


class _LineReader:
    """Reads JSON lines from the harness's stdout and drains its stderr, both with a deadline."""

    def __init__(self, proc, max_line_bytes: int):
        self.out_fd, self.err_fd = proc.stdout.fileno(), proc.stderr.fileno()
        self.buffer = bytearray()
        self.stderr = bytearray()
        self.max_line_bytes = max_line_bytes
        self.eof = False

    def next(self, deadline: float) -> dict | None:
        """Next message, ``None`` on EOF; raises ``TimeoutError`` at the deadline."""
        while True:
            newline = self.buffer.find(b"\n")
            if newline > self.max_line_bytes:
                raise HarnessMessageTooLong("harness message too long")
            if newline >= 0:
                line = bytes(self.buffer[:newline])
                del self.buffer[:newline + 1]
                if json_depth_exceeds(line):
                    raise HarnessMessageError(f"result nested deeper than {MAX_MESSAGE_DEPTH} levels")
                try:
                    message = json.loads(line)
                except (RecursionError, ValueError) as exc:
                    raise HarnessMessageError(f"unreadable result: {type(exc).__name__}") from None
                if not isinstance(message, dict):
                    raise HarnessMessageError("unreadable result: not an object")
                return message
            if self.eof:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            fds = [self.out_fd] + ([self.err_fd] if self.err_fd is not None else [])
            ready, _, _ = select.select(fds, [], [], remaining)
            if not ready:
                raise TimeoutError
            for fd in ready:
                chunk = os.read(fd, 1 << 20)
                if fd == self.err_fd:
                    if not chunk:
                        self.err_fd = None
                    else:
                        self.stderr.extend(chunk)
                        del self.stderr[:-4000]
                elif not chunk:
                    self.eof = True
                else:
                    self.buffer.extend(chunk)
                    if len(self.buffer) > self.max_line_bytes and self.buffer.find(b"\n") < 0:
                        raise HarnessMessageTooLong("harness message too long")


def run_code_tests(code: str, tests: PreparedTests, limits: CodeLimits | None = None,
                   report: IsolationReport | None = None) -> CodeRunResult:
    """Run ``code`` on ``tests`` in a sandbox, comparing as each test finishes; stop at the first failure."""
    limits = limits or CodeLimits.from_env()
    report = report or detect_isolation()
    n = len(tests.inputs)
    job = _build_job(code, tests, limits)
    with _sandbox_slots():
        start = time.monotonic()
        deadline = start + limits.global_timeout_s(n)
        sandbox = launch(job, report)
        over_memory = False
        try:
            result = _drive(sandbox, job, tests, deadline, start, report)
        except SandboxError:
            raise  # the sandbox never ran the program: infrastructure, not a verdict
        except Exception as exc:  # whatever the program's output does to our handling is a verdict
            logger.warning("code verifier: handling the program's results raised %r; scored runtime_error", exc)
            result = CodeRunResult("runtime_error", 0, n, f"result handling failed: {type(exc).__name__}",
                                   round(time.monotonic() - start, 4), report.backend)
        finally:
            sandbox.kill_tree()
            try:
                over_memory = sandbox.memory_limit_hit()  # read before the cgroup is removed
            finally:
                sandbox.cleanup()
        if over_memory:  # the kernel killed inside the sample's cgroup: the sample as a whole went over
            return CodeRunResult("memory_limit", result.passed if result.verdict != "correct" else 0, n,
                                 f"the sample's memory cgroup reached its limit ({job['sample_memory_bytes'] >> 20} "
                                 f"MiB) and the kernel killed a process", result.seconds, report.backend)
        return result


def _drive(sandbox, job: dict, tests: PreparedTests, deadline: float, start: float,
           report: IsolationReport) -> CodeRunResult:
    n = len(tests.inputs)
    proc = sandbox.proc

    def result(verdict: str, passed: int, detail: str = "") -> CodeRunResult:
        return CodeRunResult(verdict, passed, n, detail, round(time.monotonic() - start, 4), report.backend)

    try:
        proc.stdin.write(json.dumps(job).encode("utf-8"))
        proc.stdin.close()
    except (BrokenPipeError, OSError) as exc:
        raise SandboxError(f"could not start the code sandbox: {exc}; stderr: {_stderr_of(proc)}") from exc
    # a test's stdout travels as base64 (4/3 of its bytes, see stdout_text); everything else is small
    reader = _LineReader(proc, max_line_bytes=job["max_output_bytes"] * 4 // 3 + MIB)
    try:
        hello = reader.next(deadline)
    except TimeoutError:
        return result("global_timeout", 0, "sandbox did not start before the global deadline")
    except HarnessMessageError as exc:
        raise SandboxError(f"code sandbox sent an unreadable start message ({report.backend}): {exc}") from exc
    if hello is None or hello.get("event") != "ready":
        raise SandboxError(f"code sandbox failed before running the program ({report.backend}); "
                           f"stderr: {reader.stderr.decode('utf-8', 'replace')[-2000:]}")
    if report.backend == "fallback" and "minimal_filesystem" in report.enforced and hello.get("mount_error"):
        # the report promises hidden host directories: never run the program without them
        raise SandboxError(f"fallback sandbox could not hide the host's directories: {hello['mount_error']}")
    if "private_keyrings" in report.enforced and not (hello.get("private_keyring")
                                                      and hello.get("keyring_syscalls_blocked")):
        raise SandboxError(f"code sandbox could not make the keyrings private: {hello.get('keyring_error', '')}"
                           f"{hello.get('seccomp_error', '')}")
    passed = 0
    while True:
        if tests.mode == "functional":  # a reply too long to be right is never read whole, nor decoded
            reader.max_line_bytes = tests.reply_caps[min(passed, n - 1)] + 4096
        try:
            message = reader.next(deadline)
        except TimeoutError:
            return result("global_timeout", passed, "overall (timeout+1)*n+5 s budget exhausted")
        except HarnessMessageTooLong as exc:
            if tests.mode == "functional":
                return result("wrong_answer", passed, f"test {passed}: return value far larger than the expected "
                                                      f"output ({exc})")
            return result("output_limit", passed, str(exc))
        except HarnessMessageError as exc:
            return result("wrong_answer" if tests.mode == "functional" else "runtime_error", passed, str(exc))
        if message is None:
            # The harness died after the program started: the program killed or crashed it.
            return result("runtime_error", passed, "sandbox harness exited unexpectedly")
        if message.get("event") == "done":
            if passed == n:
                return result("correct", passed)
            return result("runtime_error", passed, f"harness finished after {passed}/{n} tests")
        if message.get("event") != "test":
            continue
        index = message.get("i")
        if index != passed:
            return result("runtime_error", passed, f"out-of-order result for test {index}")
        status = message.get("status")
        if status != "ok":
            return result(status if status in _HARNESS_VERDICTS else "runtime_error", passed,
                          str(message.get("detail", "")))
        if tests.mode == "stdin":
            ok = lcb_stdout_matches(stdout_text(message), tests.expected[index])
        else:
            ok = functional_matches(message.get("value"), tests.expected[index])
        if not ok:
            return result("wrong_answer", passed, f"test {index}")
        passed += 1


def stdout_text(message: dict) -> str:
    """A stdin test's stdout from the harness's message: base64 of the bytes the program wrote (so that output
    under the cap is never too long as a message, whatever its bytes: as JSON text a control character takes 6
    bytes), decoded as UTF-8 with invalid bytes replaced."""
    return base64.b64decode(str(message.get("stdout_b64", "")), validate=True).decode("utf-8", "replace")


_HARNESS_VERDICTS = {"timeout", "runtime_error", "compile_error", "memory_limit", "output_limit", "killed"}


def _stderr_of(proc) -> str:
    try:
        return proc.stderr.read(4000).decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""


def code_result(correct: bool, verdict: str, pred: str) -> dict:
    """The reward dict shared by all data sources (see :data:`reward_fns.RESULT_KEYS`)."""
    return {"score": 1.0 if correct else 0.0, "acc": 1.0 if correct else 0.0,
            "pred": truncate_middle(pred, PRED_CHARS), "verdict": verdict}


def compute_code_score(solution_str: str, ground_truth: str, *, timeout_s: float | None = None,
                       memory_mb: int | None = None) -> dict:
    """Score one code response; returns ``{"score", "acc", "pred", "verdict"}`` (binary, LCB pass@1 semantics).

    Verdicts: ``correct``, ``wrong_answer``, ``no_answer`` (no fenced code block / unclosed ``<think>``),
    ``compile_error``, ``runtime_error``, ``timeout`` (a test over ``timeout_s``), ``global_timeout``,
    ``memory_limit``, ``output_limit``, ``killed`` (a program process died of SIGKILL that no limit explains: its
    own kill, one from outside, or an OOM kill where no memory cgroup counts it). Raises
    :class:`BadCodeGroundTruth` for undecodable tests.
    """
    if not isinstance(solution_str, str):
        raise TypeError(f"solution_str must be str, got {type(solution_str).__name__}")
    if not isinstance(ground_truth, str):
        raise BadCodeGroundTruth(f"code ground truth must be a str, got {type(ground_truth).__name__}")
    tests = prepare_tests(ground_truth)
    final_text = strip_thinking(solution_str)
    code = extract_code_lcb(final_text) if final_text is not None else ""
    if not code.strip():
        return code_result(False, "no_answer", "")
    run = run_code_tests(code, tests, CodeLimits.from_env(timeout_s=timeout_s, memory_mb=memory_mb))
    return code_result(run.correct, run.verdict, code)

