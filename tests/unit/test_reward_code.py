"""Code verifier: LiveCodeBench semantics (extraction, comparison, verdicts), written from lcb_runner's rules."""

import base64
import json
import math
import zlib
from decimal import Decimal
from pathlib import Path

import pytest

from reward_fns import RESULT_KEYS, UnknownDataSource, check_ground_truth, compute_score, encode_tests
from reward_fns import code_tests  # its TestsDecodeError, imported by name, would be collected as a test class
from reward_fns.code_verifier import (BadCodeGroundTruth, CodeLimits, functional_matches, lcb_stdout_matches,
                                      prepare_tests, run_code_tests)
from reward_fns.extract import extract_code_lcb

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "reward"
FAST = CodeLimits(timeout_s=2.0, memory_mb=1024)


def fenced(code: str, preamble: str = "Here is my solution.") -> str:
    return f"{preamble}\n```python\n{code}\n```\n"


def stdin_truth(pairs) -> str:
    return encode_tests({"inputs": [i for i, _ in pairs], "outputs": [o for _, o in pairs], "fn_name": None})


def functional_truth(fn_name, pairs) -> str:
    return encode_tests({"inputs": [i for i, _ in pairs], "outputs": [o for _, o in pairs], "fn_name": fn_name})


ADD = stdin_truth([("1 2\n", "3\n"), ("10 20\n", "30\n"), ("-5 5\n", "0\n")])
# Two positional arguments, one JSON value per line (LCB functional encoding).
TWO_SUM = functional_truth("twoSum", [("[2, 7, 11, 15]\n9", "[0, 1]"), ("[3, 2, 4]\n6", "[1, 2]")])


# ------------------------------------------------------------------------------------------- pure LCB rules
@pytest.mark.parametrize("output, expected, ok", [
    ("3\n", "3", True),
    ("3   \n\n\n", "\n3", True),                    # whole-text and per-line strip
    ("YES\nNO", "YES\nNO\n", True),
    ("YES\nNO\nYES", "YES\nNO", False),             # line counts differ
    ("1  2   3", "1 2 3", True),                     # numeric line: token lists compared as Decimals
    ("a  b", "a b", False),                          # non-numeric inner whitespace matters
    ("0.50", "0.5", True),
    ("0.5000000001", "0.5", False),                  # no float tolerance
    ("0.30000000000000004", "0.3", False),
    ("1e3", "1000", True),                           # Decimal('1e3') == Decimal('1000')
    ("yes", "YES", False),
    ("", "", True),
])
def test_lcb_stdout_comparison(output, expected, ok):
    assert lcb_stdout_matches(output, expected) is ok


def test_functional_comparison_keeps_builtin_equality():
    assert functional_matches([0, 1], [0, 1])
    assert functional_matches(True, True) and functional_matches(1.0, 1)
    assert not functional_matches({"__t": [0, 1]}, [0, 1])        # a nested tuple is not a list (plain ==)
    assert not functional_matches({"__o": "X"}, [0, 1])           # custom objects never match
    assert functional_matches({"__d": [[1, 2]]}, {1: 2}) and not functional_matches({"__d": [[1, 2]]}, {"1": 2})


def test_extract_code_lcb_uses_last_two_fence_lines():
    text = "```python\nprint(1)\n```\nthen\n```python\nprint(2)\n```"
    assert extract_code_lcb(text) == "print(2)"
    assert extract_code_lcb("only ```python one fence") == ""
    assert extract_code_lcb("no code") == ""


def test_prepare_tests_rejects_bad_functional_inputs():
    bad = functional_truth("f", [("[1, 2", "3")])
    with pytest.raises(BadCodeGroundTruth, match="not one JSON value per line"):
        prepare_tests(bad)
    with pytest.raises(BadCodeGroundTruth):
        prepare_tests("not base64 and not json")


@pytest.mark.parametrize("fn_name", ["not valid id", "", "class", "f(x)", 7])
def test_a_function_name_no_solution_can_define_is_a_bad_ground_truth(fn_name):
    # before: accepted, and every response then scored runtime_error (a silent 0)
    truth = json.dumps({"inputs": ["1"], "outputs": ["1"], "fn_name": fn_name})  # encode_tests refuses it too
    with pytest.raises(BadCodeGroundTruth, match="'fn_name' must be a Python identifier or null"):
        prepare_tests(truth)


@pytest.mark.parametrize("extra", ["fn-name", "func_name", "input", "output", "fnName"])
def test_a_code_ground_truth_with_an_unknown_field_is_refused_naming_it(extra):
    # before: accepted and the field ignored ('fn-name' turned a functional problem into a stdin one, so every
    # response scored 0); LiveCodeBench's input_output has exactly inputs, outputs, fn_name
    tests = {"inputs": ["[1]"], "outputs": ["1"], extra: "f"}
    packed = base64.b64encode(zlib.compress(json.dumps(tests).encode())).decode()
    for truth in (json.dumps(tests), packed):
        with pytest.raises(BadCodeGroundTruth, match=rf"unknown field\(s\) '{extra}'; the fields are "
                                                     rf"\['inputs', 'outputs', 'fn_name'\]"):
            prepare_tests(truth)
    with pytest.raises(code_tests.TestsDecodeError, match=f"unknown field\\(s\\) '{extra}'"):
        encode_tests(tests)  # the writer refuses what the reader would
    with pytest.raises(BadCodeGroundTruth, match=r"data_source='livecodebench_v6' \(index=3\), field "
                                                 r"reward_model.ground_truth: tests object has unknown field"):
        check_ground_truth("livecodebench_v6", json.dumps(tests), {"index": 3})


@pytest.mark.parametrize("output", ["NaN", "[1.5, NaN]", "{\"a\": [NaN]}"])
def test_a_functional_expected_output_holding_nan_is_refused(output):
    # before: accepted, and every response scored wrong_answer (nan != nan, in LCB too): a silent 0
    with pytest.raises(BadCodeGroundTruth, match=r"functional test 0: 'outputs'\[0\] holds NaN, which no return "
                                                 r"value equals"):
        prepare_tests(functional_truth("f", [("1", output)]))
    assert prepare_tests(functional_truth("f", [("1", "[Infinity, -Infinity]")])).expected == ([math.inf, -math.inf],)


def test_the_writer_refuses_test_values_the_reader_refuses():
    # before: encode_tests wrote a ground truth every later decode refused
    with pytest.raises(code_tests.TestsDecodeError, match=r"tests field 'outputs'\[1\] must be a string, got int"):
        encode_tests({"inputs": ["1", "2"], "outputs": ["1", 2], "fn_name": None})


# ------------------------------------------------------------------------------------------- verdict classes
@pytest.mark.parametrize("code, verdict", [
    ("a, b = map(int, input().split())\nprint(a + b)", "correct"),
    ("import sys\nfor line in sys.stdin:\n    a, b = map(int, line.split())\n    print(a + b)", "correct"),
    ("import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)", "correct"),
    ("a, b = map(int, open(0).read().split())\nprint(a + b)   ", "correct"),
    ("def main():\n    a, b = map(int, input().split())\n    print(a + b)\n\nif __name__ == '__main__':\n    main()",
     "correct"),
    ("a, b = map(int, input().split())\nprint(a + b)\nexit()\nprint('unreachable')", "correct"),
    ("import sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit(1)", "correct"),  # SystemExit swallowed
    # LCB's call_method: `except SystemExit: pass` for any code, then grades what was printed (testing_util.py)
    ("import sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit(-7)", "correct"),
    ("import sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit('bad')", "correct"),
    ("a, b = map(int, input().split())\nprint(a + b)\nquit()", "runtime_error"),  # LCB sets builtins.quit = None
    # stdout is fd 1, as on a judge (README "stdout is real too"; LCB: -4, WA, WA)
    ("import sys\na, b = map(int, input().split())\nsys.stdout.buffer.write(b'%d\\n' % (a + b))", "correct"),
    ("import os\na, b = map(int, input().split())\nos.write(1, b'%d\\n' % (a + b))", "correct"),
    ("a, b = map(int, input().split())\nprint(a - b)", "wrong_answer"),
    ("print(3)", "wrong_answer"),  # passes the first test only; stops at the first failure
    ("a, b = map(int, input().split()\nprint(a + b)", "compile_error"),
    ("a, b = map(int, input().split())\nprint((a + b) // 0)", "runtime_error"),
    ("while True:\n    pass", "timeout"),
    ("x = bytearray(1 << 40)", "memory_limit"),
])
def test_stdin_verdicts(code, verdict):
    result = compute_score("livecodebench_v6", fenced(code), ADD, code_timeout_s=2.0, code_memory_mb=1024)
    assert tuple(result) == RESULT_KEYS
    assert result["verdict"] == verdict, result
    assert result["score"] == (1.0 if verdict == "correct" else 0.0)


# The widespread fast-IO template (PyRival's FastIO), cut to what it reads of the streams: fileno() and mode.
FAST_IO = """import os, sys
from io import BytesIO, IOBase
class FastIO(IOBase):
    def __init__(self, file):
        self._fd = file.fileno()
        self.buffer = BytesIO()
        self.writable = "x" in file.mode or "r" not in file.mode
        self.write = self.buffer.write if self.writable else None
    def readline(self):
        return os.read(self._fd, 1 << 16).split(b"\\n")[0]
    def flush(self):
        if self.writable:
            os.write(self._fd, self.buffer.getvalue())
class IOWrapper(IOBase):
    def __init__(self, file):
        self.buffer = FastIO(file)
        self.flush = self.buffer.flush
        self.write = lambda s: self.buffer.write(s.encode("ascii"))
        self.readline = lambda: self.buffer.readline().decode("ascii")
sys.stdin, sys.stdout = IOWrapper(sys.stdin), IOWrapper(sys.stdout)
a, b = map(int, sys.stdin.readline().split())
print(a + b)"""


@pytest.mark.parametrize("code, inputs, output", [
    (FAST_IO, "1 2\n", "3"),  # before: AttributeError, the streams had no 'mode'
    # input is split at \n only (python3 prog.py < input; LCB's StringIO): before, \r\n and \r were read as \n
    ("import sys\nprint(len(input()), len(sys.stdin.read()))", "ab\r\ncd\rx\n", "3 5"),
    ("import sys\nprint(sys.stdin.name, sys.stdout.name, sys.stdin.mode, sys.stdout.mode)", "",
     "<stdin> <stdout> r w"),
    ("import sys\nprint(7, file=sys.__stdout__)", "", "7"),  # before: lost, sys.__stdout__ was never flushed
])
def test_std_streams_are_a_script_interpreters(code, inputs, output):
    truth = stdin_truth([(inputs, output)])
    result = compute_score("livecodebench_v6", fenced(code), truth, code_timeout_s=2.0, code_memory_mb=1024)
    assert result["verdict"] == "correct", result


def test_float_formatting_follows_decimal_rule():
    truth = stdin_truth([("1 2\n", "0.50\n")])
    assert compute_score("livecodebench_v6", fenced("print(f'{1/2:.6f}')"), truth)["verdict"] == "correct"
    assert compute_score("livecodebench_v6", fenced("print(0.1 + 0.4)"), truth)["verdict"] == "correct"
    assert compute_score("livecodebench_v6", fenced("print(0.5000001)"), truth)["verdict"] == "wrong_answer"


def test_no_code_and_unclosed_think_are_no_answer():
    assert compute_score("livecodebench_v6", "I would loop over the input.", ADD)["verdict"] == "no_answer"
    unfinished = "<think>\n```python\nprint(3)\n```\n"
    assert compute_score("livecodebench_v6", unfinished, ADD)["verdict"] == "no_answer"
    after_think = "<think>draft\n```python\nprint(0)\n```\n</think>\n" + fenced(
        "a, b = map(int, input().split())\nprint(a + b)")
    assert compute_score("livecodebench_train", after_think, ADD)["verdict"] == "correct"


SOLUTION_TWO_SUM = """class Solution:
    def twoSum(self, nums: List[int], target: int) -> List[int]:
        seen = {}
        for i, x in enumerate(nums):
            if target - x in seen:
                return [seen[target - x], i]
            seen[x] = i
"""


@pytest.mark.parametrize("code, verdict", [
    (SOLUTION_TWO_SUM, "correct"),                                       # typing names come from LCB's prefix
    (SOLUTION_TWO_SUM.replace("return [seen[target - x], i]", "return (seen[target - x], i)"), "correct"),
    (SOLUTION_TWO_SUM.replace("return [seen[target - x], i]", "return [(seen[target - x], i)][0:1]"),
     "wrong_answer"),                                                    # nested tuple != list
    (SOLUTION_TWO_SUM.replace("return [seen[target - x], i]", "return [i, seen[target - x]]"), "wrong_answer"),
    (SOLUTION_TWO_SUM.replace("def twoSum", "def two_sum"), "runtime_error"),  # missing method (LCB -4)
    (SOLUTION_TWO_SUM + "\n    def __init__(self):\n        raise ValueError('boom')", "runtime_error"),
    ("class Solution:\n    def twoSum(self, nums, target):\n        while True: pass", "timeout"),
    ("def twoSum(nums, target):\n    return [0, 1] if target == 9 else [1, 2]", "correct"),  # module function
    ("class Solution:\n    def twoSum(self, nums, target)\n        return [0, 1]", "compile_error"),
    ("class Always:\n    def __eq__(self, other): return True\n"
     "class Solution:\n    def twoSum(self, nums, target): return Always()", "wrong_answer"),
])
def test_functional_verdicts(code, verdict):
    result = compute_score("livecodebench_v6", fenced(code), TWO_SUM, code_timeout_s=2.0)
    assert result["verdict"] == verdict, result


@pytest.mark.parametrize("returned, verdict", [
    ("numpy.array([x + 1])", "correct"), ("numpy.int64(x + 1)", "correct"), ("numpy.array([[x + 1]])", "correct"),
    ("numpy.array([x + 1, 0])", "wrong_answer"),  # LCB: the truth of a two-element result raises (-4)
    ("numpy.array([x + 2])", "wrong_answer"),
])
def test_a_functional_numpy_return_value_is_judged_as_lcb_judges_it(returned, verdict):
    # before: a one-element array was an opaque object (a wrong answer) and a numpy scalar against a
    # one-element expected list was one too; LCB passes both (its == is numpy's). numpy imports in the sandbox.
    pytest.importorskip("numpy")
    truth = functional_truth("f", [("1", "2"), ("4", "[5]")])
    code = f"import numpy\ndef f(x):\n    return {returned}"
    assert compute_score("livecodebench_v6", fenced(code), truth, code_timeout_s=5.0)["verdict"] == verdict


def test_functional_float_has_no_tolerance_and_state_persists_between_calls():
    truth = functional_truth("f", [("1", "0.3"), ("2", "2")])
    float_code = "def f(x):\n    return 0.1 + 0.2 if x == 1 else 2"
    assert compute_score("livecodebench_v6", fenced(float_code), truth)["verdict"] == "wrong_answer"
    # LCB runs every call in one process on one Solution instance; so do we.
    stateful = functional_truth("count", [("0", "1"), ("0", "2"), ("0", "3")])
    code = "class Solution:\n    def __init__(self):\n        self.n = 0\n    def count(self, _):\n" \
           "        self.n += 1\n        return self.n"
    assert compute_score("livecodebench_v6", fenced(code), stateful)["verdict"] == "correct"


def test_real_lcb_row_1873_A():
    fixture = json.loads((FIXTURES / "lcb_1873_A.json").read_text())
    truth = encode_tests({k: fixture[k] for k in ("inputs", "outputs", "fn_name")})
    solution = ("t = int(input())\nfor _ in range(t):\n    s = input().strip()\n"
                "    d = sum(1 for a, b in zip(s, 'abc') if a != b)\n    print('YES' if d <= 2 else 'NO')")
    wrong = solution.replace("d <= 2", "d < 2")
    assert compute_score("livecodebench_v6", fenced(solution), truth)["verdict"] == "correct"
    assert compute_score("livecodebench_v6", fenced(wrong), truth)["verdict"] == "wrong_answer"
    assert run_code_tests(solution, prepare_tests(truth), FAST).passed == len(fixture["inputs"])


def test_dispatch_errors_name_the_problem():
    with pytest.raises(UnknownDataSource, match=r"unknown data_source 'lcb'.*livecodebench_v6"):
        compute_score("lcb", "x", ADD)
    with pytest.raises(BadCodeGroundTruth, match=r"question_id='3708'.*reward_model.ground_truth"):
        compute_score("livecodebench_v6", fenced("print(1)"), "{\"inputs\": []}", extra_info={"question_id": "3708"})


@pytest.mark.parametrize("option, value", [
    ("math_timeout_s", -1.0), ("math_timeout_s", 0), ("math_timeout_s", float("nan")), ("math_timeout_s", float("inf")),
    ("code_timeout_s", -1.0), ("code_timeout_s", float("nan")), ("code_memory_mb", 0), ("code_memory_mb", -5),
    ("code_memory_mb", 2.5), ("math_timeout_s", "5"), ("code_timeout_s", True),
])
def test_a_limit_that_is_not_positive_and_finite_raises_naming_the_option(option, value):
    # before: -1 / 0 scored every response 0 as timeout / memory_limit, NaN and inf raised deep in the pool
    samples = (("math_dapo", "\\boxed{1}", "1"), ("livecodebench_v6", fenced("print(1)"), ADD))
    for data_source, solution, truth in samples:
        with pytest.raises(ValueError, match=rf"reward_kwargs\.{option}=.*must be"):
            compute_score(data_source, solution, truth, **{option: value})


@pytest.mark.parametrize("name, raw", [("IBPO_CODE_TIMEOUT_S", "abc"), ("IBPO_CODE_TIMEOUT_S", "-1"),
                                       ("IBPO_CODE_MEMORY_MB", "0"), ("IBPO_CODE_MEMORY_MB", "1.5")])
def test_a_bad_code_limit_in_the_environment_raises_naming_it(monkeypatch, name, raw):
    monkeypatch.setenv(name, raw)
    with pytest.raises(ValueError, match=f"environment variable {name}="):
        CodeLimits.from_env()


def test_big_integers_beyond_python_str_limit():
    # ~7600 digits: over Python's default 4300-digit str<->int limit, under LCB's 50000 (Decimal is unlimited).
    big = str(Decimal(7 ** 9000))
    truth = functional_truth("pw", [("7\n9000", big)])
    ok = "class Solution:\n    def pw(self, a, b):\n        return a ** b"
    off = "class Solution:\n    def pw(self, a, b):\n        return a ** b + 1"
    assert compute_score("livecodebench_v6", fenced(ok), truth)["verdict"] == "correct"
    assert compute_score("livecodebench_v6", fenced(off), truth)["verdict"] == "wrong_answer"
    stdin = stdin_truth([("9000\n", big + "\n")])
    assert compute_score("livecodebench_v6", fenced("print(7 ** int(input()))"), stdin)["verdict"] == "correct"
    # LCB's process limit is 50000 digits: printing a longer int is a runtime error there and here.
    huge = stdin_truth([("60000\n", "1" * 60000 + "\n")])
    assert compute_score("livecodebench_v6", fenced("print(10 ** int(input()))"), huge)["verdict"] == "runtime_error"


LYING_PREFIX = "class Solution:\n    def twoSum(self, nums, target):\n        return V([9, 9])\n"
TWO_SUM_FIRST = functional_truth("twoSum", [("[2, 7, 11, 15]\n9", "[0, 1]")])


@pytest.mark.parametrize("cls, verdict", [
    # storage [9, 9]; every method that reports the value says [0, 1] (the right answer)
    ("class V(list):\n    def __iter__(self): return iter([0, 1])\n    def __len__(self): return 2\n"
     "    def __getitem__(self, i): return [0, 1][i]\n    def __eq__(self, o): return True\n"
     "    def __repr__(self): return '[0, 1]'\n", "wrong_answer"),
    ("class V(tuple):\n    def __iter__(self): return iter([0, 1])\n    def __getitem__(self, i): return [0, 1][i]\n",
     "wrong_answer"),
    ("class V(list):\n    def __init__(self, _): super().__init__([0, 1])\n"
     "    def __iter__(self): return iter([9, 9])\n", "correct"),  # storage right, __iter__ lies the other way
    ("class V(list):\n    pass\n", "wrong_answer"),
    ("class V:\n    __class__ = property(lambda self: list)\n    def __init__(self, _): pass\n"
     "    def __iter__(self): return iter([0, 1])\n", "wrong_answer"),  # not a list at all: opaque
])
def test_a_value_is_compared_by_what_it_stores_not_what_it_says(cls, verdict):
    code = cls + LYING_PREFIX
    assert compute_score("livecodebench_v6", fenced(code), TWO_SUM_FIRST, code_timeout_s=2.0)["verdict"] == verdict


@pytest.mark.parametrize("ret, verdict", [
    ("class V(int):\n    def __int__(self): return 3\n    def __index__(self): return 3\n"
     "    def __eq__(self, o): return True\n    def __repr__(self): return '3'\n    __str__ = __repr__\n", "wrong_answer"),
    ("class V(str):\n    def __str__(self): return 'abc'\n    def __eq__(self, o): return True\n", "wrong_answer"),
    ("class V(dict):\n    def items(self): return {'a': 1}.items()\n    def __iter__(self): return iter(['a'])\n"
     "    def keys(self): return ['a']\n    def __getitem__(self, k): return 1\n", "wrong_answer"),
])
def test_scalar_str_and_dict_subclasses_are_read_from_storage(ret, verdict):
    expected = {"int": "3", "str": "\"abc\"", "dict": "{\"a\": 1}"}[ret.split("(")[1].split(")")[0]]
    truth = functional_truth("f", [("0", expected)])
    stored = {"int": "V(7)", "str": "V('xyz')", "dict": "V({'b': 2})"}[ret.split("(")[1].split(")")[0]]
    code = ret + f"def f(_):\n    return {stored}\n"
    assert compute_score("livecodebench_v6", fenced(code), truth, code_timeout_s=2.0)["verdict"] == verdict
    honest = f"def f(_):\n    return {expected}\n"
    assert compute_score("livecodebench_v6", fenced(honest), truth, code_timeout_s=2.0)["verdict"] == "correct"
