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

import base64
import builtins
import ctypes
import io
import json
import os
import platform
import resource
import select
import signal
import struct
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
CLONE_NEWIPC = 0x08000000
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
SYS_PRCTL = 157  # x86_64
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
MONITOR_INTERVAL_S = 0.02
HARNESS_SAVED_GID = 999_999_999  # below the per-run uid range; held only as the harness's saved gid
OK_REPLY_PREFIX = '{"status": "ok", "value": '  # json.dumps of the child's {"status": "ok", "value": ...}
MAX_DECODED_REPLY = 1 << 16  # other replies (errors) are small; longer ones are garbled, never decoded
MAX_WIRE_DEPTH = 150  # JSON nesting of a returned value; the trusted parent decodes with bounded recursion
STDERR_TAIL = 2000
EXIT_OK, EXIT_EXCEPTION, EXIT_MEMORY, EXIT_SETUP = 0, 1, 3, 4
# The harness's own code writes this as the last bytes on a stdin program's stderr when the program raised
# MemoryError, then exits with EXIT_MEMORY: an exit status alone is the program's to choose (``os._exit(3)``).
MEMORY_ERROR_MARK = b"\x00ibpo-harness: MemoryError\n"


def emit(obj):
    """Write one protocol line to the parent (fd 1 of the harness is the protocol channel)."""
    emit_text(json.dumps(obj) + "\n")


def emit_text(text):
    data = text.encode("utf-8")
    view = memoryview(data)
    while view:
        written = os.write(PROTO_FD, view)
        view = view[written:]


LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)


def libc_call(name, *args):
    rc = getattr(LIBC, name)(*args)
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


def fallback_mounts(job):
    """Fallback backend, root only: a private mount namespace in which the hidden directories that hold the
    interpreter (e.g. ``/root`` with ``/root/.pyenv``) are replaced by a tmpfs holding read-only binds of just
    the interpreter's prefixes, and ``/dev/shm`` and ``/tmp`` are private size-capped tmpfs (:func:`private_tmp`).
    Returns what was done."""
    libc_call("unshare", CLONE_NEWNS)
    libc_call("mount", None, b"/", None, MS_REC | MS_PRIVATE, None)
    for hidden, prefixes in job.get("fallback_overlays", []):
        fds = []
        for prefix in prefixes:
            try:
                fds.append((prefix, os.open(prefix, os.O_PATH), os.path.isdir(prefix)))
            except OSError:
                continue
        libc_call("mount", b"tmpfs", hidden.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=1m")
        for prefix, fd, is_dir in fds:
            if is_dir:
                os.makedirs(prefix, mode=0o755, exist_ok=True)
            else:  # a single file (/etc/passwd ...): an empty mount point for it
                os.makedirs(os.path.dirname(prefix), mode=0o755, exist_ok=True)
                os.close(os.open(prefix, os.O_CREAT | os.O_WRONLY, 0o644))
            libc_call("mount", f"/proc/self/fd/{fd}".encode(), prefix.encode(), None, MS_BIND | MS_REC, None)
            libc_call("mount", None, prefix.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID, None)
            os.close(fd)
        libc_call("mount", None, hidden.encode(), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    if job.get("private_tmp"):
        private_tmp(job)
    if os.path.isdir("/dev/shm"):
        libc_call("mount", b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV,
                  f"mode=1777,size={job['tmpfs_bytes']}".encode())
        return True
    return False


def private_tmp(job):
    """``/tmp`` becomes a private tmpfs capped at ``tmpfs_bytes`` (as under bwrap), holding read-only binds of the
    interpreter's prefixes that live under ``/tmp`` (``tmp_binds``: a venv made in a temporary folder) and a fresh
    empty work dir at the host work dir's path (the harness changes into it afterwards). Without it a sample
    writes into the host's ``/tmp``: files beyond its memory limit that outlive it, and a full disk stops
    training. Raises ``OSError`` (reported as ``mount_error``: the program then never runs)."""
    fds = []
    try:
        for prefix in job.get("tmp_binds", []):
            fds.append((prefix, os.open(prefix, os.O_PATH)))  # opened before /tmp is covered
        libc_call("mount", b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID | MS_NODEV,
                  f"mode=1777,size={job['tmpfs_bytes']}".encode())
        for prefix, fd in fds:
            os.makedirs(prefix, mode=0o755, exist_ok=True)
            libc_call("mount", f"/proc/self/fd/{fd}".encode(), prefix.encode(), None, MS_BIND | MS_REC, None)
            libc_call("mount", None, prefix.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID, None)
        os.makedirs(job["workdir"], mode=0o700, exist_ok=True)
        if job.get("sandbox_uid") is not None:
            os.chown(job["workdir"], job["sandbox_uid"], job["sandbox_uid"])
    finally:
        for _, fd in fds:
            os.close(fd)


def limit_sysv_shm(job):
    """In a fresh IPC namespace (root): cap SysV shared memory to the sample's memory limit."""
    pages = max(1, job["sample_memory_bytes"] // 4096)
    for name, value in (("shmmax", job["sample_memory_bytes"]), ("shmall", pages), ("shmmni", 64)):
        with open(f"/proc/sys/kernel/{name}", "w") as fh:
            fh.write(str(value))


# x86_64 syscall numbers of the kernel-held state that no namespace in use separates per sample.
SYS_KEYRING = (248, 249, 250)        # add_key, request_key, keyctl: keyrings are per uid/session, not per namespace
SYS_SYSV_MSG_SEM = (64, 68)          # semget, msgget: host IPC namespace when the harness could not unshare it
SYS_MQ_OPEN = 240                    # mq_open: POSIX message queues live in the IPC namespace too
SYS_SOCKET, AF_UNIX = 41, 1          # abstract unix sockets are per network namespace
KEYCTL_JOIN_SESSION_KEYRING = 1
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}


def join_private_session_keyring():
    """Join a fresh, empty, anonymous session keyring (keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)).

    bwrap's ``--new-session`` is setsid(), not a keyring: without this the sandbox would keep the trainer's
    session keyring (e.g. after an SSH/PAM login) and could read its keys or leave keys for a later sample.
    Returns the new keyring's serial, or 0 where the syscall is unknown here."""
    nr = SYS_KEYCTL.get(platform.machine())
    if nr is None:
        return 0
    LIBC.syscall.restype = ctypes.c_long
    serial = LIBC.syscall(ctypes.c_long(nr), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING), ctypes.c_void_p(None))
    if serial < 0:
        raise OSError(ctypes.get_errno(), "keyctl(KEYCTL_JOIN_SESSION_KEYRING) failed")
    return int(serial)


def block_user_namespaces(private_ipc=True, private_net=True):
    """seccomp filter (harness and every program process): clone/unshare with CLONE_NEWUSER fail with EPERM,
    clone3 with ENOSYS (glibc then uses clone); the keyring syscalls fail with EPERM (a sample cannot leave a
    key for a later sample nor read one, whatever uid it runs as); without a private IPC namespace SysV
    message queues/semaphores and POSIX message queues fail too, and without a private network namespace
    socket(AF_UNIX) does (abstract unix sockets would be shared with the host); prctl(PR_SET_DUMPABLE, 0) fails
    with EPERM (a process the memory monitor cannot read would hide its memory). x86_64 only; returns False
    elsewhere."""
    if platform.machine() != "x86_64":
        return False
    allow, errno_ret = 0x7FFF0000, 0x00050000
    ld_w_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    denied = list(SYS_KEYRING)
    if not private_ipc:
        denied += list(SYS_SYSV_MSG_SEM) + [SYS_MQ_OPEN]
    prog = [
        (ld_w_abs, 0, 0, 4), (jeq, 1, 0, 0xC000003E), (ret, 0, 0, allow),   # arch == AUDIT_ARCH_X86_64
        (ld_w_abs, 0, 0, 0),                                                # syscall number
        (jge, 0, 1, 0x40000000), (ret, 0, 0, errno_ret | 38),               # x32 ABI: ENOSYS
        (jeq, 0, 1, 435), (ret, 0, 0, errno_ret | 38),                      # clone3: ENOSYS
    ]
    for nr in denied:
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, errno_ret | 1)]
    if not private_net:                                                     # socket(AF_UNIX, ...): EPERM
        prog += [(jeq, 0, 4, SYS_SOCKET), (ld_w_abs, 0, 0, 16), (jeq, 0, 1, AF_UNIX), (ret, 0, 0, errno_ret | 1),
                 (ret, 0, 0, allow)]
    prog += [                                                               # prctl(PR_SET_DUMPABLE, 0): EPERM
        (jeq, 0, 6, SYS_PRCTL), (ld_w_abs, 0, 0, 16), (jeq, 0, 3, PR_SET_DUMPABLE), (ld_w_abs, 0, 0, 24),
        (jeq, 0, 1, 0), (ret, 0, 0, errno_ret | 1), (ret, 0, 0, allow),
    ]
    prog += [
        (jeq, 1, 0, 272), (jeq, 0, 3, 56),                                  # unshare / clone: check flags
        (ld_w_abs, 0, 0, 16), (jset, 0, 1, CLONE_NEWUSER), (ret, 0, 0, errno_ret | 1),
        (ret, 0, 0, allow),
    ]
    raw = b"".join(struct.pack("HBBI", *insn) for insn in prog)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.addressof(buf))
    libc_call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    rc = LIBC.prctl(PR_SET_SECCOMP, 2, ctypes.byref(fprog), 0, 0)
    if rc != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter refused")
    return True


def isolate_harness(job):
    """Namespace, uid and process-wide limits; done once, before any model code exists in a process."""
    libc_call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1 and not job.get("in_pid_namespace"):
        os._exit(EXIT_SETUP)  # the parent died before we set PDEATHSIG
    # Orphaned descendants are re-parented to this process, so the memory monitor sees the whole tree.
    libc_call("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    report = {"network_namespace": bool(job.get("network_isolated_by_launcher")), "uid": os.getuid(),
              "ipc_namespace": bool(job.get("in_ipc_namespace")), "interpreter_overlay": False}
    if job.get("unshare_network"):
        flags = CLONE_NEWNET | CLONE_NEWIPC
        libc_call("unshare", flags)
        report["network_namespace"] = report["ipc_namespace"] = True
        try:
            limit_sysv_shm(job)
        except OSError:
            pass
        try:
            report["interpreter_overlay"] = report["private_dev_shm"] = fallback_mounts(job)
        except OSError as exc:
            report["mount_error"] = str(exc)[:200]
        if not report.get("private_dev_shm"):
            job["tmpfs_dirs"] = []  # the host's /dev/shm is not ours to count
    if job.get("preimport") and not report["interpreter_overlay"]:
        preimport()
    if not report["ipc_namespace"]:
        job["_preexisting_shm"] = sorted(sysv_segments())
    os.chdir(job["workdir"])
    set_limit(resource.RLIMIT_CORE, 0)
    set_limit(resource.RLIMIT_NOFILE, job["max_open_files"])
    uid = job.get("sandbox_uid")
    if job.get("nproc_in_user_namespace"):
        # not root, inside bwrap's own user namespace: the kernel (>= 5.14) counts RLIMIT_NPROC there, i.e. only
        # this sample's processes (the harness's included), so a fork bomb stops here without a per-run uid
        set_limit(resource.RLIMIT_NPROC, job["max_processes"])
    if uid is not None:
        # RLIMIT_NPROC counts every process of the (fresh, per-run) uid: a fork bomb stops here. Root ignores it,
        # which is why we drop privileges; setresuid clears all capabilities.
        set_limit(resource.RLIMIT_NPROC, job["max_processes"])
        os.setgroups([])
        # The saved gid stays HARNESS_SAVED_GID, which no program process keeps (child_limits drops it): prlimit()
        # and ptrace need every id of the target to match the caller's, so the program can never change this
        # harness's resource limits (README "the harness's limits are out of the sample's reach").
        os.setresgid(uid, uid, HARNESS_SAVED_GID)
        os.setresuid(uid, uid, uid)
        report["uid"] = os.getuid()
    # A fresh anonymous session keyring owned by the per-run uid: nothing of the trainer's session keyring is
    # reachable, and the seccomp filter below refuses every keyring syscall to the program anyway.
    try:
        report["private_keyring"] = join_private_session_keyring() > 0
    except OSError as exc:
        # EPERM/ENOSYS/EACCES: keyrings are refused to this process altogether (a container's seccomp profile, a
        # kernel without keys), so there is no keyring to share; anything else is a failure the parent reports.
        report["private_keyring"] = exc.errno in (1, 13, 38)
        report["keyring_error"] = str(exc)[:200]
    # The harness itself is never dumpable (the program cannot ptrace it or read its memory); program processes
    # make themselves dumpable so that this process can read their memory use.
    libc_call("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
    libc_call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    report["no_new_privs"] = True
    try:
        report["no_user_namespaces"] = report["keyring_syscalls_blocked"] = block_user_namespaces(
            private_ipc=report["ipc_namespace"], private_net=report["network_namespace"])
    except OSError as exc:
        report["no_user_namespaces"] = False
        report["seccomp_error"] = str(exc)[:200]
    return report


def preimport():
    import importlib
    for name in FALLBACK_PREIMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


# ----------------------------------------------------------------------------------- whole-sample limits
def sysv_segments(strict=False):
    """{shmid: bytes} of the SysV shared-memory segments visible in this IPC namespace. ``strict`` (the monitor):
    a failed read other than a kernel without SysV IPC (ENOENT) refuses the sample."""
    out = {}
    try:
        with open("/proc/sysvipc/shm") as fh:
            header = fh.readline().split()
            for line in fh:
                row = dict(zip(header, line.split()))
                resident = int(row.get("rss", row.get("size", 0))) + int(row.get("swap", 0))
                out[int(row["shmid"])] = resident
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError) as exc:
        if strict:
            raise Violation("runtime_error", f"the sandbox's memory monitor could not read SysV segments: "
                                             f"{type(exc).__name__}") from None
    return out


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
GONE_ERRNOS = (2, 3)  # ENOENT, ESRCH: the process (or the fd) no longer exists


def refuse_unless_gone(exc, pid):
    """README "a process the monitor cannot read is refused": any failed read of a process that still exists
    (EMFILE after the program lowered our fd limit, ENOMEM, EIO, EACCES ...) ends the sample; only a process
    (or fd) that vanished in between is skipped."""
    if exc.errno in GONE_ERRNOS or _is_zombie(pid):
        return
    raise Violation("runtime_error", f"the sandbox's memory monitor could not read process {pid} "
                                     f"({exc.filename or ''}: "
                                     f"{os.strerror(exc.errno) if exc.errno else type(exc).__name__})")


def _stat_cpu_ticks(data):
    """utime + stime + cutime + cstime (clock ticks) from /proc/<pid>/stat: the process and its reaped children."""
    fields = data.rsplit(b")", 1)[1].split()
    return int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])


def run_delay_s(pid):
    """Seconds ``pid`` has spent runnable but waiting for a CPU (/proc/<pid>/schedstat): time a neighbour took."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


HARNESS_STOPS = []  # set by the SIGCONT handler: the harness was stopped (SIGSTOP/SIGTSTP) and continued
STOP_SIGNALS = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)


def _on_continued(signum, frame):
    HARNESS_STOPS.append(time.monotonic())


def watch_for_stops():
    """The program runs as the harness's uid, so it can SIGSTOP the harness, use memory while the monitor is
    frozen, then SIGCONT it. SIGSTOP cannot be caught, but the SIGCONT that resumes us can: any stop voids the
    sample (never continued: the parent's global deadline). The catchable stop signals are ignored."""
    signal.signal(signal.SIGCONT, _on_continued)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def restore_child_signals():
    """Program processes get the default dispositions back (a judge's interpreter has them)."""
    for sig in (signal.SIGCONT,) + STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


class Violation(Exception):
    def __init__(self, status, detail):
        super().__init__(detail)
        self.status, self.detail = status, detail


class Monitor:
    """Polls the whole sandbox (every process descended from this harness, shared-memory objects, private
    tmpfs mounts) against the sample's memory and process limits; RLIMIT_AS only bounds each process."""

    def __init__(self, job):
        self.limit = job["sample_memory_bytes"]
        self.max_processes = job["max_processes"]
        self.tmpfs = [d for d in job.get("tmpfs_dirs", ()) if os.path.isdir(d)]
        self.ignore_shm = set(job.get("_preexisting_shm", ()))
        self.me = os.getpid()
        self.main_child = None
        self.current = 0
        self.next_check = 0.0
        # The smallest private memory a live sandbox process was seen with. Shared objects (SysV segments,
        # memfds, tmpfs files) can outlive their creator: once no process is left they are charged with this
        # floor, because they did coexist with a live interpreter (otherwise 512 MiB of SysV segments under a
        # 512 MiB limit passes whenever the program exits between two polls).
        self.live_anon_floor = 0
        # CPU: a test may use timeout_s of CPU time over ALL its processes (as on a judge's one core), the sample
        # cpu_seconds_total; and the harness's own limits must stay as set (a same-uid program could prlimit them)
        self.timeout_s = float(job["timeout_s"])
        self.sample_cpu_s = float(job["cpu_seconds_total"])
        self.live_cpu_s = 0.0
        self.test_cpu_start = 0.0
        self.own_limits = harness_limits()

    def sample_cpu(self):
        """CPU seconds of the whole sample so far: the live processes (with their reaped children, as of the last
        poll) plus every descendant this harness reaped."""
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return self.live_cpu_s + usage.ru_utime + usage.ru_stime

    def start_test(self, persistent_pid=None):
        """Mark the start of a test (``persistent_pid``: the functional solution process that serves every call)."""
        self.live_cpu_s = 0.0
        if persistent_pid is not None:
            try:
                with open(f"/proc/{persistent_pid}/stat", "rb") as fh:
                    self.live_cpu_s = _stat_cpu_ticks(fh.read()) / CLOCK_TICKS
            except (OSError, IndexError, ValueError):
                pass
        self.test_cpu_start = self.sample_cpu()

    def descendants(self):
        out, stack = [], [self.me]
        while stack:
            pid = stack.pop()
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError as exc:
                refuse_unless_gone(exc, pid)
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/children") as fh:
                        kids = [int(k) for k in fh.read().split()]
                except OSError as exc:
                    refuse_unless_gone(exc, pid)
                    continue
                for kid in kids:
                    if pid == self.me and kid != self.main_child:  # orphan re-parented to us: reap if dead
                        try:
                            if os.waitpid(kid, os.WNOHANG)[0]:
                                continue
                        except ChildProcessError:
                            continue
                    out.append(kid)
                    stack.append(kid)
        return out

    def maybe_check(self):
        if time.monotonic() >= self.next_check or HARNESS_STOPS:
            self.check()

    def check(self):
        """Raise :class:`Violation` when the sandbox as a whole is over a limit (or the harness was stopped)."""
        self.next_check = time.monotonic() + MONITOR_INTERVAL_S
        if HARNESS_STOPS:
            raise Violation("runtime_error", "the sandbox harness was stopped (SIGSTOP) while the program ran")
        if harness_limits() != self.own_limits:
            raise Violation("runtime_error", "the sandbox harness's resource limits were changed while the program "
                                             "ran (prlimit)")
        pids = self.descendants()
        if len(pids) > self.max_processes:
            raise Violation("runtime_error", f"more than {self.max_processes} processes")
        total = self.usage(pids, precise=False)  # O(1) counters per process (no page-table walk)
        if total > self.limit:
            total = self.usage(pids, precise=True)  # PSS: pages shared after fork counted once
            if total > self.limit:
                raise Violation("memory_limit",
                                f"sandbox uses {total >> 20} MiB in all (limit {self.limit >> 20} MiB)")
        cpu = self.sample_cpu()
        if cpu - self.test_cpu_start > self.timeout_s:
            raise Violation("timeout", f"CPU time of the test's processes together over {self.timeout_s:g} s")
        if cpu > self.sample_cpu_s:
            raise Violation("timeout", f"CPU time of the sample's processes together over {self.sample_cpu_s:g} s")

    def usage(self, pids, precise):
        anon = shmem = objects = cpu_ticks = 0
        seen = set()
        for pid in pids:
            try:
                if precise:
                    with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
                        data = fh.read()
                else:
                    with open(f"/proc/{pid}/status", "rb") as fh:
                        data = fh.read()
                fds = os.listdir(f"/proc/{pid}/fd")
                with open(f"/proc/{pid}/stat", "rb") as fh:
                    cpu_ticks += _stat_cpu_ticks(fh.read())
            except PermissionError:
                # Every sandbox process is readable: the main child says so before the monitor meets it
                # (fork_program), its descendants inherit dumpable=1 and the seccomp filter refuses
                # PR_SET_DUMPABLE 0. So an unreadable one hides its memory: the sample is refused at once (the
                # kernel's memory cgroup, where there is one, bounds it whether read or not).
                if not _is_zombie(pid):
                    raise Violation("runtime_error", "a process hid from the sandbox's memory monitor (not readable)")
                continue
            except OSError as exc:  # EMFILE, ENOMEM, EIO ...: a read that fails hides the process: refused
                refuse_unless_gone(exc, pid)
                continue
            fields = {}
            for line in data.split(b"\n"):
                parts = line.split()
                if len(parts) >= 2 and parts[0].endswith(b":"):
                    fields[parts[0][:-1]] = int(parts[1]) if parts[1].isdigit() else 0
            if precise:
                anon += fields.get(b"Pss_Anon", fields.get(b"Anonymous", 0)) + fields.get(b"SwapPss", 0)
                shmem += fields.get(b"Pss_Shmem", 0)
            else:
                anon += fields.get(b"RssAnon", 0) + fields.get(b"VmSwap", 0)
                shmem += fields.get(b"RssShmem", 0)
            for fd in fds:
                path = f"/proc/{pid}/fd/{fd}"
                try:
                    if not os.readlink(path).startswith("/memfd:"):  # tmpfs files: counted by statvfs
                        continue
                    st = os.stat(path)
                except OSError as exc:  # the fd was closed in between (ENOENT) is fine; any other failure is not
                    refuse_unless_gone(exc, pid)
                    continue
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    objects += st.st_blocks * 512
        self.live_cpu_s = cpu_ticks / CLOCK_TICKS
        objects += sum(v for k, v in sysv_segments(strict=True).items() if k not in self.ignore_shm)
        for directory in self.tmpfs:
            try:
                st = os.statvfs(directory)
            except OSError as exc:
                raise Violation("runtime_error", f"the sandbox's memory monitor could not read {directory}: "
                                                 f"{exc.strerror}") from None
            objects += (st.f_blocks - st.f_bfree) * st.f_frsize
        anon_bytes = anon * 1024
        if pids and anon_bytes:
            self.live_anon_floor = min(self.live_anon_floor or anon_bytes, anon_bytes)
        elif not pids and objects:
            # whoever made the objects was alive with at least one anonymous page beside them; under load the
            # monitor may never have sampled it alive (a floor of 0 let segments filling shmall exactly, the
            # whole limit, pass as "correct")
            anon_bytes = self.live_anon_floor or resource.getpagesize()
        return anon_bytes + max(shmem * 1024, objects)


def harness_limits():
    """Every resource limit of this harness process (compared at each poll: see :meth:`Monitor.check`)."""
    return tuple(resource.getrlimit(getattr(resource, name)) for name in sorted(dir(resource))
                 if name.startswith("RLIMIT_"))


class TestClock:
    """A test's own time (README "a time-out is the sample's own"): wall time since the test started MINUS the
    time its main process spent runnable but waiting for a CPU (``/proc/<pid>/schedstat`` run_delay), so a
    neighbour that eats the CPUs cannot push an honest program over its limit, while a program that sleeps or
    spins still reaches it. CPU time over all the test's processes is bounded separately (:class:`Monitor`)."""

    def __init__(self, pid, timeout_s, start=None):
        self.pid, self.timeout_s = pid, timeout_s
        self.start = time.monotonic() if start is None else start
        self.delay_at_start = run_delay_s(pid) if start is None else 0.0

    def over(self):
        elapsed = time.monotonic() - self.start
        if elapsed <= self.timeout_s:
            return False
        return elapsed - max(0.0, run_delay_s(self.pid) - self.delay_at_start) > self.timeout_s


def kill_descendants(monitor, job):
    """SIGKILL every process descended from this harness, including those that left the process group with
    setsid (a group kill misses them; without a per-run uid no sweep reaches them either), until none is left."""
    kill_group(monitor.main_child) if monitor.main_child else None
    sweep_uid(job)  # as root: every process of the per-run uid at once
    give_up = time.monotonic() + 1.0  # bounded: the parent's own kill (group, cgroup, uid) follows in any case
    while time.monotonic() < give_up:
        try:
            pids = [pid for pid in monitor.descendants() if not _is_zombie(pid)]
        except Violation:
            break
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap_orphans()
    reap_orphans()


PF_EXITING = 0x4


def _is_zombie(pid):
    """Dead or exiting (PF_EXITING: its memory is being freed and /proc/<pid>/fd refuses everyone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return fields[0] in ("Z", "X") or bool(int(fields[6]) & PF_EXITING)
    except OSError as exc:  # gone: dead; any other failure (EMFILE ...) proves nothing: not dead
        return exc.errno in GONE_ERRNOS
    except (IndexError, ValueError):
        return True


def child_limits(job, cpu_seconds):
    # Deep recursion on the main thread (sys.setrecursionlimit + @lru_cache, whose C frames use the C stack):
    # the main thread's stack grows on demand up to RLIMIT_STACK, checked when it grows, so raising it here lets
    # the program recurse until the stack meets the mappings below it (>= 128 MiB away), as on a judge with a
    # large stack. Stack pages are anonymous memory: the sample's memory limit counts them.
    set_limit(resource.RLIMIT_STACK, job["memory_bytes"])
    set_limit(resource.RLIMIT_AS, job["memory_bytes"])
    set_limit(resource.RLIMIT_FSIZE, job["max_file_bytes"])
    set_limit(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1)


class LcbStdin(io.TextIOWrapper):
    """Real stdin, except ``readlines()`` follows LiveCodeBench's mock: the rest of the input split on ``\\n``
    (no line endings), so ``for line in sys.stdin.readlines(): print(line)`` prints no blank lines."""

    def readlines(self, hint=-1):
        return self.read().split("\n")


def std_stream(fd, name, mode, wrapper=io.TextIOWrapper, **options):
    """A text stream on ``fd`` built as CPython's ``create_stdio`` builds sys.stdin/stdout/stderr on POSIX: UTF-8,
    ``newline="\\n"`` (input is split at ``\\n`` only: a ``\\r`` stays, as for ``python3 prog.py < input`` and in
    LCB's ``StringIO``), and the ``name`` (``<stdin>``) and ``mode`` (``r``/``w``) a script finds there (the common
    fast-IO template reads ``sys.stdout.mode``)."""
    raw = io.FileIO(fd, mode, closefd=False)
    raw.name = name
    buffered = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
    stream = wrapper(buffered, encoding="utf-8", newline="\n", **options)
    stream.mode = mode
    return stream


def fresh_std_streams(lcb_readlines=False):
    """Text stdin/stdout/stderr on fds 0/1/2 of this (child) process, like a judge's interpreter's
    (:func:`std_stream`); ``sys.__stdin__`` and the others are the same objects, as at an interpreter's start, so
    what a program writes through ``sys.__stdout__`` is flushed at its end too."""
    sys.stdin = sys.__stdin__ = std_stream(0, "<stdin>", "r", LcbStdin if lcb_readlines else io.TextIOWrapper)
    sys.stdout = sys.__stdout__ = std_stream(1, "<stdout>", "w")
    sys.stderr = sys.__stderr__ = std_stream(2, "<stderr>", "w", errors="backslashreplace", write_through=True)


def program_module(name):
    """A fresh module registered in ``sys.modules`` under ``name`` (``__main__`` for stdin programs), so that
    pickle finds the program's functions by reference: ``multiprocessing.Pool.map(f, ...)`` works as on a judge
    that runs the program as a script."""
    import types
    module = types.ModuleType(name)
    module.__dict__["__builtins__"] = builtins
    sys.modules[name] = module
    return module.__dict__


def lcb_globals():
    """A fresh ``__main__`` namespace with LiveCodeBench's import prefix executed in it."""
    namespace = program_module("__main__")
    exec(LCB_IMPORT_STRING, namespace)
    return namespace


def finish_child(code, last_stderr=b""):
    """Flush the program's streams, write ``last_stderr`` on fd 2 after everything the program wrote, and exit."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            pass
    if last_stderr:
        try:
            os.write(2, last_stderr)
        except BaseException:
            pass
    os._exit(code)


def close_other_fds(keep):
    """Close every fd from 3 up except ``keep`` (closerange: one syscall per gap, not one per fd)."""
    low = 3
    for fd in sorted(k for k in keep if k >= 3) + [1 << 20]:
        os.closerange(low, fd)
        low = fd + 1


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


def reap_orphans():
    """Collect exited descendants re-parented to this (subreaper) harness."""
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def wait_nohang(pid):
    """``os.wait4(pid, WNOHANG)``: ``(pid, exit)`` once it has exited, ``exit`` being ``(wait status, CPU seconds
    of the process and its reaped children)`` (:func:`describe_exit` needs both); ``(0, None)`` while it runs."""
    done, status, usage = os.wait4(pid, os.WNOHANG)
    return done, ((status, usage.ru_utime + usage.ru_stime) if done else None)


def reap(pid, deadline):
    """waitpid with a deadline; returns the exit (see :func:`wait_nohang`), or None if still running or already
    reaped."""
    while True:
        try:
            done, ended = wait_nohang(pid)
        except ChildProcessError:  # reaped before (a solution process that died between two calls)
            return None
        if done:
            return ended
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.0005)


def become_readable(job, ready_w):
    """In the program's process, before any of its code: make it readable by the memory monitor, then say so on
    ``ready_w``. Two things stand in the way of the monitor's ptrace-mode reads (``/proc/<pid>/fd/*``): the
    harness itself is not dumpable, so a fresh fork is not either; and under a per-run uid the harness keeps a
    saved gid the program must not have, and while the ids differ the kernel refuses the reads too."""
    if job.get("sandbox_uid") is not None:  # drop the harness's saved gid: the program's ids differ from ours
        gid = os.getgid()
        os.setresgid(gid, gid, gid)
    libc_call("prctl", PR_SET_DUMPABLE, 1, 0, 0, 0)
    os.write(ready_w, b"r")
    os.close(ready_w)
    if job.get("test_after_ready_delay_s"):  # test hook: hold the rest of the setup under the monitor's first look
        time.sleep(float(job["test_after_ready_delay_s"]))


def fork_program(body):
    """Fork the program's process running ``body(ready_w)`` (it never returns) and return its pid once the memory
    monitor can read it. Until its prctl a fresh fork is unreadable, like a process hiding its memory; waiting here for the
    child's word means the monitor never meets an unreadable main child, so every unreadable process it meets is
    refused at once (under load the gap between fork and prctl has no bound a grace period could name).
    A child that fails before its prctl closes the pipe unwritten and exits; its exit status tells the rest."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        body(ready_w)
        os._exit(EXIT_SETUP)
    os.close(ready_w)
    try:
        os.read(ready_r, 1)  # b"r" or EOF (the child died first): either way nothing unreadable is left
    finally:
        os.close(ready_r)
    return pid


# rusage's CPU time of a process the kernel signalled at its RLIMIT_CPU can read a tick or so under the limit
# (measured: 0.9957 s at a 1 s limit); past the soft limit the program is over its time per test anyway
CPU_ACCOUNTING_SLACK_S = 0.05


def describe_exit(ended, cpu_limit_s, memory_error_reported=False):
    """Map a child's exit ``(wait status, CPU seconds)`` (:func:`wait_nohang`) to (status, detail).
    ``cpu_limit_s``: the soft RLIMIT_CPU the child ran under (:func:`child_limits`); ``memory_error_reported``:
    its stderr ends with :data:`MEMORY_ERROR_MARK`.

    A verdict names a limit only when the exit proves it, never from what the program can send or choose alone
    (``os.kill(os.getpid(), signal.SIGXCPU)``, ``os._exit(3)``): SIGXCPU is ``timeout`` only past the soft limit,
    exit status EXIT_MEMORY is ``memory_limit`` only with the harness's mark. SIGKILL names its cause only where
    it is known: RLIMIT_CPU's hard limit sends it to a process that survived the soft limit's SIGXCPU (its CPU
    time is then past the soft limit: ``timeout``). A kernel OOM kill inside the
    sample's memory cgroup is told apart by the parent (the cgroup's OOM counter: ``memory_limit``). Anything
    else is ``killed``: the program's own ``os.kill(os.getpid(), 9)`` / ``killpg``, a kill from outside the
    sandbox, or (without a memory cgroup) the kernel's OOM killer: which one cannot be known here."""
    status, cpu_s = ended
    over_cpu = cpu_s >= cpu_limit_s - CPU_ACCOUNTING_SLACK_S
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU and over_cpu:
            return "timeout", "CPU time limit (SIGXCPU)"
        if sig == signal.SIGKILL:
            if over_cpu:
                return "timeout", f"CPU time limit (SIGKILL at RLIMIT_CPU's hard limit, {cpu_s:.2f} s of CPU)"
            return "killed", (f"killed by SIGKILL (cause unknown; {cpu_s:.2f} s of CPU, under the "
                              f"{cpu_limit_s:g} s limit)")
        return "runtime_error", f"killed by signal {signal.Signals(sig).name}"
    code = os.WEXITSTATUS(status)
    if code == EXIT_OK:
        return "ok", ""
    if code == EXIT_MEMORY and memory_error_reported:
        return "memory_limit", "MemoryError"
    return "runtime_error", f"exit status {code}"


# ------------------------------------------------------------------------------------------------ stdin programs
def run_stdin_child(job, code_obj, input_text, out_w, err_w, ready_w):
    """Child process body: the program reads the test input from a real stdin and writes to a real stdout."""
    try:
        restore_child_signals()
        os.setpgid(0, 0)
        become_readable(job, ready_w)
        memfd = os.memfd_create("stdin", 0)
        os.write(memfd, input_text.encode("utf-8"))
        os.lseek(memfd, 0, os.SEEK_SET)
        os.dup2(memfd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        close_other_fds(())
        child_limits(job, job["cpu_seconds_per_test"])
        fresh_std_streams(lcb_readlines=True)
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
        finish_child(EXIT_MEMORY, MEMORY_ERROR_MARK)
    except BaseException as exc:
        try:
            sys.stderr.write(f"{type(exc).__name__}: {exc}"[:STDERR_TAIL])
        except BaseException:
            pass
        finish_child(EXIT_EXCEPTION)


def drain_nonblocking(fd, limit):
    """Everything readable from ``fd`` right now (up to ``limit`` bytes, then stop), without blocking."""
    os.set_blocking(fd, False)
    data = bytearray()
    try:
        while len(data) < limit:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            data.extend(chunk)
    finally:
        os.set_blocking(fd, True)
    return bytes(data)


def collect(pid, out_r, err_r, clock, out_cap, monitor, last, cpu_limit_s, job_delay_s=0.0):
    """Read a stdin-mode child's stdout (up to ``out_cap`` bytes) and stderr tail until it exits or times out;
    once it has exited, what is still in the pipes is read to the end (a grandchild may keep them open).
    ``cpu_limit_s``: the child's soft RLIMIT_CPU (:func:`describe_exit`)."""
    out, err = bytearray(), bytearray()
    open_fds = {out_r, err_r}
    status, verdict = None, None

    def take(fd, chunk):  # stdout is kept up to its cap (past it: the verdict), stderr as its last STDERR_TAIL bytes
        if fd == out_r:
            out.extend(chunk)
            return ("output_limit", f"more than {out_cap} bytes on stdout") if len(out) > out_cap else None
        err.extend(chunk)
        del err[:-STDERR_TAIL]
        return None

    while open_fds:
        try:  # first: a stop of this harness voids the sample even when it also made the test time out
            monitor.maybe_check()
        except Violation as exc:
            verdict = (exc.status, exc.detail)
            break
        if clock.over():
            verdict = ("timeout", "time limit per test (wall-clock time, waits for a CPU excluded)")
            break
        ready, _, _ = select.select(list(open_fds), [], [], MONITOR_INTERVAL_S)
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                open_fds.discard(fd)
            else:
                verdict = take(fd, chunk) or verdict
        if verdict:
            break
        if not ready:
            if job_delay_s:  # test hook: widen the window between the select timeout and the exit check
                time.sleep(job_delay_s)
            done, ended = wait_nohang(pid)
            if done:  # exited; a grandchild may still hold the pipes open, so do not wait for EOF, but read
                status = ended  # everything already in the pipes (written just before the exit) to the end
                for fd in sorted(open_fds):
                    chunk = drain_nonblocking(fd, out_cap + 1 - len(out) if fd == out_r else 1 << 20)
                    verdict = take(fd, chunk) or verdict
                break
    if verdict is None and status is None:
        status, verdict = wait_exit(pid, clock, monitor)
    if verdict is None:
        try:  # what the test leaves behind (other processes, shared memory) counts too; always after the last
            monitor.check() if last else monitor.maybe_check()
        except Violation as exc:
            verdict = (exc.status, exc.detail)
    kill_group(pid)
    if status is None:
        reap(pid, time.monotonic() + 5)
    if verdict is None:
        verdict = describe_exit(status, cpu_limit_s, err.endswith(MEMORY_ERROR_MARK))
    return verdict, bytes(out), bytes(err)


def wait_exit(pid, clock, monitor):
    """Wait for ``pid`` to exit (its pipes are closed) under the test's clock and the monitor: (exit, verdict),
    the exit as :func:`wait_nohang` gives it."""
    while True:
        try:
            done, ended = wait_nohang(pid)
        except ChildProcessError:
            return (0, 0.0), ("runtime_error", "the program's process vanished")
        if done:
            return ended, None
        try:
            monitor.maybe_check()
        except Violation as exc:
            return None, (exc.status, exc.detail)
        if clock.over():
            return None, ("timeout", "time limit per test (wall-clock time, waits for a CPU excluded)")
        time.sleep(0.001)


def run_stdin_tests(job, code_obj, monitor):
    for index, input_text in enumerate(job["inputs"]):
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        monitor.start_test()
        start = time.monotonic()

        def child(ready_w):
            os.close(out_r)
            os.close(err_r)
            run_stdin_child(job, code_obj, input_text, out_w, err_w, ready_w)

        pid = fork_program(child)
        monitor.main_child = pid
        monitor.next_check = 0.0  # the first poll reads the fresh process at once: it must be readable already
        os.close(out_w)
        os.close(err_w)
        (status, detail), out, err = collect(pid, out_r, err_r, TestClock(pid, job["timeout_s"], start),
                                             job["max_output_bytes"], monitor, index == len(job["inputs"]) - 1,
                                             job["cpu_seconds_per_test"],
                                             float(job.get("test_exit_check_delay_s") or 0.0))
        os.close(out_r)
        os.close(err_r)
        kill_descendants(monitor, job)
        if status == "runtime_error" and err:
            detail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [detail]
            detail = detail[0]
        emit({"event": "test", "i": index, "status": status, "detail": detail[:500],
              # base64: 4/3 of the bytes whatever they are (as JSON text, control characters take 6 bytes each)
              "stdout_b64": base64.b64encode(out).decode("ascii") if status == "ok" else "",
              "seconds": round(time.monotonic() - start, 4)})
        if status != "ok":
            return


# -------------------------------------------------------------------------------------------- functional calls
def to_wire(value, depth=0):
    """Encode a return value so the parent can rebuild it with the same ``==`` behaviour (tuple vs list, int
    dict keys, sets, Fraction/Decimal/complex). Custom objects become opaque markers: their ``__eq__`` must not
    decide the verdict. ``depth`` counts JSON nesting; deeper than MAX_WIRE_DEPTH raises RecursionError."""
    if depth > MAX_WIRE_DEPTH:
        raise RecursionError(f"return value nested deeper than {MAX_WIRE_DEPTH} levels")
    kind = type(value)
    if kind is int and not -(1 << 63) <= value < (1 << 63):
        # Big ints travel as hex: linear both ways and not subject to int/str digit limits in the parent.
        return {"__x": format(value, "x")}
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [to_wire(v, depth + 1) for v in value]
    if kind is tuple:
        return {"__t": [to_wire(v, depth + 2) for v in value]}
    if kind is dict:
        return {"__d": [[to_wire(k, depth + 3), to_wire(v, depth + 3)] for k, v in value.items()]}
    if kind is set:
        return {"__s": [to_wire(v, depth + 2) for v in value]}
    if kind is frozenset:
        return {"__f": [to_wire(v, depth + 2) for v in value]}
    module = getattr(kind, "__module__", "")
    if module == "fractions" and kind.__name__ == "Fraction":  # LCB: Fraction(5, 2) == 2.5
        return {"__q": [format(value.numerator, "x"), format(value.denominator, "x")]}
    if module == "decimal" and kind.__name__ == "Decimal":  # LCB: Decimal("2.5") == 2.5
        return {"__m": str(value)}
    if kind is complex:  # LCB: complex(2, 0) == 2
        return {"__c": [value.real, value.imag]}
    numpy_wire = numpy_to_wire(kind, value, depth)
    if numpy_wire is not None:
        return numpy_wire
    # Subclasses of builtins (defaultdict, Counter, namedtuple, str/int subclasses) compare like their base, by
    # what they ARE: their storage read through the base type's own slots (list.__iter__, dict.items, int.__int__
    # ...), never through methods the subclass may override (a list subclass storing [9, 9] whose __iter__ yields
    # the expected answer is [9, 9]). The type is type(value), not isinstance (a __class__ property can lie).
    for base, exact in SUBCLASS_STORAGE:
        if issubclass(kind, base):
            return to_wire(exact(value), depth + 1)
    return {"__o": f"{module}.{kind.__qualname__}"}


# numpy dtypes a returned numpy value travels as, by name (str: any unicode width; object: Python objects); the
# trusted parent rebuilds exactly these (code_verifier.NUMPY_WIRE_DTYPES) and compares with numpy, as LCB does
NUMPY_WIRE_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                               "float16", "float32", "float64", "longdouble", "complex64", "complex128", "str",
                               "object"})


def numpy_to_wire(kind, value, depth):
    """``{"__n": [form, dtype, item]}`` for a numpy scalar (form ``scalar``) or a one-element array (``array``),
    an opaque marker for another numpy array or dtype, None for a value that is not numpy's. LCB decides
    ``not (prediction == expected)``: an array of any other size raises there (a runtime error, never a pass); a
    one-element one passes when its element equals with numpy's casting (``np.array([5]) == [5]``,
    ``np.float32(0.1) == 0.1``). Read through numpy's base ndarray (a subclass's ``item`` or ``__eq__`` never
    runs). Only a program that imported numpy can return its values: numpy is never loaded here."""
    numpy = sys.modules.get("numpy")
    if numpy is None or not isinstance(getattr(numpy, "ndarray", None), type):
        return None
    if issubclass(kind, numpy.ndarray):
        form, array = "array", numpy.ndarray.view(value, numpy.ndarray)
    elif issubclass(kind, numpy.generic):
        form, array = "scalar", numpy.ndarray.view(numpy.asarray(value), numpy.ndarray)
    else:
        return None
    if array.size != 1:
        return {"__o": f"numpy.ndarray of {array.size} elements"}
    name = {"U": "str", "O": "object"}.get(array.dtype.kind, array.dtype.name)
    if array.dtype.kind == "f" and array.dtype.itemsize > 8:  # float128 / float96: no Python float holds it
        name = "longdouble"
    if name not in NUMPY_WIRE_DTYPES:
        return {"__o": f"numpy.{array.dtype.name}"}
    item = numpy.ndarray.item(array, 0)
    if name == "longdouble":
        item = str(item)  # numpy's shortest text that reads back as the same long double
    elif form == "scalar" and issubclass(kind, str):  # a str_ scalar keeps trailing NULs its array drops
        item = str.__str__(value)  # (np.str_("a\0") == "a" is False)
    return {"__n": [form, name, to_wire(item, depth + 2)]}


# (builtin base, its exact value of an instance of a subclass, read with the base's own C slots)
SUBCLASS_STORAGE = (
    (int, int.__int__),  # bool cannot be subclassed; int.__int__ returns the exact int stored
    (float, float.__float__),
    (str, str.__str__),
    (dict, lambda v: dict(dict.items(v))),
    (list, lambda v: list(list.__iter__(v))),
    (tuple, lambda v: tuple(tuple.__iter__(v))),
    (frozenset, lambda v: frozenset(frozenset.__iter__(v))),
    (set, lambda v: set(set.__iter__(v))),
    (complex, lambda v: complex(complex.real.__get__(v), complex.imag.__get__(v))),
)


def run_functional_child(job, code_text, req_r, rep_w, ready_w):
    """Child process body: exec the solution once, then answer one call per request line (LCB grade_call_based)."""
    try:
        restore_child_signals()
        os.setpgid(0, 0)
        become_readable(job, ready_w)
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
        module = program_module("tmp_sol")
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
            if issubclass(type(prediction), tuple):  # LCB: "don't penalize model if it produces tuples"
                prediction = list(tuple.__iter__(prediction))  # its storage, not what an override says
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


def read_reply(fd, buffer, clock, cap, monitor):
    while b"\n" not in buffer:
        monitor.maybe_check()
        if clock.over():
            return None
        ready, _, _ = select.select([fd], [], [], MONITOR_INTERVAL_S)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return ""
        buffer.extend(chunk)
        if len(buffer) > cap:
            return ""
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line.decode("utf-8", "replace")


def run_functional_tests(job, monitor):
    try:
        run_functional_calls(job, monitor)
    except Violation as exc:
        kill_group(monitor.main_child)
        reap(monitor.main_child, time.monotonic() + 5)
        kill_descendants(monitor, job)
        emit({"event": "test", "i": monitor.current, "status": exc.status, "detail": exc.detail})
        raise


def run_functional_calls(job, monitor):
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    def child(ready_w):
        os.close(req_w)
        os.close(rep_r)
        run_functional_child(job, job["code"], req_r, rep_w, ready_w)

    pid = fork_program(child)
    monitor.main_child = pid
    monitor.next_check = 0.0  # the first poll reads the fresh process at once: it must be readable already
    monitor.current = 0
    os.close(req_r)
    os.close(rep_w)
    buffer = bytearray()
    monitor.start_test()

    def stop(event):
        kill_group(pid)
        reap(pid, time.monotonic() + 5)
        kill_descendants(monitor, job)
        emit(event)

    line = read_reply(rep_r, buffer, TestClock(pid, job["timeout_s"], time.monotonic()), job["max_output_bytes"],
                      monitor)
    if line is None:
        return stop({"event": "test", "i": 0, "status": "timeout", "detail": "loading the solution timed out"})
    hello = json.loads(line) if line else {"ready": False, "status": "runtime_error", "detail": "solution died"}
    if not hello.get("ready"):
        status = hello.get("status", "runtime_error")
        if not line:
            status, detail = describe_exit(reap(pid, time.monotonic() + 1) or (0, 0.0), job["cpu_seconds_total"])
            hello["detail"] = detail
        return stop({"event": "test", "i": 0, "status": status if status != "ok" else "runtime_error",
                     "detail": hello.get("detail", "")})
    for index, args in enumerate(job["inputs"]):
        monitor.current = index
        monitor.start_test(pid)
        start = time.monotonic()
        clock = TestClock(pid, job["timeout_s"])
        try:
            os.write(req_w, (json.dumps(args) + "\n").encode("utf-8"))
        except OSError:
            line = ""
        else:
            line = read_reply(rep_r, buffer, clock, job["max_output_bytes"], monitor)
        seconds = round(time.monotonic() - start, 4)
        if line is None:
            return stop({"event": "test", "i": index, "status": "timeout", "detail": "wall-clock limit per test",
                         "seconds": seconds})
        if line == "":
            ended = reap(pid, time.monotonic() + 1)
            verdict, detail = describe_exit(ended, job["cpu_seconds_total"]) if ended is not None \
                else ("runtime_error", "no reply")
            return stop({"event": "test", "i": index, "status": verdict if verdict != "ok" else "runtime_error",
                         "detail": detail or "the solution process exited", "seconds": seconds})
        if line.startswith(OK_REPLY_PREFIX) and line.endswith("}"):
            # A returned value is forwarded as the text the child wrote, never decoded here: decoding a cheap
            # value such as [[]] * 10**7 would cost this process gigabytes outside every limit. The parent caps
            # and decodes it (bounded); the harness's own keys come after it, so the value cannot override them.
            monitor.check() if index == len(job["inputs"]) - 1 else monitor.maybe_check()
            own = json.dumps({"event": "test", "i": index, "status": "ok", "detail": "", "seconds": seconds})
            emit_text('{"value": ' + line[len(OK_REPLY_PREFIX):-1] + ", " + own[1:] + "\n")
            continue
        try:
            result = json.loads(line) if len(line) <= MAX_DECODED_REPLY else {}
        except ValueError:
            result = {}
        if not isinstance(result, dict) or result.get("status") in (None, "ok"):
            result = {"status": "runtime_error", "detail": "garbled reply"}
        event = {"event": "test", "i": index, "status": result.get("status", "runtime_error"),
                 "detail": str(result.get("detail", ""))[:500], "seconds": seconds}
        return stop(event)
    kill_group(pid)
    reap(pid, time.monotonic() + 5)
    kill_descendants(monitor, job)


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
    report = isolate_harness(job)
    watch_for_stops()
    emit({"event": "ready", **report})
    monitor = Monitor(job)
    if job["mode"] == "stdin":
        try:
            code_obj = compile(job["code"], "<solution>", "exec")
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
            emit({"event": "test", "i": 0, "status": "compile_error", "detail": f"{type(exc).__name__}: {exc}"[:500]})
            return
        run_stdin_tests(job, code_obj, monitor)
    else:
        try:
            compile(LCB_IMPORT_STRING + "\n\n" + job["code"], "<solution>", "exec")
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
            emit({"event": "test", "i": 0, "status": "compile_error", "detail": f"{type(exc).__name__}: {exc}"[:500]})
            return
        try:
            run_functional_tests(job, monitor)
        except Violation:
            return
    emit({"event": "done"})

PROTO_FD = 1
if __name__ == "__main__":
    main()
