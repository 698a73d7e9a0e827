"""WorkerPool mechanics with a small real worker program: deadline kill and replacement, crashes, the bound on
live workers under 16 threads, and start-up failures that must raise instead of scoring 0."""

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from reward_fns.worker_pool import WorkerDied, WorkerPool, WorkerStartError, WorkerTimeout

WORKER = r"""
import json, os, sys, time
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "hang":
        time.sleep(3600)
    if req["op"] == "crash":
        os._exit(3)
    if req["op"] == "sleep":
        time.sleep(req["s"])
    print(json.dumps({"pid": os.getpid(), "echo": req.get("x")}), flush=True)
"""


def make_pool(n=2, **kw):
    return WorkerPool([sys.executable, "-c", WORKER], max_workers=n, name="test", **kw)


def test_timeout_kills_and_replaces_the_worker():
    pool = make_pool(1)
    try:
        first = pool.call({"op": "echo", "x": 1}, timeout_s=10)["pid"]
        start = time.monotonic()
        with pytest.raises(WorkerTimeout):
            pool.call({"op": "hang"}, timeout_s=0.5)
        assert time.monotonic() - start < 2.0
        assert pool.size == 0 and pool.stats["killed_timeout"] == 1
        second = pool.call({"op": "echo", "x": 2}, timeout_s=10)
        assert second["echo"] == 2 and second["pid"] != first
    finally:
        pool.close()


def test_crash_raises_worker_died_and_pool_recovers():
    pool = make_pool(1)
    try:
        with pytest.raises(WorkerDied):
            pool.call({"op": "crash"}, timeout_s=10)
        assert pool.call({"op": "echo", "x": 3}, timeout_s=10)["echo"] == 3
    finally:
        pool.close()


def test_sixteen_threads_never_exceed_max_workers():
    pool = make_pool(2)
    peak = []
    lock = threading.Lock()

    def one(i):
        reply = pool.call({"op": "sleep", "s": 0.05, "x": i}, timeout_s=30)
        with lock:
            peak.append(pool.size)
        return reply["echo"]

    try:
        with ThreadPoolExecutor(max_workers=16) as ex:
            assert sorted(ex.map(one, range(32))) == list(range(32))
        assert max(peak) <= 2 and pool.stats["started"] == 2
    finally:
        pool.close()


def test_recycles_after_max_requests():
    pool = make_pool(1, max_requests_per_worker=3)
    try:
        pids = {pool.call({"op": "echo"}, timeout_s=10)["pid"] for _ in range(6)}
        assert len(pids) == 2
    finally:
        pool.close()


def test_start_failure_raises_with_stderr():
    # the error's cause is in the worker's stderr (the argv alone names the module, not the exception)
    pool = WorkerPool([sys.executable, "-c", "import no_such_module_xyz"], max_workers=1, name="broken")
    with pytest.raises(WorkerStartError, match=r"(?s)stderr:.*ModuleNotFoundError: No module named 'no_such_module_xyz'"):
        pool.call({"op": "echo"}, timeout_s=5)
    pool.close()


def test_start_failure_stderr_is_read_without_waiting_for_a_child_holding_the_pipe():
    # a grandchild keeps the worker's stderr (not its stdout) open for 30 s: the worker's exit is seen at once and
    # the error comes now, with what was written (a blocking read of stderr would wait for the grandchild)
    code = ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'], "
            "stdout=subprocess.DEVNULL); sys.stderr.write('cause: bad config' + chr(10)); sys.stderr.flush(); "
            "sys.exit(2)")
    pool = WorkerPool([sys.executable, "-c", code], max_workers=1, name="broken", startup_timeout_s=20)
    start = time.monotonic()
    with pytest.raises(WorkerStartError, match=r"WorkerDied.*stderr: cause: bad config"):
        pool.call({"op": "echo"}, timeout_s=5)
    assert time.monotonic() - start < 10  # not the 20 s start-up timeout, nor the grandchild's 30 s
    pool.close()


def test_external_kill_reports_the_signal():
    import os
    import signal
    pool = make_pool(1)
    try:
        pid = pool.call({"op": "echo"}, timeout_s=10)["pid"]
        killer = threading.Timer(0.3, os.kill, (pid, signal.SIGKILL))
        killer.start()
        with pytest.raises(WorkerDied) as info:
            pool.call({"op": "sleep", "s": 5}, timeout_s=10)
        killer.join()
        assert info.value.signal == signal.SIGKILL and info.value.returncode == -signal.SIGKILL
        with pytest.raises(WorkerDied) as crashed:
            pool.call({"op": "crash"}, timeout_s=10)
        assert crashed.value.signal is None and crashed.value.returncode == 3
    finally:
        pool.close()
