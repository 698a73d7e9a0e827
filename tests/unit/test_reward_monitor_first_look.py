"""The memory monitor reads every program process from its first poll on (reward_fns/README.md, "a process the
monitor cannot read is refused"). A fresh fork of the harness is not readable until it drops the harness's saved
gid and makes itself dumpable; the harness waits for the program's word that it has (``fork_program``) and
polls at once. Here the program's process pauses right after its word, so the monitor's first poll always lands
in the rest of its setup: a process that said so too early is refused (``runtime_error``) on every run, not
once in a few hundred under load as before (CI saw ``for line in sys.stdin`` scored ``runtime_error``)."""

import os

import pytest

from reward_fns import code_verifier, encode_tests
from reward_fns.code_verifier import CodeLimits, prepare_tests, run_code_tests
from reward_fns.sandbox import detect_isolation

BACKENDS = ["bwrap"] + (["fallback"] if os.geteuid() == 0 else [])
LIMITS = CodeLimits(timeout_s=4.0, memory_mb=512)
STDIN = prepare_tests(encode_tests({"inputs": ["1 2\n", "10 20\n"], "outputs": ["3\n", "30\n"], "fn_name": None}))
FUNCTIONAL = prepare_tests(encode_tests({"inputs": ["1\n2", "10\n20"], "outputs": ["3", "30"], "fn_name": "add"}))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("code, tests", [
    ("import sys\nfor line in sys.stdin:\n    a, b = map(int, line.split())\n    print(a + b)", STDIN),
    ("class Solution:\n    def add(self, a, b):\n        return a + b", FUNCTIONAL),
], ids=["stdin", "functional"])
def test_the_program_is_readable_at_the_monitors_first_poll(backend, code, tests, monkeypatch):
    monkeypatch.setitem(code_verifier.TEST_JOB_OVERRIDES, "test_after_ready_delay_s", 0.3)
    result = run_code_tests(code, tests, LIMITS, detect_isolation(backend))
    assert result.verdict == "correct", result
