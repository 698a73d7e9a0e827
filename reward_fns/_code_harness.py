"""Trusted harness that runs model-written code inside the sandbox (spec section 5; LiveCodeBench semantics).

Started by :mod:`reward_fns.code_verifier` as ``python -I -c <this source>`` (inside bubblewrap when available).
It must not import anything from the repository: the repository may be invisible inside the sandbox.

1. Reads the whole job (JSON) from stdin: code, mode, inputs (never the expected outputs), limits, sandbox uid.
   stdin is then replaced by /dev/null, so nothing of the job stays reachable through a file descriptor.
2. Sets up isolation it is responsible for: new network namespace (fallback mode only; bubblewrap did it
   otherwise), resource limits, and drops to the per-run unprivileged uid given by the parent (when root).
3. Runs each test in a forked child (fresh process per test for stdin programs; one process for all calls of a
   functional problem, like LiveCodeBench's in-process loop), enforcing the per-test wall-clock limit from this
   process's main thread, and streams one JSON line per test to stdout. The parent compares.
"""

import builtins
import ctypes
import io
import json
import os
import resource
import select
import signal
import sys
import time

# LiveCodeBench's `import_string` (lcb_runner/evaluation/testing_util.py @ 28fef95), prepended to every program.
LCB_IMPORT_STRING = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\nfrom heapq import *\n"
    "from bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\nfrom statistics import *\n"
    "from itertools import *\nfrom functools import *\nfrom operator import *\nfrom io import *\nfrom sys import *\n"
    "from json import *\nfrom builtins import *\nfrom typing import *\nimport string\nimport re\nimport datetime\n"
    "import collections\nimport heapq\nimport bisect\nimport copy\nimport math\nimport random\nimport statistics\n"
    "import itertools\nimport functools\nimport operator\nimport io\nimport sys\nimport json\n"
    "sys.setrecursionlimit(50000)\n"
)
# Imported before the uid switch in fallback mode: there the interpreter may live in a directory the per-run uid
# cannot read (e.g. /root/.pyenv), so later imports of these stdlib modules would fail.
FALLBACK_PREIMPORTS = ("array", "fractions", "decimal", "dataclasses", "enum", "numbers", "cmath", "time", "queue",
                       "struct", "textwrap", "unicodedata", "collections.abc", "traceback", "abc", "contextlib",
                       "string", "math", "random", "statistics", "itertools", "functools", "operator", "copy",
                       "socket", "select", "glob", "shutil", "signal", "threading", "subprocess", "encodings.idna")
LCB_INT_MAX_STR_DIGITS = 50000  # lcb_runner sets sys.set_int_max_str_digits(50000) in the evaluating process
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
STDERR_TAIL = 2000
EXIT_OK, EXIT_EXCEPTION, EXIT_MEMORY, EXIT_SETUP = 0, 1, 3, 4


def emit(obj):
    """Write one protocol line to the parent (fd 1 of the harness is the protocol channel)."""
    data = (json.dumps(obj) + "\n").encode("utf-8")
    view = memoryview(data)
    while view:
        written = os.write(PROTO_FD, view)
        view = view[written:]


def libc_call(name, *args):
    libc = ctypes.CDLL(None, use_errno=True)
    rc = getattr(libc, name)(*args)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name} failed: {os.strerror(err)}")


def set_limit(which, soft, hard=None):
    hard = soft if hard is None else hard
    current_soft, current_hard = resource.getrlimit(which)
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
        soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


def isolate_harness(job):
    """Namespace, uid and process-wide limits; done once, before any model code exists in a process."""
    libc_call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1 and not job.get("in_pid_namespace"):
        os._exit(EXIT_SETUP)  # the parent died before we set PDEATHSIG
    report = {"network_namespace": bool(job.get("network_isolated_by_launcher")), "uid": os.getuid()}
    if job.get("unshare_network"):
        libc_call("unshare", CLONE_NEWNET)
        report["network_namespace"] = True
    os.chdir(job["workdir"])
    set_limit(resource.RLIMIT_CORE, 0)
    set_limit(resource.RLIMIT_NOFILE, job["max_open_files"])
    uid = job.get("sandbox_uid")
    if uid is not None:
        # RLIMIT_NPROC counts every process of the (fresh, per-run) uid: a fork bomb stops here. Root ignores it,
        # which is why we drop privileges; setresuid clears all capabilities.
        set_limit(resource.RLIMIT_NPROC, job["max_processes"])
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        report["uid"] = os.getuid()
    return report


def child_limits(job, cpu_seconds):
    set_limit(resource.RLIMIT_AS, job["memory_bytes"])
    set_limit(resource.RLIMIT_FSIZE, job["max_file_bytes"])
    set_limit(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1)


def fresh_std_streams():
    """Text stdin/stdout/stderr on fds 0/1/2 of this (child) process, UTF-8 like a judge's interpreter."""
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8",
                                  write_through=True)


def lcb_globals():
    """A fresh ``__main__`` namespace with LiveCodeBench's import prefix executed in it."""
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    exec(LCB_IMPORT_STRING, namespace)
    return namespace


def finish_child(code):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code)


def close_other_fds(keep):
    for fd in range(3, 1024):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def kill_group(pid):
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


def sweep_uid(job):
    """Kill every process of the sandbox uid except this one (catches children that left the process group)."""
    if job.get("sandbox_uid") is not None:
        try:
            os.kill(-1, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def reap(pid, deadline):
    """waitpid with a deadline; returns the wait status or None if still running."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.002)


def describe_exit(status):
    """Map a child's wait status to (status, detail)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return "timeout", "CPU time limit (SIGXCPU)"
        if sig == signal.SIGKILL:
            return "memory_limit", "killed by SIGKILL (memory)"
        return "runtime_error", f"killed by signal {signal.Signals(sig).name}"
    code = os.WEXITSTATUS(status)
    if code == EXIT_OK:
        return "ok", ""
    if code == EXIT_MEMORY:
        return "memory_limit", "MemoryError"
    return "runtime_error", f"exit status {code}"


# ------------------------------------------------------------------------------------------------ stdin programs
def run_stdin_child(job, code_obj, input_text, out_w, err_w):
    """Child process body: the program reads the test input from a real stdin and writes to a real stdout."""
    try:
        os.setpgid(0, 0)
        memfd = os.memfd_create("stdin", 0)
        os.write(memfd, input_text.encode("utf-8"))
        os.lseek(memfd, 0, os.SEEK_SET)
        os.dup2(memfd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        close_other_fds(())
        child_limits(job, job["cpu_seconds_per_test"])
        fresh_std_streams()
        builtins.quit = None  # LiveCodeBench's reliability_guard; exit() stays allowed
        namespace = lcb_globals()
    except BaseException:
        os._exit(EXIT_SETUP)
    try:
        exec(code_obj, namespace)
        finish_child(EXIT_OK)
    except SystemExit:  # LiveCodeBench swallows SystemExit: exit() is a normal end of the program
        finish_child(EXIT_OK)
    except MemoryError:
        finish_child(EXIT_MEMORY)
    except BaseException as exc:
        try:
            sys.stderr.write(f"{type(exc).__name__}: {exc}"[:STDERR_TAIL])
        except BaseException:
            pass
        finish_child(EXIT_EXCEPTION)


def collect(pid, out_r, err_r, deadline, out_cap):
    """Read a stdin-mode child's stdout (up to ``out_cap`` bytes) and stderr tail until it exits or times out."""
    out, err = bytearray(), bytearray()
    open_fds = {out_r, err_r}
    status, verdict = None, None
    while open_fds:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            verdict = ("timeout", "wall-clock limit per test")
            break
        ready, _, _ = select.select(list(open_fds), [], [], min(remaining, 0.05))
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                open_fds.discard(fd)
            elif fd == out_r:
                out.extend(chunk)
                if len(out) > out_cap:
                    verdict = ("output_limit", f"more than {out_cap} bytes on stdout")
            else:
                err.extend(chunk)
                del err[:-STDERR_TAIL]
        if verdict:
            break
        if not ready:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:  # exited; a grandchild may still hold the pipes open, so stop waiting for EOF
                status = st
                break
    if verdict is None and status is None:
        status = reap(pid, deadline)
        if status is None:
            verdict = ("timeout", "wall-clock limit per test")
    kill_group(pid)
    if status is None:
        reap(pid, time.monotonic() + 5)
    if verdict is None:
        verdict = describe_exit(status)
    return verdict, bytes(out), bytes(err)


def run_stdin_tests(job, code_obj):
    for index, input_text in enumerate(job["inputs"]):
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os.close(out_r)
            os.close(err_r)
            run_stdin_child(job, code_obj, input_text, out_w, err_w)
        os.close(out_w)
        os.close(err_w)
        (status, detail), out, err = collect(pid, out_r, err_r, start + job["timeout_s"], job["max_output_bytes"])
        os.close(out_r)
        os.close(err_r)
        sweep_uid(job)
        if status == "runtime_error" and err:
            detail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [detail]
            detail = detail[0]
        emit({"event": "test", "i": index, "status": status, "detail": detail[:500],
              "stdout": out.decode("utf-8", "replace") if status == "ok" else "",
              "seconds": round(time.monotonic() - start, 4)})
        if status != "ok":
            return


# -------------------------------------------------------------------------------------------- functional calls
def to_wire(value, depth=0):
    """Encode a return value so the parent can rebuild it with the same ``==`` behaviour (tuple vs list, int
    dict keys, sets). Custom objects become opaque markers: their ``__eq__`` must not decide the verdict."""
    if depth > 10000:
        raise RecursionError("return value nested too deeply")
    kind = type(value)
    if kind is int and not -(1 << 63) <= value < (1 << 63):
        # Big ints travel as hex: linear both ways and not subject to int/str digit limits in the parent.
        return {"__x": format(value, "x")}
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [to_wire(v, depth + 1) for v in value]
    if kind is tuple:
        return {"__t": [to_wire(v, depth + 1) for v in value]}
    if kind is dict:
        return {"__d": [[to_wire(k, depth + 1), to_wire(v, depth + 1)] for k, v in value.items()]}
    if kind is set:
        return {"__s": [to_wire(v, depth + 1) for v in value]}
    if kind is frozenset:
        return {"__f": [to_wire(v, depth + 1) for v in value]}
    module = getattr(kind, "__module__", "")
    if module == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return to_wire(value.item(), depth + 1)  # numpy scalars compare equal to Python numbers
    # Subclasses of builtins (defaultdict, Counter, namedtuple, str/int subclasses) compare like their base.
    for base, encode in ((bool, bool), (int, int), (float, float), (str, str), (dict, dict), (list, list),
                         (tuple, tuple), (frozenset, frozenset), (set, set)):
        if isinstance(value, base):
            return to_wire(encode(value), depth + 1)
    return {"__o": f"{module}.{kind.__qualname__}"}


def run_functional_child(job, code_text, req_r, rep_w):
    """Child process body: exec the solution once, then answer one call per request line (LCB grade_call_based)."""
    try:
        os.setpgid(0, 0)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        close_other_fds((req_r, rep_w))
        child_limits(job, job["cpu_seconds_total"])
        fresh_std_streams()
        builtins.quit = None
        sys.set_int_max_str_digits(LCB_INT_MAX_STR_DIGITS)
        requests = os.fdopen(req_r, "r", encoding="utf-8")
        replies = os.fdopen(rep_w, "w", encoding="utf-8")
    except BaseException:
        os._exit(EXIT_SETUP)

    def reply(obj):
        replies.write(json.dumps(obj) + "\n")
        replies.flush()

    full_code = LCB_IMPORT_STRING + "\n\n" + code_text
    try:
        module = {"__name__": "tmp_sol", "__builtins__": builtins}
        exec(compile(full_code, "<solution>", "exec"), module)
        target = module["Solution"]() if "class Solution" in full_code else None
        method = getattr(target, job["fn_name"]) if target is not None else module[job["fn_name"]]
        reply({"ready": True})
    except MemoryError:
        reply({"ready": False, "status": "memory_limit", "detail": "MemoryError while loading the solution"})
        finish_child(EXIT_OK)
    except BaseException as exc:  # includes a missing method (LCB: -4)
        reply({"ready": False, "status": "runtime_error", "detail": f"{type(exc).__name__}: {exc}"[:500]})
        finish_child(EXIT_OK)
    for line in requests:
        try:  # LCB: one JSON value per line, one line per positional argument
            args = [json.loads(arg) for arg in json.loads(line).split("\n")]
        except ValueError as exc:
            reply({"status": "runtime_error", "detail": f"bad arguments: {exc}"[:500]})
            continue
        try:
            prediction = method(*args)
            if isinstance(prediction, tuple):  # LCB: "don't penalize model if it produces tuples"
                prediction = list(prediction)
            try:
                reply({"status": "ok", "value": to_wire(prediction)})
            except (RecursionError, ValueError, TypeError) as exc:
                reply({"status": "ok", "value": {"__o": f"unserialisable return value: {exc}"[:200]}})
        except SystemExit as exc:
            reply({"status": "runtime_error", "detail": f"SystemExit({exc.code!r}) inside the method"})
        except MemoryError:
            reply({"status": "memory_limit", "detail": "MemoryError"})
        except BaseException as exc:
            reply({"status": "runtime_error", "detail": f"{type(exc).__name__}: {exc}"[:500]})
    finish_child(EXIT_OK)


def read_reply(fd, buffer, deadline, cap):
    while b"\n" not in buffer:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return ""
        buffer.extend(chunk)
        if len(buffer) > cap:
            return ""
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line.decode("utf-8", "replace")


def run_functional_tests(job):
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(req_w)
        os.close(rep_r)
        run_functional_child(job, job["code"], req_r, rep_w)
    os.close(req_r)
    os.close(rep_w)
    buffer = bytearray()
    start = time.monotonic()

    def stop(event):
        kill_group(pid)
        reap(pid, time.monotonic() + 5)
        sweep_uid(job)
        emit(event)

    line = read_reply(rep_r, buffer, start + job["timeout_s"], job["max_output_bytes"])
    if line is None:
        return stop({"event": "test", "i": 0, "status": "timeout", "detail": "loading the solution timed out"})
    hello = json.loads(line) if line else {"ready": False, "status": "runtime_error", "detail": "solution died"}
    if not hello.get("ready"):
        status = hello.get("status", "runtime_error")
        if not line:
            status, detail = describe_exit(reap(pid, time.monotonic() + 1) or 0)
            hello["detail"] = detail
        return stop({"event": "test", "i": 0, "status": status if status != "ok" else "runtime_error",
                     "detail": hello.get("detail", "")})
    for index, args in enumerate(job["inputs"]):
        start = time.monotonic()
        try:
            os.write(req_w, (json.dumps(args) + "\n").encode("utf-8"))
        except OSError:
            line = ""
        else:
            line = read_reply(rep_r, buffer, start + job["timeout_s"], job["max_output_bytes"])
        seconds = round(time.monotonic() - start, 4)
        if line is None:
            return stop({"event": "test", "i": index, "status": "timeout", "detail": "wall-clock limit per test",
                         "seconds": seconds})
        if line == "":
            status = reap(pid, time.monotonic() + 1)
            verdict, detail = describe_exit(status) if status is not None else ("runtime_error", "no reply")
            return stop({"event": "test", "i": index, "status": verdict if verdict != "ok" else "runtime_error",
                         "detail": detail or "the solution process exited", "seconds": seconds})
        try:
            result = json.loads(line)
        except ValueError:
            result = {"status": "runtime_error", "detail": "garbled reply"}
        event = {"event": "test", "i": index, "status": result.get("status", "runtime_error"),
                 "detail": str(result.get("detail", ""))[:500], "seconds": seconds}
        if event["status"] == "ok":
            event["value"] = result.get("value")
            emit(event)
        else:
            return stop(event)
    kill_group(pid)
    reap(pid, time.monotonic() + 5)
    sweep_uid(job)


def main():
    global PROTO_FD
    raw = sys.stdin.buffer.read()
    job = json.loads(raw)
    del raw
    # fd 1 carries the protocol; keep a private copy and point 0/1/2 at /dev/null for everything else.
    PROTO_FD = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    os.close(devnull)
    sys.set_int_max_str_digits(LCB_INT_MAX_STR_DIGITS)
    exec(LCB_IMPORT_STRING, {"__name__": "_warm"})  # import the prefix modules once; children inherit them
    if job.get("preimport"):
        import importlib
        for name in FALLBACK_PREIMPORTS:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
    report = isolate_harness(job)
    emit({"event": "ready", **report})
    if job["mode"] == "stdin":
        try:
            code_obj = compile(job["code"], "<solution>", "exec")
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
            emit({"event": "test", "i": 0, "status": "compile_error", "detail": f"{type(exc).__name__}: {exc}"[:500]})
            return
        run_stdin_tests(job, code_obj)
    else:
        try:
            compile(LCB_IMPORT_STRING + "\n\n" + job["code"], "<solution>", "exec")
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
            emit({"event": "test", "i": 0, "status": "compile_error", "detail": f"{type(exc).__name__}: {exc}"[:500]})
            return
        run_functional_tests(job)
    emit({"event": "done"})


PROTO_FD = 1
if __name__ == "__main__":
    main()
