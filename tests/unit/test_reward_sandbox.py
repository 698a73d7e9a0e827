"""Adversarial suite for the code sandbox, plus a 16-thread concurrency test of ``compute_score``.

Every hostile program must end with score 0 within LiveCodeBench's time bound and leave the host unchanged: no
canary touched, no connection made, no secret read, no process left behind, the test process alive. The suite
runs on bubblewrap (CI installs it; a machine without it fails here, by design) and, as root, also on the
fallback backend for the protections that backend claims (``IsolationReport.enforced``).
"""

import os
import secrets
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from reward_fns import compute_score, encode_tests
from reward_fns.code_verifier import CodeLimits, prepare_tests, run_code_tests
from reward_fns.math_verifier import get_math_pool
from reward_fns.sandbox import SANDBOX_UID_BASE, SANDBOX_UID_SPAN, detect_isolation

LIMITS = CodeLimits(timeout_s=2.0, memory_mb=1024)
BACKENDS = ["bwrap"] + (["fallback"] if os.geteuid() == 0 else [])


def sandbox_processes() -> list[int]:
    """Pids of processes running as any per-run sandbox uid."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                uid_line = next(line for line in fh if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        uid = int(uid_line.split()[1])
        if SANDBOX_UID_BASE <= uid < SANDBOX_UID_BASE + SANDBOX_UID_SPAN:
            pids.append(int(entry))
    return pids


def child_pids() -> set[int]:
    me = os.getpid()
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me and fields[0] != "Z":
                out.add(int(entry))
    return out


def run_hostile(backend: str, code: str, stdin_text: str = "", expected: str = "impossible\n"):
    report = detect_isolation(backend)
    tests = prepare_tests(encode_tests({"inputs": [stdin_text], "outputs": [expected], "fn_name": None}))
    before = child_pids()
    start = time.monotonic()
    result = run_code_tests(code, tests, LIMITS, report)
    elapsed = time.monotonic() - start
    assert not result.correct, result
    assert elapsed <= LIMITS.global_timeout_s(1) + 2, (elapsed, result)
    deadline = time.monotonic() + 3
    while (sandbox_processes() or child_pids() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes() == [], "processes of a sandbox uid survived the run"
    assert child_pids() - before == set(), "the run left child processes behind"
    return result, report


@pytest.mark.parametrize("backend", BACKENDS)
def test_fork_bomb(backend):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result, _ = run_hostile(backend, code)
    assert result.verdict in ("timeout", "runtime_error", "memory_limit")


@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_bomb(backend):
    code = "chunks = []\nwhile True:\n    chunks.append(b'x' * (1 << 24))"
    result, _ = run_hostile(backend, code)
    assert result.verdict == "memory_limit"


@pytest.mark.parametrize("backend", BACKENDS)
def test_infinite_loop_and_ignored_sigterm(backend):
    code = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass"
    result, _ = run_hostile(backend, code)
    assert result.verdict == "timeout"


@pytest.mark.parametrize("backend", BACKENDS)
def test_output_flood(backend):
    result, _ = run_hostile(backend, "while True:\n    print('x' * 100000)")
    assert result.verdict == "output_limit"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("char", ["\\x01", "\\\\", "\\u00e9", "x"])
def test_output_under_the_cap_is_compared_whatever_its_bytes(backend, char):
    # before: 1 MiB of control characters (6 bytes each as JSON text) made the harness's message too long:
    # output_limit, though the output was within its 1 MiB cap
    truth = encode_tests({"inputs": [""], "outputs": ["1"], "fn_name": None})
    code = f"import sys\nsys.stdout.buffer.write('{char}'.encode() * ((1 << 20) // len('{char}'.encode())))"
    assert run_code_tests(code, prepare_tests(truth), LIMITS, detect_isolation(backend)).verdict == "wrong_answer"
    over = code.replace("(1 << 20)", "((1 << 20) + 2)")
    assert run_code_tests(over, prepare_tests(truth), LIMITS, detect_isolation(backend)).verdict == "output_limit"


@pytest.mark.parametrize("backend", BACKENDS)
def test_escaped_children_are_killed(backend):
    code = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n"
            "    os._exit(0)\nprint('bye')")
    run_hostile(backend, code)  # run_hostile asserts that nothing survives


@pytest.mark.parametrize("backend", BACKENDS)
def test_files_outside_the_sandbox_are_untouched(backend, tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("original")
    victim = tmp_path / "delete_me.txt"
    victim.write_text("keep")
    escape = f"/tmp/ibpo_escape_{secrets.token_hex(4)}"
    code = (
        "import os, shutil\npaths = [l.strip() for l in open(0)]\n"
        "for act in (lambda: open(paths[0], 'w').write('pwned'), lambda: os.remove(paths[1]),\n"
        "            lambda: open(paths[2], 'w').write('x'), lambda: open('/etc/ibpo_escape', 'w').write('x'),\n"
        "            lambda: shutil.rmtree(os.path.dirname(paths[0]))):\n"
        "    try:\n        act()\n    except Exception as e:\n        print(type(e).__name__)\n"
        "open('inside.txt', 'w').write('allowed')\nprint(open('inside.txt').read())")
    result, report = run_hostile(backend, code, f"{canary}\n{victim}\n{escape}\n")
    assert canary.read_text() == "original"
    assert victim.read_text() == "keep"
    assert not os.path.exists("/etc/ibpo_escape")
    if "readonly_filesystem" in report.enforced:
        assert not os.path.exists(escape)
    else:  # the fallback says so instead of pretending
        assert "readonly_filesystem" in report.missing
        if os.path.exists(escape):
            os.remove(escape)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_network(backend):
    accepted = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    stop = threading.Event()

    def accept_loop():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                accepted.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept_loop, daemon=True)
    thread.start()
    code = ("import socket\nport = int(input())\nfor host in ('127.0.0.1', '8.8.8.8'):\n    try:\n"
            "        socket.create_connection((host, port if host == '127.0.0.1' else 53), timeout=1)\n"
            "        print('CONNECTED')\n    except OSError as e:\n        print('blocked')")
    try:
        result, _ = run_hostile(backend, code, f"{port}\n", expected="CONNECTED\nCONNECTED\n")
    finally:
        stop.set()
        thread.join()
        server.close()
    assert accepted == []
    assert result.verdict == "wrong_answer"


@pytest.mark.parametrize("backend", BACKENDS)
def test_cannot_signal_the_trainer(backend):
    pool = get_math_pool()
    pool.warm_up(1)
    workers = pool.worker_pids()
    targets = [os.getpid(), *workers]
    code = ("import os, signal\ntargets = [int(x) for x in input().split()]\n"
            "for pid in targets + [os.getppid(), 1]:\n    for sig in (signal.SIGKILL, signal.SIGTERM):\n"
            "        try:\n            os.kill(pid, sig)\n        except OSError:\n            pass\n"
            "try:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\nprint('done')")
    result, _ = run_hostile(backend, code, " ".join(map(str, targets)) + "\n")
    for pid in workers:
        os.kill(pid, 0)  # raises if the worker died
    assert result.verdict in ("wrong_answer", "runtime_error")


@pytest.mark.parametrize("backend", BACKENDS)
def test_secrets_in_environment_and_proc_are_unreadable(backend, monkeypatch):
    secret = "ibposecret" + secrets.token_hex(8)
    monkeypatch.setenv("IBPO_TEST_SECRET", secret)
    code = (
        "import os, glob\nfound = [v for v in os.environ.values() if v.startswith('ibposecret')]\n"
        "for path in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline'):\n    try:\n"
        "        data = open(path, 'rb').read().decode('utf-8', 'replace')\n    except Exception:\n        continue\n"
        "    for part in data.replace('\\0', ' ').split():\n"
        "        if part.startswith('ibposecret'):\n            found.append(part.split('=')[-1])\n"
        "print(found[0] if found else 'nothing')")
    # The expected output *is* the secret: finding it would score 1.
    result, _ = run_hostile(backend, code, expected=secret + "\n")
    assert result.verdict == "wrong_answer"


@pytest.mark.parametrize("backend", BACKENDS)
def test_expected_outputs_are_not_reachable(backend):
    token = "tok" + secrets.token_hex(12)
    code = (
        "import gc, os, sys\nhits = [o for o in gc.get_objects() if isinstance(o, str) and o.startswith('tok')]\n"
        "for d in ('.', '/tmp', '/proc/self/fd'):\n    try:\n        names = os.listdir(d)\n    except OSError:\n"
        "        continue\n    for n in names:\n        if d == '/proc/self/fd' and n in ('1', '2'):\n            continue\n"
        "        try:\n            hits.append(open(os.path.join(d, n)).read())\n"
        "        except Exception:\n            pass\n"
        "try:\n    hits.append(open(f'/proc/{os.getppid()}/environ').read())\nexcept Exception:\n    pass\n"
        "hits = [h for h in hits if 'tok' in h]\nprint(hits[0].strip() if hits else 'none')")
    result, _ = run_hostile(backend, code, expected=token + "\n")
    assert result.verdict == "wrong_answer"


@pytest.mark.parametrize("backend", BACKENDS)
def test_huge_recursion(backend):
    code = "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1) + 1\nprint(f(0))"
    result, _ = run_hostile(backend, code)
    # Python 3.11 keeps Python frames off the C stack: the recursion grows the heap until a limit stops it.
    assert result.verdict in ("runtime_error", "memory_limit", "timeout")


def test_stopping_the_harness_hits_the_global_timeout():
    code = "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\nprint('x')"
    limits = CodeLimits(timeout_s=0.5, memory_mb=1024)
    tests = prepare_tests(encode_tests({"inputs": [""], "outputs": ["x"], "fn_name": None}))
    start = time.monotonic()
    result = run_code_tests(code, tests, limits, detect_isolation("bwrap"))
    assert result.verdict == "global_timeout"
    assert time.monotonic() - start <= limits.global_timeout_s(1) + 2
    deadline = time.monotonic() + 3
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes() == []


def test_bwrap_report_is_complete_as_root():
    report = detect_isolation("bwrap")
    assert report.backend == "bwrap"
    if os.geteuid() == 0:
        assert report.complete, report.describe()


def test_fallback_report_names_what_it_lacks():
    report = detect_isolation("fallback")
    assert report.backend == "fallback"
    lacking = {"pid_namespace", "readonly_filesystem"}
    if not report.is_root:  # as root the harness hides every other top-level directory in its mount namespace
        lacking |= {"hidden_home", "minimal_filesystem", "private_uid"}
    else:
        assert {"hidden_home", "minimal_filesystem", "private_keyrings"} <= set(report.enforced)
    assert lacking <= set(report.missing)
    assert "MISSING" in report.describe()


def test_sixteen_threads_mixed_sources():
    add = encode_tests({"inputs": ["1 2\n", "4 5\n"], "outputs": ["3\n", "9\n"], "fn_name": None})
    mul = encode_tests({"inputs": ["2\n3", "4\n5"], "outputs": ["6", "20"], "fn_name": "mul"})
    good_add = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    good_mul = "```python\nclass Solution:\n    def mul(self, a, b):\n        return a * b\n```"
    jobs = []
    for i in range(32):
        kind = i % 4
        if kind == 0:
            jobs.append((("aime25", f"\\boxed{{{i}}}", str(i)), 1.0))
        elif kind == 1:
            jobs.append((("math_dapo", f"Answer: {i + 1}", str(i)), 0.0))
        elif kind == 2:
            jobs.append((("livecodebench_v6", good_add if i % 8 == 2 else good_add.replace("a + b", "a - b"), add),
                         1.0 if i % 8 == 2 else 0.0))
        else:
            jobs.append((("livecodebench_train", good_mul, mul), 1.0))
    with ThreadPoolExecutor(max_workers=16) as executor:
        results = list(executor.map(lambda job: compute_score(*job[0]), jobs))
    assert [r["score"] for r in results] == [want for _, want in jobs]
    assert len({tuple(r) for r in results}) == 1  # identical keys for every data source


def test_auto_without_bwrap_falls_back_with_a_warning(monkeypatch, caplog):
    import logging

    import reward_fns.sandbox as sandbox_module
    from reward_fns.sandbox import SandboxUnavailable

    monkeypatch.setattr(sandbox_module.shutil, "which", lambda name, path=None: None)
    detect_isolation.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="reward_fns.sandbox"):
            report = detect_isolation("auto")
        assert report.backend == "fallback" and "not installed" in report.note
        assert any("MISSING" in rec.getMessage() and "bubblewrap" in rec.getMessage() for rec in caplog.records)
        with pytest.raises(SandboxUnavailable, match="not installed"):
            detect_isolation("bwrap")
    finally:
        detect_isolation.cache_clear()
