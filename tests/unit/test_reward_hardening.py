"""Hostile classes 6-11 of the code verifier: crashes from output decoding, whole-sample limits, interpreters
in hidden directories, host visibility, LCB semantics, and the start-up self-test. Run under both backends
(bwrap; the fallback as root)."""

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import reward_fns
from reward_fns import compute_score, encode_tests, self_test
from reward_fns.code_verifier import CodeLimits, json_depth_exceeds, prepare_tests, run_code_tests
from reward_fns.sandbox import MemoryCgroup, cpu_cgroup_parent, detect_isolation, memory_cgroup_parent

REPO = Path(__file__).resolve().parents[2]
BACKENDS = ["bwrap"] + (["fallback"] if os.geteuid() == 0 else [])
LIMITS = CodeLimits(timeout_s=4.0, memory_mb=512)


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def run(backend, code, inputs, outputs, fn_name=None, limits=LIMITS):
    tests = prepare_tests(encode_tests({"inputs": inputs, "outputs": outputs, "fn_name": fn_name}))
    return run_code_tests(code, tests, limits, detect_isolation(backend))


# ----------------------------------------------------------------------------------------- 6. crash
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", ["list", "dict", "tuple"])
def test_deeply_nested_return_value_is_a_verdict(backend, shape):
    build = {"list": "v = [v]", "dict": "v = {'k': v}", "tuple": "v = (v,)"}[shape]
    code = f"def f(x):\n    v = 0\n    for _ in range(3000):\n        {build}\n    return v"
    result = run(backend, code, ["1"], ["0"], fn_name="f")
    assert result.verdict == "wrong_answer", result
    # Through compute_score: nothing raises out of it.
    truth = encode_tests({"inputs": ["1"], "outputs": ["[[[0]]]"], "fn_name": "f"})
    assert compute_score("livecodebench_v6", fenced(code), truth)["verdict"] == "wrong_answer"


def test_moderately_nested_return_value_still_compares():
    nested = "[" * 40 + "1" + "]" * 40
    code = "def f(x):\n    v = 1\n    for _ in range(40):\n        v = [v]\n    return v"
    truth = encode_tests({"inputs": ["1"], "outputs": [nested], "fn_name": "f"})
    assert compute_score("livecodebench_v6", fenced(code), truth)["verdict"] == "correct"


def test_json_depth_scan():
    assert not json_depth_exceeds(b'{"a": [1, 2, [3]]}')
    assert json_depth_exceeds(b"[" * 300 + b"]" * 300)
    assert not json_depth_exceeds(b'"' + b"[" * 300 + b'"')  # brackets inside strings do not nest
    assert not json_depth_exceeds(b'["\\"[[[", ' + b"[1], " * 300 + b"0]")


# ---------------------------------------------------------------------------- 7. whole-sample limits
FORK_CHILDREN = """import os, time
pids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        block = bytearray(300 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(1.5)
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
print(42)"""

SYSV = """import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
for _ in range(3):
    shmid = libc.shmget(0, 256 << 20, 0o1600)
    if shmid < 0:
        continue
    addr = libc.shmat(shmid, None, 0)
    if addr not in (None, ctypes.c_void_p(-1).value):
        ctypes.memset(addr, 1, 256 << 20)
        libc.shmdt(ctypes.c_void_p(addr))
print(42)"""

MEMFDS = """import os, time
fds = []
chunk = b'x' * (16 << 20)
for i in range(40):
    try:
        fd = os.memfd_create(f'm{i}')
        os.write(fd, chunk)
        fds.append(fd)
    except OSError:
        pass
time.sleep(0.5)
print(42)"""


def sysv_ids() -> set[int]:
    with open("/proc/sysvipc/shm") as fh:
        next(fh)
        return {int(line.split()[1]) for line in fh if line.strip()}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name, code", [("forked_children", FORK_CHILDREN), ("sysv_segments", SYSV),
                                        ("memfds", MEMFDS)])
def test_memory_is_limited_for_the_whole_sample(backend, name, code):
    report = detect_isolation(backend)
    assert "sample_memory_limit" in report.enforced, report.describe()
    assert "memory" in report.limit_mechanisms and "per process" in report.limit_mechanisms["memory"]
    before = sysv_ids()
    result = run(backend, code, [""], ["42"])
    assert result.verdict == "memory_limit", result
    assert sysv_ids() - before == set(), "SysV segments outlived the run on the host"


# Three children that try to make themselves unreadable (non-dumpable), touch 250 MiB each and exit as soon as all
# three hold it: 750 MiB at once under a 512 MiB limit, for a moment far shorter than the monitor's grace.
BURST = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r, w = os.pipe()
go_r, go_w = os.pipe()
kids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
        b = bytearray(250 << 20)
        for i in range(0, len(b), 4096):
            b[i] = 1
        os.write(w, b"x")
        os.read(go_r, 1)
        os._exit(0)
    kids.append(pid)
got = 0
while got < 3:
    got += len(os.read(r, 3 - got))
os.write(go_w, b"xxx")
for pid in kids:
    os.waitpid(pid, 0)
print(42)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_short_unreadable_burst_over_the_limit_is_memory_limit(backend):
    result = run(backend, BURST, [""], ["42"])
    assert result.verdict in ("memory_limit", "runtime_error") and result.verdict != "correct", result
    if memory_cgroup_parent() is not None:
        assert result.verdict == "memory_limit", result
        parent = memory_cgroup_parent()[0]
        assert not [d for d in os.listdir(parent) if d.startswith("ibpo-sample-")], "a sample's cgroup was left"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_program_cannot_make_itself_unreadable(backend):
    """seccomp refuses prctl(PR_SET_DUMPABLE, 0) (EPERM = 1): every process stays readable by the monitor."""
    if not sys.platform.startswith("linux") or os.uname().machine != "x86_64":
        pytest.skip("the seccomp filter is x86_64 only")
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.prctl(4, 0, 0, 0, 0), ctypes.get_errno())")
    assert run(backend, code, [""], ["-1 1"]).verdict == "correct"


@pytest.mark.skipif(memory_cgroup_parent() is None, reason="no writable memory cgroup on this machine")
def test_the_memory_cgroup_is_a_kernel_bound_on_all_processes_together():
    """Whatever reads the processes: two processes of 300 MiB each under a 512 MiB cgroup (+ slack) are killed by
    the kernel, the OOM kill is counted, and the cgroup is removed afterwards."""
    parent, _ = memory_cgroup_parent()
    cgroup = MemoryCgroup(parent, memory_cgroup_parent()[1], 512 << 20)
    hog = ("import os\nos.fork()\nb = bytearray(300 << 20)\n"
           "for i in range(0, len(b), 4096):\n    b[i] = 1\nimport time\ntime.sleep(0.2)\n")
    proc = subprocess.run(cgroup.wrap([sys.executable, "-I", "-S", "-c", hog]), timeout=60)
    try:
        assert cgroup.oom_kills() >= 1, proc.returncode
    finally:
        cgroup.kill_all()
        cgroup.remove()
    assert not os.path.exists(cgroup.path)
    small = MemoryCgroup(parent, memory_cgroup_parent()[1], 512 << 20)
    try:
        subprocess.run(small.wrap([sys.executable, "-I", "-S", "-c", "b = bytearray(200 << 20)"]), timeout=60,
                       check=True)
        assert small.oom_kills() == 0
    finally:
        small.remove()


# A SIGKILL names its cause only where it is known (RLIMIT_CPU's hard limit: timeout; an OOM kill counted by the
# sample's memory cgroup: memory_limit); otherwise it is "killed", never a memory limit no one reached.
SELF_KILLS = [
    ("stdin", "import os\nprint(42, flush=True)\nos.kill(os.getpid(), 9)", "killed",
     "killed by SIGKILL (cause unknown;"),
    ("stdin", "import os, signal\nos.killpg(0, signal.SIGKILL)", "killed", "killed by SIGKILL (cause unknown;"),
    ("functional", "import os\ndef f(x):\n    os.kill(os.getpid(), 9)", "killed",
     "killed by SIGKILL (cause unknown;"),
    ("functional", "import os\nos.kill(os.getpid(), 9)\ndef f(x):\n    return 42", "killed",
     "killed by SIGKILL (cause unknown;"),
    # what the program can send or choose alone never names a limit (before: timeout, memory_limit)
    ("stdin", "import os, signal\nprint(42, flush=True)\nos.kill(os.getpid(), signal.SIGXCPU)", "runtime_error",
     "killed by signal SIGXCPU"),
    ("stdin", "import os, sys\nprint(42)\nsys.stdout.flush()\nos._exit(3)", "runtime_error", "exit status 3"),
    ("functional", "import os\ndef f(x):\n    os._exit(3)", "runtime_error", "exit status 3"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode, code, verdict, detail", SELF_KILLS)
def test_a_signal_or_exit_status_the_program_chose_never_names_a_limit(backend, mode, code, verdict, detail):
    # before: a SIGKILL was memory_limit ("killed by SIGKILL (memory)"), a self-sent SIGXCPU timeout and
    # os._exit(3) memory_limit ("MemoryError"), though no limit was reached
    result = run(backend, code, ["1"], ["42"], fn_name="f" if mode == "functional" else None)
    assert (result.verdict, result.detail[:len(detail)]) == (verdict, detail), result
    assert "killed" in reward_fns.VERDICTS


@pytest.mark.parametrize("ignore_sigxcpu, signal_number", [(False, 24), (True, 9)])
def test_a_signal_at_a_cpu_rlimit_is_a_timeout(ignore_sigxcpu, signal_number):
    from reward_fns import _code_harness as harness

    # the harness's shape (child_limits): soft limit s, hard s + 1: SIGXCPU at s, and SIGKILL at s + 1 to a
    # program that ignores SIGXCPU
    spin = (f"import resource, signal\nif {ignore_sigxcpu}:\n    signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_CPU, (1, 2))\nwhile True:\n    pass")
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", spin])
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = -signal_number  # reaped here; Popen must not wait for it again
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal_number
    ended = (status, usage.ru_utime + usage.ru_stime)
    assert harness.describe_exit(ended, 1)[0] == "timeout"
    expected = ("killed", f"killed by SIGKILL (cause unknown; {ended[1]:.2f} s of CPU, under the 7 s limit)") \
        if signal_number == 9 else ("runtime_error", "killed by signal SIGXCPU")
    assert harness.describe_exit(ended, 7) == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_sequential_allocations_under_the_limit_pass(backend):
    code = ("import os\nfor _ in range(3):\n    pid = os.fork()\n    if pid == 0:\n"
            "        b = bytearray(200 << 20)\n        os._exit(0)\n    os.waitpid(pid, 0)\nprint(42)")
    assert run(backend, code, [""], ["42"]).verdict == "correct"


def test_report_names_each_limit_mechanism_honestly():
    for backend in BACKENDS:
        limits = detect_isolation(backend).limit_mechanisms
        assert set(limits) == {"memory", "pids", "ipc", "cpu", "trusted_side"}
        assert "CPU time over every process" in limits["cpu"]
        assert ("kernel: a cpu cgroup" in limits["cpu"]) == (cpu_cgroup_parent() is not None), limits
        assert "64 KiB" in limits["trusted_side"] and "200 levels" in limits["trusted_side"]
        # A cgroup is claimed exactly when this machine lets the sandbox make one (see README).
        has_cgroup = memory_cgroup_parent() is not None
        assert ("kernel: a memory cgroup" in limits["memory"]) == has_cgroup, limits
        assert detect_isolation(backend).memory_cgroup == has_cgroup
        assert all("cgroup" not in how for key, how in limits.items() if key not in ("memory", "cpu")), limits
    if os.geteuid() == 0:
        assert "namespace" in detect_isolation("fallback").limit_mechanisms["ipc"]
        assert "RLIMIT_NPROC" in detect_isolation("fallback").limit_mechanisms["pids"]


# ------------------------------------------------------------------------ 8. interpreter in hidden dirs
def _venv_parents():
    yield "tmp", tempfile.gettempdir()
    home = "/root" if os.geteuid() == 0 else os.path.expanduser("~")
    yield "home", home
    if os.path.isdir("/home") and os.access("/home", os.W_OK):
        yield "slash_home", "/home"


@pytest.mark.parametrize("where, parent", list(_venv_parents()))
def test_sandbox_runs_with_a_venv_in_a_hidden_directory(where, parent):
    base = tempfile.mkdtemp(prefix="ibpo-venv-", dir=parent)
    try:
        venv = os.path.join(base, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
        script = (
            "import json, sys\nsys.path.insert(0, %r)\n"
            "from reward_fns import encode_tests\nfrom reward_fns.code_verifier import CodeLimits, prepare_tests, "
            "run_code_tests\nfrom reward_fns.sandbox import detect_isolation\n"
            "code = 'import calendar, hashlib, csv, uuid, base64, json\\nprint(calendar.isleap(2024), "
            "hashlib.md5(b\"\").hexdigest()[:4], base64.b64encode(b\"a\").decode())'\n"
            "tests = prepare_tests(encode_tests({'inputs': [''], 'outputs': ['True d41d YQ=='], 'fn_name': None}))\n"
            "out = {}\nfor backend in %r:\n"
            "    r = run_code_tests(code, tests, CodeLimits(timeout_s=4, memory_mb=1024), detect_isolation(backend))\n"
            "    out[backend] = [r.verdict, r.detail]\nprint(json.dumps(out))" % (str(REPO), BACKENDS))
        proc = subprocess.run([os.path.join(venv, "bin", "python"), "-c", script], capture_output=True, text=True,
                              timeout=300, cwd="/")
        assert proc.returncode == 0, proc.stderr[-3000:]
        verdicts = json.loads(proc.stdout.strip().splitlines()[-1])
        assert {b: v[0] for b, v in verdicts.items()} == {b: "correct" for b in BACKENDS}, verdicts
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_fallback_can_import_numpy_and_stdlib_modules():
    if os.geteuid() != 0:
        pytest.skip("the fallback's per-run uid exists only as root")
    pytest.importorskip("numpy")
    code = "import numpy, calendar, hashlib, csv, uuid, base64\nprint(int(numpy.arange(4).sum()))"
    for backend in BACKENDS:
        assert run(backend, code, [""], ["6"]).verdict == "correct", backend


# ------------------------------------------------------------------------------ 9. host visibility
@pytest.mark.parametrize("backend", BACKENDS)
def test_world_readable_data_outside_home_and_tmp_is_invisible(backend):
    roots = [d for d in ("/srv", "/mnt", "/opt") if os.path.isdir(d) and os.access(d, os.W_OK)]
    if not roots:
        pytest.skip("no writable /srv, /mnt or /opt to plant a dataset in")
    secret_dir = tempfile.mkdtemp(prefix="ibpo-data-", dir=roots[0])
    try:
        os.chmod(secret_dir, 0o755)
        answer = "answer" + secrets.token_hex(6)
        Path(secret_dir, "expected.txt").write_text(answer + "\n")
        os.chmod(Path(secret_dir, "expected.txt"), 0o644)
        code = (f"import glob\nhits = glob.glob('{roots[0]}/ibpo-data-*/expected.txt')\n"
                "print(open(hits[0]).read().strip() if hits else 'nothing')")
        result = run(backend, code, [""], [answer])
        report = detect_isolation(backend)
        if "minimal_filesystem" in report.enforced:
            assert result.verdict == "wrong_answer", result
        else:  # the fallback says so instead of pretending
            assert "minimal_filesystem" in report.missing
    finally:
        shutil.rmtree(secret_dir, ignore_errors=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_files_written_to_tmp_stay_in_the_sample_and_are_capped(backend):
    # before: the root fallback's /tmp was the host's, where a sample left files beyond its memory limit
    leak = f"/tmp/ibpo_leak_{secrets.token_hex(4)}"
    code = (f"import os\nopen({leak!r}, 'w').write('x')\nopen('in_cwd', 'w').write('y')\n"
            "try:\n    for i in range(100):\n        with open(f'/tmp/f{i}', 'wb') as f:\n"
            "            f.write(b'z' * 2**20)\n"
            "except OSError as e:\n    print('capped', e.errno)\nelse:\n    print('not capped')")
    # 1 MiB files (under RLIMIT_FSIZE): ENOSPC at the 64 MiB tmpfs, well under the 512 MiB memory limit
    result = run(backend, code, [""], ["capped 28"])
    assert result.verdict == "correct", result
    assert not os.path.exists(leak)
    assert not [d for d in os.listdir("/tmp") if d.startswith("ibpo-sandbox-")
                and os.path.exists(os.path.join("/tmp", d, "in_cwd"))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_user_namespaces_cannot_be_created(backend):
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print('created' if libc.unshare(0x10000000) == 0 else 'refused')")
    result = run(backend, code, [""], ["created"])
    assert result.verdict == "wrong_answer", result
    assert "no_user_namespaces" in detect_isolation(backend).enforced


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_new_privs_is_set(backend):
    code = ("print([l.split()[1] for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0])")
    assert run(backend, code, [""], ["1"]).verdict == "correct"


# -------------------------------------------------------------------------------------- 10. semantics
@pytest.mark.parametrize("ret, expected, verdict", [
    ("Fraction(5, 2)", "2.5", "correct"),
    ("Decimal('2.5')", "2.5", "correct"),
    ("[Fraction(1, 2), Decimal(3)]", "[0.5, 3]", "correct"),
    ("Fraction(1, 3)", "0.3333333333333333", "wrong_answer"),   # exact == like LCB, no tolerance
    ("Decimal('0.1')", "0.1", "wrong_answer"),                   # Decimal('0.1') != 0.1 in Python, so in LCB
    ("complex(2, 0)", "2", "correct"),
])
def test_fraction_decimal_complex_returns_compare_like_lcb(ret, expected, verdict):
    code = f"from fractions import Fraction\nfrom decimal import Decimal\ndef f(x):\n    return {ret}"
    truth = encode_tests({"inputs": ["1"], "outputs": [expected], "fn_name": "f"})
    assert compute_score("livecodebench_v6", fenced(code), truth)["verdict"] == verdict


def test_readlines_then_print_without_strip_matches_lcb():
    truth = encode_tests({"inputs": ["3\n1\n2\n"], "outputs": ["3\n1\n2\n"], "fn_name": None})
    code = "import sys\nfor line in sys.stdin.readlines():\n    print(line)"
    assert compute_score("livecodebench_v6", fenced(code), truth)["verdict"] == "correct"
    code_strip = "import sys\nfor line in sys.stdin.readlines():\n    print(line.strip())"
    assert compute_score("livecodebench_v6", fenced(code_strip), truth)["verdict"] == "correct"


# ----------------------------------------------------------------------------------- 11. self-test
def test_self_test_passes_on_the_real_path():
    results = self_test(["aime25", "livecodebench_v6"])
    assert results and all(r.ok for r in results)
    assert {r.case for r in results if r.data_source == "livecodebench_v6"} >= {"code stdin right",
                                                                                "code functional right"}


def test_self_test_fails_loudly_when_code_cannot_run(monkeypatch):
    import reward_fns.code_verifier as cv
    from reward_fns.code_verifier import SandboxError

    def broken_launch(job, report):
        raise SandboxError("bwrap: execvp /x/bin/python: No such file or directory")

    monkeypatch.setattr(cv, "launch", broken_launch)
    with pytest.raises(reward_fns.VerifierSelfTestError) as info:
        self_test(["livecodebench_train"])
    message = str(info.value)
    assert "livecodebench_train" in message and "backend" in message and "No such file" in message


def test_self_test_uses_the_configured_reward_function():
    calls = []

    def always_zero(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        calls.append(kwargs)
        return {"score": 0.0, "verdict": "runtime_error"}

    with pytest.raises(reward_fns.VerifierSelfTestError, match="math_dapo"):
        self_test(["math_dapo"], reward_fn=always_zero, reward_kwargs={"math_timeout_s": 3.0})
    assert calls and calls[0] == {"math_timeout_s": 3.0}
    with pytest.raises(reward_fns.VerifierSelfTestError, match="no self-test samples"):
        self_test(["mystery_source"])
    results = self_test(["mystery_source"], raise_on_failure=False)
    assert not results[0].ok


def _constant(value):
    def reward(data_source, solution_str, ground_truth, extra_info=None):
        return value
    return reward


def _ignores_the_gold(data_source, solution_str, ground_truth, extra_info=None):
    return float("42" in solution_str)


def _plus_minus_one(data_source, solution_str, ground_truth, extra_info=None):  # verl's math_dapo scale
    return 1.0 if solution_str.strip().rstrip(".}").endswith(ground_truth) else -1.0


@pytest.mark.parametrize("reward_fn", [_constant(1.0), _constant({"score": 0.0}), _ignores_the_gold])
def test_relative_self_test_refuses_a_function_that_cannot_tell_right_from_wrong(reward_fn):
    # before: only the project's own function was self-tested; a constant user function passed the pre-flight
    with pytest.raises(reward_fns.VerifierSelfTestError) as info:
        self_test(["aime25"], reward_fn=reward_fn, relative=True)
    message = str(info.value)
    assert message.startswith("reward self-test failed; the verifier cannot tell a right answer from a wrong one")
    if reward_fn is _ignores_the_gold:
        assert ("- data_source='aime25', math boxed, gold 41: right vs wrong: the wrong answer scored more: 1.0 for "
                "'So the answer is \\\\boxed{42}.', 0.0 for the right 'So the answer is \\\\boxed{41}.'") in message
    else:
        score = 1.0 if reward_fn("aime25", "", "42") == 1.0 else 0.0
        assert (f"- data_source='aime25', tells right from wrong: no right answer scored more than its wrong one "
                f"(scores seen: [{score}]); the function ignores the response or the ground truth") in message


def test_relative_self_test_passes_real_verifiers_of_any_scale():
    from verl.utils.reward_score import default_compute_score

    for fn, sources in ((compute_score, ["aime25", "openai/gsm8k", "livecodebench_v6"]),
                        (default_compute_score, ["aime25", "math_dapo", "openai/gsm8k"]),
                        (_plus_minus_one, ["hmmt_feb_2025"])):
        results = self_test(sources, reward_fn=fn, relative=True)
        assert results and all(r.ok for r in results), [r for r in results if not r.ok]
