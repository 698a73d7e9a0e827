"""Round four of the code sandbox (issue 36): a sample cannot blind the memory monitor (a failed read refuses), cannot
reach the harness's resource limits, is bounded in CPU as a whole, and cannot push a neighbour into a time-out.

Run as root AND as an unprivileged user (both backends where they run): as root the program cannot prlimit the
harness at all (the harness keeps a saved gid no program process has); as a user it can, and the harness, which
compares its own limits at every poll, refuses the sample. The hostile neighbour is the issue's: 60 busy children
that each call ``setsid()`` (with autogrouping, 60 sessions take 60 shares of the CPUs), next to an honest
program that needs about half a second of CPU alone, on this 2-core machine.
"""

import os
import threading
import time

import pytest

from reward_fns import encode_tests
from reward_fns.code_verifier import CodeLimits, prepare_tests, run_code_tests
from reward_fns.sandbox import detect_isolation

ROOT = os.geteuid() == 0
BACKENDS = ["bwrap", "fallback"]


@pytest.fixture(autouse=True)
def no_memory_cgroup(monkeypatch):
    """The monitor is the only memory bound and CPU time over the tree the only CPU bound here (as on a machine
    without cgroups); :func:`test_a_hostile_neighbour_cannot_starve_a_sample_into_a_timeout` also runs with them."""
    from reward_fns import sandbox
    monkeypatch.setenv("IBPO_SANDBOX_CGROUP", "0")
    for cached in (sandbox.memory_cgroup_parent, sandbox.cpu_cgroup_parent, sandbox.detect_isolation):
        cached.cache_clear()
    yield
    monkeypatch.undo()
    for cached in (sandbox.memory_cgroup_parent, sandbox.cpu_cgroup_parent, sandbox.detect_isolation):
        cached.cache_clear()


def run(backend, code, inputs, outputs, limits):
    tests = prepare_tests(encode_tests({"inputs": inputs, "outputs": outputs, "fn_name": None}))
    return run_code_tests(code, tests, limits, detect_isolation(backend))


PRLIMIT = ("import os, resource\ntry:\n    resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (3, 3))\n"
           "    print('changed')\nexcept PermissionError:\n    print('blocked')\n")
# three children of 200 MiB each under a 256 MiB limit, after trying to blind the monitor with EMFILE
BLINDED_HOG = PRLIMIT + ("import time\npids = []\nfor _ in range(3):\n    p = os.fork()\n    if p == 0:\n"
                         "        b = bytearray(200 << 20)\n        for i in range(0, len(b), 4096):\n"
                         "            b[i] = 1\n        time.sleep(2)\n        os._exit(0)\n    pids.append(p)\n"
                         "for p in pids:\n    os.waitpid(p, 0)\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_program_cannot_change_the_harness_limits(backend):
    result = run(backend, PRLIMIT, [""], ["blocked"], CodeLimits(timeout_s=4.0, memory_mb=256))
    if ROOT:  # out of reach: prlimit fails with EPERM, and the honest rest of the program passes
        assert result.verdict == "correct", result
    else:     # same uid: the change is made, seen at the next poll, and the sample refused
        assert result.verdict == "runtime_error" and "resource limits" in result.detail, result


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_blinded_monitor_refuses_the_sample(backend):
    result = run(backend, BLINDED_HOG, [""], ["blocked"], CodeLimits(timeout_s=4.0, memory_mb=256))
    assert result.verdict != "correct", result
    assert result.verdict == ("memory_limit" if ROOT else "runtime_error"), result


def test_any_failed_read_of_a_live_process_refuses():
    """The harness's rule itself (loaded by path, as the sandbox runs it): EMFILE on a live process refuses; a
    process that vanished in between (ENOENT/ESRCH) is skipped."""
    import importlib.util
    from reward_fns.sandbox import HARNESS_PATH
    spec = importlib.util.spec_from_file_location("harness_under_test", HARNESS_PATH)
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    with pytest.raises(harness.Violation):
        harness.refuse_unless_gone(OSError(24, "Too many open files"), os.getpid())
    with pytest.raises(harness.Violation):
        harness.refuse_unless_gone(OSError(12, "Cannot allocate memory"), os.getpid())
    harness.refuse_unless_gone(FileNotFoundError(2, "gone"), os.getpid())
    assert harness._is_zombie(2 ** 22 + 12345)  # no such process: dead
    assert not harness._is_zombie(os.getpid())


SETSID_SPINNERS = ("import os, time\nfor _ in range(60):\n    if os.fork() == 0:\n        os.setsid()\n"
                   "        while True:\n            pass\ntime.sleep(60)\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_cpu_is_bounded_over_the_whole_tree_and_nothing_survives(backend):
    start = time.monotonic()
    result = run(backend, SETSID_SPINNERS, [""], ["x"], CodeLimits(timeout_s=2.0, memory_mb=1024))
    assert result.verdict == "timeout" and "CPU" in result.detail, result
    assert time.monotonic() - start < 30
    time.sleep(0.5)
    assert not _spinners_left(), "a setsid child of the sample survived it"


def _spinners_left() -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # a spinner: a running python process that leads its own session (sid == pid), not this one
            if int(fields[3]) == int(entry) and fields[0] == "R" and int(entry) != os.getpid() \
                    and _is_python(int(entry)):
                out.append(int(entry))
    return out


def _is_python(pid: int) -> bool:
    try:
        return "python" in os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False


def _victim() -> tuple[str, str]:
    """An honest program that needs about 1 s of CPU alone here, and its expected output."""
    n, t0 = 200000, time.process_time()
    while time.process_time() - t0 < 0.05:
        s = sum(i * i % 7 for i in range(n))
        n *= 2
    n = int(n / 2 * 1.0 / max(time.process_time() - t0, 1e-3) * 2)
    code = f"print(sum(i * i % 7 for i in range({n})))"
    return code, str(sum(i * i % 7 for i in range(n)))


@pytest.mark.parametrize("cgroups", [False, True], ids=["tree-cpu", "cgroups-where-available"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hostile_neighbour_cannot_starve_a_sample_into_a_timeout(backend, cgroups, monkeypatch):
    if cgroups:
        from reward_fns import sandbox
        monkeypatch.delenv("IBPO_SANDBOX_CGROUP")
        for cached in (sandbox.memory_cgroup_parent, sandbox.cpu_cgroup_parent, sandbox.detect_isolation):
            cached.cache_clear()
    victim_code, expected = _victim()
    limits = CodeLimits(timeout_s=3.0, memory_mb=1024)  # the spinners would hold both cores for 3 s of wall time
    results = {}

    def hostile():
        results["hostile"] = run(backend, SETSID_SPINNERS, [""], ["x"], limits)

    thread = threading.Thread(target=hostile)
    thread.start()
    time.sleep(0.7)  # the 60 spinners are running
    results["victim"] = run(backend, victim_code, [""], [expected], limits)
    thread.join(120)
    assert results["victim"].verdict == "correct", results
    assert results["hostile"].verdict == "timeout", results
