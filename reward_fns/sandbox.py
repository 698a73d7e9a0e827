"""How model-written code is isolated on this machine: detection, the launch command, and cleanup.

Two backends (see ``reward_fns/README.md`` for the full table):

* ``bwrap`` (bubblewrap, installed by CI): read-only view of ``/``, ``/root`` and ``/home`` hidden, a private
  size-capped tmpfs ``/tmp`` as the working directory, fresh ``/dev`` and ``/proc``, new network, pid, ipc and uts
  namespaces, ``--die-with-parent``; as root, every capability is dropped except setuid/setgid, which the harness
  uses once to become a fresh unprivileged uid.
* ``fallback`` (no usable bwrap): a fresh interpreter in a new session, in an empty temporary directory owned by
  the per-run uid; as root, the harness unshares the network namespace itself and drops to the per-run uid.
  What this lacks is reported by :func:`detect_isolation` (a warning is logged once, and callers can read
  ``IsolationReport.missing``).

In both backends the harness sets resource limits on each child (address space, CPU time, file size, open
files, number of processes for the per-run uid, no core files), and the parent kills the whole tree on timeout.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

HARNESS_PATH = Path(__file__).with_name("_code_harness.py")
SANDBOX_TMPFS_BYTES = 64 * 1024 * 1024
SANDBOX_UID_BASE = 1_000_000_000
SANDBOX_UID_SPAN = 1 << 28
HIDDEN_DIRS = ("/root", "/home")
MINIMAL_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONIOENCODING": "utf-8"}

PROTECTIONS: dict[str, str] = {
    "fresh_interpreter": "each response runs in a new `python -I` process, never in the reward worker",
    "process_group_kill": "own session/process group; the parent SIGKILLs the whole group on timeout",
    "resource_limits": "RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE=0 per child",
    "minimal_environment": "only PATH, LANG/LC_ALL, PYTHONHASHSEED, OMP_NUM_THREADS, PYTHONDONTWRITEBYTECODE",
    "expected_outputs_withheld": "expected outputs never enter the sandbox; the parent compares",
    "private_uid": "runs as a fresh unprivileged uid per run: RLIMIT_NPROC stops fork bombs, it cannot signal "
                   "other users' processes or write files it does not own, and leftovers are swept by uid",
    "network_namespace": "new network namespace: no interfaces except a down loopback",
    "pid_namespace": "new pid namespace: sees and can signal only its own processes; all die with the run",
    "readonly_filesystem": "everything outside a private size-capped /tmp is read-only",
    "hidden_home": "/root and /home are replaced by empty directories",
    "minimal_filesystem": "only the interpreter's prefixes, /usr, /lib*, a few /etc files, a minimal /dev, a "
                          "private /proc and /tmp are visible (no /data, /mnt, /srv, /opt, /var ...)",
    "sample_memory_limit": "memory is limited for the whole sample (every process, SysV/POSIX shared memory, "
                           "memfds, tmpfs files), not only per process",
    "sample_process_limit": "the number of processes is limited for the whole sample",
    "ipc_namespace": "private IPC namespace: SysV segments are invisible to the host and die with the run",
    "no_new_privs": "PR_SET_NO_NEW_PRIVS: setuid binaries and file capabilities grant nothing",
    "no_user_namespaces": "creating user namespaces is refused (seccomp), so no namespace-root capabilities",
    "private_keyrings": "a fresh empty session keyring per sample and every keyring syscall refused (seccomp): no key "
                        "of the trainer is readable and no key survives into a later sample",
}


class SandboxUnavailable(RuntimeError):
    """The requested isolation backend cannot run on this machine (e.g. ``IBPO_SANDBOX=bwrap`` without bwrap)."""


@dataclass(frozen=True)
class IsolationReport:
    """What the code sandbox enforces here. ``missing`` names protections of :data:`PROTECTIONS` it lacks."""

    backend: str
    enforced: tuple[str, ...]
    missing: tuple[str, ...]
    is_root: bool
    bwrap_path: str | None
    note: str = ""
    limits: tuple = ()  # (("memory", how), ("pids", how), ("ipc", how)): what really bounds the whole sample
    memory_cgroup: bool = False  # a per-sample memory cgroup (kernel-enforced) bounds the sample's memory

    @property
    def limit_mechanisms(self) -> dict[str, str]:
        """How memory, process count and IPC objects are bounded for the sample as a whole."""
        return dict(self.limits)

    @property
    def complete(self) -> bool:
        """True when every protection in :data:`PROTECTIONS` is enforced."""
        return not self.missing

    def describe(self) -> str:
        """One paragraph for logs and warnings."""
        text = f"code sandbox backend={self.backend}; enforced: {', '.join(self.enforced)}"
        if self.limits:
            text += "; limits: " + ", ".join(f"{k}={v}" for k, v in self.limits)
        if self.missing:
            text += f"; MISSING: {', '.join(self.missing)}"
        return text + (f" ({self.note})" if self.note else "")


PROBE_CODE = "import encodings, json, ctypes, resource, select, calendar, hashlib, csv, uuid, base64; print('ok')"
# As root the harness drops to a per-run uid before the program imports anything: the probe does the same.
PROBE_AS_UID = "import os\nos.setgroups([])\nos.setresgid({0}, {0}, {0})\nos.setresuid({0}, {0}, {0})\n"


NPROC_IN_NAMESPACE = "RLIMIT_NPROC counted in the sample's own user namespace (Linux >= 5.14), plus the monitor count"


def nproc_counted_per_user_namespace(release: str | None = None) -> bool:
    """Whether the kernel counts RLIMIT_NPROC per (user namespace, uid): Linux 5.14 moved it onto ucounts
    ("Reimplement RLIMIT_NPROC on top of ucounts"), so inside bwrap's own user namespace the limit counts only the
    sample's processes, not every process the trainer's user runs on the host. Before 5.14 a limit of 64 would
    count the trainer's threads too and refuse the harness's own forks, so it is only set from 5.14 on."""
    match = re.match(r"(\d+)\.(\d+)", os.uname().release if release is None else release)
    return match is not None and (int(match[1]), int(match[2])) >= (5, 14)


def _bwrap_works(bwrap: str, is_root: bool) -> tuple[bool, str]:
    """Run the real sandbox command line once with the real interpreter (namespaces can be forbidden in
    containers, and an interpreter under /tmp or a home directory must be visible inside)."""
    code = (PROBE_AS_UID.format(new_sandbox_uid()) if is_root else "") + PROBE_CODE
    argv = _bwrap_prefix(bwrap, is_root) + ["--", sys.executable, "-I", "-c", code]
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{bwrap} could not run: {exc}"
    if proc.returncode != 0 or proc.stdout.strip() != b"ok":
        return False, (f"{bwrap} cannot run {sys.executable} (exit {proc.returncode}): "
                       f"{proc.stderr.decode('utf-8', 'replace')[-300:]}")
    return True, ""


# What the trusted (trainer-side) process does with a sample's output is bounded before the work; see
# reward_fns/README.md "Trusted side's bounds" and code_verifier.reply_cap / wire_equals.
TRUSTED_SIDE = ("stdout capped at clamp(10 x longest expected, 1 MiB, 64 MiB), compared line by line; a functional "
                "reply over 16 x expected JSON + 64 KiB is wrong_answer unread, under it refused if nested > 200 "
                "levels, then compared on its JSON form in linear time (no value rebuilt, no set/dict built from "
                "untrusted keys, no Fraction normalised); the harness forwards values undecoded")
MONITOR = ("harness monitor (RSS counters of every process, confirmed by PSS, + memfds + SysV + tmpfs, every 20 ms; "
           "a process it cannot read is refused) and RLIMIT_AS per process")


def memory_mechanism(extra: str = "") -> tuple[str, bool]:
    """How the sample's memory is bounded here, and whether a kernel cgroup does it."""
    parent = memory_cgroup_parent()
    if parent is None:
        return MONITOR + extra, False
    files = "memory.limit_in_bytes" if parent[1] == 1 else "memory.max"
    return (f"kernel: a memory cgroup v{parent[1]} per sample ({files} = limit + {CGROUP_SLACK_BYTES >> 20} MiB "
            f"for the harness; an OOM kill in it is memory_limit), plus the {MONITOR}{extra}"), True


def _fallback_report(is_root: bool, bwrap: str | None, note: str) -> IsolationReport:
    enforced = ["fresh_interpreter", "process_group_kill", "resource_limits", "minimal_environment",
                "expected_outputs_withheld", "no_new_privs", "sample_memory_limit"]
    memory, cgroup = memory_mechanism("; /tmp and /dev/shm tmpfs capped" if is_root else "")
    if is_root:
        enforced += ["private_uid", "network_namespace", "ipc_namespace", "sample_process_limit",
                     "minimal_filesystem", "hidden_home", "private_keyrings"]
        limits = (("memory", memory), ("pids", "RLIMIT_NPROC of the per-run uid"),
                  ("ipc", "private IPC namespace, SysV capped at the memory limit"), ("cpu", cpu_mechanism()),
                  ("trusted_side", TRUSTED_SIDE))
    else:
        limits = (("memory", memory_mechanism(" (SysV segments of the host namespace not attributed)")[0]),
                  ("pids", "harness monitor count only (racy: no RLIMIT_NPROC without root)"),
                  ("ipc", "none: host IPC namespace; SysV msg/sem and POSIX mqueues refused (seccomp)"),
                  ("cpu", cpu_mechanism()), ("trusted_side", TRUSTED_SIDE))
    if _seccomp_supported():
        enforced.append("no_user_namespaces")
        if "private_keyrings" not in enforced:
            enforced.append("private_keyrings")
    missing = tuple(p for p in PROTECTIONS if p not in enforced)
    return IsolationReport("fallback", tuple(enforced), missing, is_root, bwrap, note, limits, cgroup)


def _seccomp_supported() -> bool:
    import platform
    return platform.machine() == "x86_64"


@functools.lru_cache(maxsize=None)
def detect_isolation(mode: str | None = None) -> IsolationReport:
    """Pick the backend: ``mode`` (or env ``IBPO_SANDBOX``) is ``auto`` (default), ``bwrap`` or ``fallback``.

    ``bwrap`` raises :class:`SandboxUnavailable` when bubblewrap cannot run; ``auto`` falls back with a warning
    naming the protections it lacks.
    """
    mode = (mode or os.environ.get("IBPO_SANDBOX") or "auto").lower()
    if mode not in ("auto", "bwrap", "fallback"):
        raise ValueError(f"IBPO_SANDBOX must be auto, bwrap or fallback, got {mode!r}")
    is_root = os.geteuid() == 0
    bwrap = shutil.which("bwrap")
    if mode != "fallback":
        ok, why = _bwrap_works(bwrap, is_root) if bwrap else (False, "bwrap (bubblewrap) is not installed")
        if ok:
            nproc_in_namespace = not is_root and nproc_counted_per_user_namespace()
            lacking = set() if is_root else {"private_uid"}
            if not is_root and not nproc_in_namespace:
                lacking.add("sample_process_limit")
            if not _seccomp_supported():
                lacking.update({"no_user_namespaces", "private_keyrings"})
            enforced = tuple(p for p in PROTECTIONS if p not in lacking)
            missing = tuple(p for p in PROTECTIONS if p not in enforced)
            note = "" if is_root else "not root: cannot switch to a per-run uid" + (
                "" if nproc_in_namespace else ", and this kernel counts RLIMIT_NPROC per host user: left unset")
            memory, cgroup = memory_mechanism("; /tmp and /dev/shm tmpfs capped")
            pids = ("RLIMIT_NPROC of the per-run uid" if is_root else
                    NPROC_IN_NAMESPACE if nproc_in_namespace else "harness monitor count only")
            limits = (("memory", memory), ("pids", pids),
                      ("ipc", "private IPC namespace (--unshare-ipc)"), ("cpu", cpu_mechanism()),
                      ("trusted_side", TRUSTED_SIDE))
            report = IsolationReport("bwrap", enforced, missing, is_root, bwrap, note, limits, cgroup)
            if missing:
                logger.warning(report.describe())
            return report
        if mode == "bwrap":
            raise SandboxUnavailable(f"IBPO_SANDBOX=bwrap but {why}")
        report = _fallback_report(is_root, bwrap, why)
    else:
        report = _fallback_report(is_root, bwrap, "IBPO_SANDBOX=fallback")
    logger.warning("%s. Install bubblewrap (apt-get install bubblewrap) for full isolation.", report.describe())
    return report


SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives",
             "/etc/nsswitch.conf", "/etc/passwd", "/etc/group")


def _bwrap_prefix(bwrap: str, is_root: bool) -> list[str]:
    """bubblewrap options shared by the probe and every run (everything before ``--``).

    Nothing of the host is visible except the system directories, a few /etc files and the interpreter's own
    prefixes (bound read-only at their real paths, after the private /tmp so a venv under /tmp stays visible)."""
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-net", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try"]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in ETC_FILES:
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    argv += ["--perms", "01777", "--size", str(SANDBOX_TMPFS_BYTES), "--tmpfs", "/tmp",
             "--dev", "/dev", "--perms", "01777", "--size", str(SANDBOX_TMPFS_BYTES), "--tmpfs", "/dev/shm",
             "--proc", "/proc"]
    made: set[str] = set()
    for source, dest in _interpreter_binds():
        parts = Path(dest).parts
        for depth in range(2, len(parts)):  # traversable parents for the per-run uid (e.g. /root, /root/.pyenv)
            parent = str(Path(*parts[:depth]))
            if parent not in made and parent != "/tmp":
                argv += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        argv += ["--ro-bind", source, dest]
    argv += ["--remount-ro", "/", "--chdir", "/tmp", "--clearenv"]
    for key, value in MINIMAL_ENV.items():
        argv += ["--setenv", key, value]
    argv += ["--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp"]
    if is_root:
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return argv


def _interpreter_prefixes() -> list[str]:
    """Paths the interpreter needs, as the process names them and as they really are (symlinks resolved):
    the venv (``sys.prefix``), the base installation, exec prefixes, the executable's own tree."""
    exe_tree = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    real_exe_tree = os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, exe_tree, real_exe_tree}
    out = set()
    for path in paths:
        if path and os.path.isdir(path):
            out.add(os.path.abspath(path))
            out.add(os.path.realpath(path))
    return sorted(out)


@functools.lru_cache(maxsize=1)
def _interpreter_binds() -> tuple[tuple[str, str], ...]:
    """(source, destination) read-only binds for bwrap; paths under the system dirs are already visible."""
    system = tuple(os.path.realpath(d) for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d))
    dests = [p for p in _interpreter_prefixes() if not any(p == s or p.startswith(s + "/") for s in system)]
    # Drop nested duplicates so each tree is bound once (a bind of the parent shows the child).
    dests = [d for d in dests if not any(d != o and d.startswith(o + "/") for o in dests)]
    return tuple((os.path.realpath(d), d) for d in dests)


def _interpreter_dirs() -> list[str]:
    """Real directories of the Python installation and venv (used by the fallback's overlays)."""
    dirs = {os.path.realpath(p) for p in _interpreter_prefixes()}
    return sorted(d for d in dirs if not any(d != o and d.startswith(o + "/") for o in dirs))


# Top-level directories the root fallback leaves visible (bwrap shows the same system trees; /etc is reduced to
# ETC_FILES below, /tmp holds the work dirs, /proc and /dev are the kernel's).
FALLBACK_VISIBLE_TOP = frozenset({"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "proc", "dev", "tmp"})


def _fallback_overlays(workdir: str | None = None) -> list[list]:
    """What the root fallback hides, as ``[[directory, [paths kept visible inside it]], ...]``: every top-level
    directory except :data:`FALLBACK_VISIBLE_TOP` (so ``/home``, ``/root``, ``/srv``, ``/opt``, ``/mnt``, ``/var``,
    ``/work``, ``/sys``, ``/run`` ... are empty, as under bwrap), ``/etc`` except :data:`ETC_FILES`, and any deeper
    directory the per-run uid cannot traverse that holds the interpreter. Each is replaced, inside the harness's
    own mount namespace, by a tmpfs holding read-only binds of just the interpreter's prefixes (and the work dir
    when it lives there)."""
    keep = _interpreter_dirs() + ([os.path.realpath(workdir)] if workdir else [])
    plan: dict[str, list[str]] = {}
    try:
        tops = sorted(os.listdir("/"))
    except OSError:
        tops = []
    for name in tops:
        path = "/" + name
        if name in FALLBACK_VISIBLE_TOP or os.path.islink(path) or not os.path.isdir(path):
            continue
        if name == "etc":
            plan[path] = [p for p in ETC_FILES if os.path.exists(p)]
        else:
            plan[path] = [k for k in keep if k.startswith(path + "/")]
    for prefix in _interpreter_dirs():
        parts = Path(prefix).parts
        for depth in range(2, len(parts)):
            ancestor = str(Path(*parts[:depth]))
            if any(ancestor == h or ancestor.startswith(h + "/") for h in plan):
                break  # already under a hidden top-level directory
            try:
                mode = os.stat(ancestor).st_mode
            except OSError:
                break
            if not mode & 0o001:
                plan.setdefault(ancestor, []).append(prefix)
                break
    return [[hidden, sorted(set(prefixes))] for hidden, prefixes in plan.items()]


@functools.lru_cache(maxsize=1)
def harness_source() -> str:
    """The harness program, passed with ``-c`` so it needs no file visible inside the sandbox."""
    return HARNESS_PATH.read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def harness_command() -> tuple[str, ...]:
    """``python -I -S -c <site dirs + harness>``. ``-S`` skips ``site``: processing the environment's ``.pth``
    files (an editable install's import finder pulls in pathlib and more) cost about 25 of the 40 ms an idle
    interpreter needs to start, once per sample. The site-packages directories themselves are appended to
    ``sys.path`` exactly where ``site`` would put them, so the program still imports numpy & co."""
    import site
    dirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
    prefix = f"import sys\nsys.path.extend({dirs!r})\n"
    return (sys.executable, "-I", "-S", "-c", prefix + harness_source())



# ------------------------------------------------------------------------ kernel bound on the sample's memory
# A per-sample memory cgroup: the kernel charges every page of every process of the sample (anonymous memory,
# tmpfs/shm files, SysV segments, page tables) to it and OOM-kills inside it past ``memory.max`` /
# ``memory.limit_in_bytes``; nothing depends on reading the processes in time (a non-dumpable burst of three
# 250 MiB children that exits within a poll interval still hits it). Used wherever this process may create one
# (root with a writable cgroup v1 memory hierarchy -- this machine and CI -- or a delegated cgroup v2 with the
# memory controller); elsewhere the harness monitor refuses any sample process it cannot read.
CGROUP_SLACK_BYTES = 64 * 1024 * 1024  # the harness interpreter and the job it reads share the cgroup
CGROUP_PREFIX = "ibpo-sample-"


def _cgroup_mounts() -> list[tuple[str, str, str, str]]:
    """(mount root, mount point, fstype, super options) of the cgroup mounts in /proc/self/mountinfo."""
    out = []
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                pre, _, post = line.partition(" - ")
                fields, tail = pre.split(), post.split()
                if len(fields) >= 5 and tail and tail[0] in ("cgroup", "cgroup2"):
                    out.append((fields[3], fields[4], tail[0], tail[2] if len(tail) > 2 else ""))
    except OSError:
        pass
    return out


def _memory_cgroup_candidates(controller: str = "memory") -> list[tuple[str, int]]:
    """Directories of this process's own ``controller`` cgroup, (path, version): v1 first, then v2."""
    try:
        with open("/proc/self/cgroup") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    mounts = _cgroup_mounts()
    found = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        v1 = controller in controllers.split(",")
        if not v1 and controllers != "":
            continue
        for root, point, fstype, options in mounts:
            if (fstype == "cgroup" and v1 and controller in options.split(",")) or (fstype == "cgroup2" and not v1):
                if path == root or path.startswith(root.rstrip("/") + "/") or root == "/":
                    rel = path[len(root):] if root != "/" else path
                    found.append((os.path.join(point, rel.lstrip("/")), 1 if v1 else 2))
    return sorted(set(found), key=lambda c: c[1])


def _limit_files(version: int) -> tuple[str, ...]:
    return ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes") if version == 1 else ("memory.max", "memory.swap.max")


@functools.lru_cache(maxsize=1)
def memory_cgroup_parent() -> tuple[str, int] | None:
    """Where per-sample memory cgroups can be made here, ``(directory, version)``, or None. Probed once by
    making one, limiting it and removing it. ``IBPO_SANDBOX_CGROUP=0`` disables them."""
    if os.environ.get("IBPO_SANDBOX_CGROUP", "1") == "0":
        return None
    for directory, version in _memory_cgroup_candidates():
        probe = os.path.join(directory, f"{CGROUP_PREFIX}probe-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            os.mkdir(probe)
        except OSError:
            continue
        try:
            with open(os.path.join(probe, _limit_files(version)[0]), "w") as fh:
                fh.write(str(256 << 20))
            if os.path.exists(os.path.join(probe, "cgroup.procs")):
                return directory, version
        except OSError:
            continue
        finally:
            try:
                os.rmdir(probe)
            except OSError:
                pass
    return None


class MemoryCgroup:
    """One sample's memory cgroup: made before the launch, the launcher moves itself in before exec (so every
    process of the sample is born inside), read for OOM kills after the run, removed at cleanup."""

    def __init__(self, parent: str, version: int, limit_bytes: int):
        self.version = version
        self.limit_bytes = limit_bytes + CGROUP_SLACK_BYTES
        self.path = os.path.join(parent, f"{CGROUP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}")
        os.mkdir(self.path)
        try:
            main, swap = _limit_files(version)
            self._write(main, str(self.limit_bytes))
            try:  # no swap beyond the limit either (absent without swap accounting)
                self._write(swap, str(self.limit_bytes) if version == 1 else "0")
            except OSError:
                pass
        except BaseException:
            self.remove()
            raise

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.path, name), "w") as fh:
            fh.write(value)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started from a shell that first moves itself into the cgroup: if that fails, nothing runs."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(self.path, "cgroup.procs")] + argv

    def oom_kills(self) -> int:
        """How many processes the kernel killed for this cgroup's limit (v1 ``memory.oom_control``, v2
        ``memory.events``), plus, on v1, 1 when the cgroup is still under OOM."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            with open(os.path.join(self.path, name)) as fh:
                fields = dict(line.split()[:2] for line in fh if len(line.split()) >= 2)
        except OSError:
            return 0
        return int(fields.get("oom_kill", 0)) + int(fields.get("under_oom", 0)) + \
            (int(fields.get("oom", 0)) if self.version == 2 else 0)

    def pids(self) -> list[int]:
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as fh:
                return [int(p) for p in fh.read().split()]
        except (OSError, ValueError):
            return []

    def kill_all(self) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, 9)
            except OSError:
                pass

    def remove(self) -> None:
        """Remove the (emptied) cgroup; processes killed a moment ago may still be leaving it."""
        import time
        for _ in range(100):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                self.kill_all()
                time.sleep(0.01)
        logger.error("could not remove the sample's memory cgroup %s", self.path)


def new_memory_cgroup(limit_bytes: int) -> MemoryCgroup | None:
    """A fresh memory cgroup bounding a sample at ``limit_bytes`` (+ the harness's slack), or None where this
    machine gives none (then the harness monitor is the bound, and it refuses processes it cannot read)."""
    parent = memory_cgroup_parent()
    if parent is None:
        return None
    try:
        return MemoryCgroup(parent[0], parent[1], limit_bytes)
    except OSError as exc:
        logger.error("could not make a memory cgroup under %s (%s); the harness monitor bounds this sample",
                     parent[0], exc)
        return None


# ------------------------------------------------------------------------ kernel bound on the sample's CPU
# A per-sample cpu cgroup with a quota of one CPU (v1 ``cpu.cfs_quota_us`` = ``cpu.cfs_period_us``, v2 ``cpu.max``):
# however many processes or sessions a sample makes, together they get at most one CPU, and as a group of its own
# the sample competes with its neighbours as ONE entity (autogrouping gives each session its own share only in
# the root cgroup). The harness also bounds CPU time over the whole process tree, with or without this cgroup.
CPU_QUOTA_PERIOD_US = 100_000


@functools.lru_cache(maxsize=1)
def cpu_cgroup_parent() -> tuple[str, int] | None:
    """Where per-sample cpu cgroups can be made here, ``(directory, version)``, or None (probed once).
    ``IBPO_SANDBOX_CGROUP=0`` disables them too."""
    if os.environ.get("IBPO_SANDBOX_CGROUP", "1") == "0":
        return None
    for directory, version in _memory_cgroup_candidates("cpu"):
        if version == 2 and not os.path.exists(os.path.join(directory, "cgroup.subtree_control")):
            continue
        try:
            probe = CpuCgroup(directory, version)
        except OSError:
            continue
        probe.remove()
        return directory, version
    return None


class CpuCgroup:
    """One sample's cpu cgroup (one CPU for all its processes), entered by the launcher like :class:`MemoryCgroup`."""

    def __init__(self, parent: str, version: int):
        self.path = os.path.join(parent, f"{CGROUP_PREFIX}cpu-{os.getpid()}-{secrets.token_hex(6)}")
        os.mkdir(self.path)
        try:
            if version == 1:
                with open(os.path.join(self.path, "cpu.cfs_period_us"), "w") as fh:
                    fh.write(str(CPU_QUOTA_PERIOD_US))
                with open(os.path.join(self.path, "cpu.cfs_quota_us"), "w") as fh:
                    fh.write(str(CPU_QUOTA_PERIOD_US))
            else:
                with open(os.path.join(self.path, "cpu.max"), "w") as fh:
                    fh.write(f"{CPU_QUOTA_PERIOD_US} {CPU_QUOTA_PERIOD_US}")
        except BaseException:
            os.rmdir(self.path)
            raise

    wrap = MemoryCgroup.wrap
    pids = MemoryCgroup.pids
    kill_all = MemoryCgroup.kill_all
    remove = MemoryCgroup.remove


def new_cpu_cgroup() -> CpuCgroup | None:
    parent = cpu_cgroup_parent()
    if parent is None:
        return None
    try:
        return CpuCgroup(*parent)
    except OSError as exc:
        logger.error("could not make a cpu cgroup under %s (%s); CPU time over the process tree bounds this "
                     "sample", parent[0], exc)
        return None


def cpu_mechanism() -> str:
    """How the sample's CPU is bounded here (``limit_mechanisms["cpu"]``)."""
    tree = ("harness: CPU time over every process of the sample (timeout_s per test, the global budget per sample), "
            "and a test's time excludes its waits for a CPU (schedstat run_delay)")
    parent = cpu_cgroup_parent()
    if parent is None:
        return tree
    return f"kernel: a cpu cgroup v{parent[1]} per sample (quota one CPU), plus the {tree}"


@dataclass
class SandboxProcess:
    """A launched harness: the process, the per-run uid (or None) and the host work dir (fallback only)."""

    proc: subprocess.Popen
    uid: int | None
    host_workdir: str | None
    report: IsolationReport
    cgroup: MemoryCgroup | None = None
    cpu_cgroup: CpuCgroup | None = None

    def memory_limit_hit(self) -> bool:
        """Whether the kernel OOM-killed inside the sample's memory cgroup (the sample as a whole went over)."""
        return self.cgroup is not None and self.cgroup.oom_kills() > 0

    def kill_tree(self) -> None:
        """SIGKILL the harness's process group (bwrap's pid namespace takes every descendant with it), every
        process of the sample's cgroup and every process still running as the per-run uid."""
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        for group in (self.cgroup, self.cpu_cgroup):
            if group is not None:
                group.kill_all()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            logger.error("sandbox process %d did not die after SIGKILL", self.proc.pid)
        if self.uid is not None:  # also in bwrap mode: the pid namespace is torn down asynchronously
            sweep_uid(self.uid)

    def cleanup(self) -> None:
        """Remove the sample's cgroup and the host work dir (fallback only); the bwrap tmpfs vanishes by itself."""
        for group in (self.cgroup, self.cpu_cgroup):
            if group is not None:
                group.remove()
        if self.host_workdir:
            try:
                remove_tree(self.host_workdir)
            except OSError as exc:
                logger.error("could not remove sandbox work dir %s: %s", self.host_workdir, exc)


def remove_tree(root: str) -> None:
    """Delete ``root`` and everything under it, however deep, without recursion and without long paths.

    The program controls the work dir: ``shutil.rmtree`` recurses once per level (a chain of a few thousand
    directories raises ``RecursionError``) and full paths beyond PATH_MAX fail. Here every subdirectory is
    renamed up into ``root`` (relative to open directory fds, so path length never grows) and removed once empty;
    at most two directory fds are open at a time. Modes the program set are reset before a directory is read or
    moved (moving a directory to a new parent needs write permission on it, unless one is root); symlinks are
    unlinked, never followed."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        if stat.S_ISDIR(os.lstat(root).st_mode):  # a symlink is refused by O_NOFOLLOW below, never chmod-ed
            os.chmod(root, 0o700)  # a mode-0 root cannot even be opened by a non-root user
        root_fd = os.open(root, flags)
    except FileNotFoundError:
        return
    counter = 0
    try:
        queue = [None]  # None = root itself; other entries are names directly inside root
        while queue:
            name = queue.pop()
            fd = os.dup(root_fd) if name is None else os.open(name, flags, dir_fd=root_fd)
            try:
                with os.scandir(fd) as entries:
                    children = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
                for child, is_dir in children:
                    if is_dir:
                        os.chmod(child, 0o700, dir_fd=fd, follow_symlinks=False)
                        counter += 1
                        flat = f".ibpo-rm-{counter}"
                        while True:  # a name the program chose may already exist in root
                            try:
                                os.stat(flat, dir_fd=root_fd, follow_symlinks=False)
                            except FileNotFoundError:
                                break
                            counter += 1
                            flat = f".ibpo-rm-{counter}"
                        os.rename(child, flat, src_dir_fd=fd, dst_dir_fd=root_fd)
                        queue.append(flat)
                    else:
                        os.unlink(child, dir_fd=fd)
            finally:
                os.close(fd)
            if name is not None:
                os.rmdir(name, dir_fd=root_fd)
    finally:
        os.close(root_fd)
    os.rmdir(root)


def sweep_uid(uid: int) -> None:
    """Kill every process running as ``uid`` (``kill(-1)`` from a process of that uid; root only)."""
    kill = shutil.which("kill", path="/usr/bin:/bin")
    # `kill -9 -1` run as the uid kills all its processes; the interpreter may be unreadable for that uid.
    argv = [kill, "-9", "-1"] if kill else [sys.executable, "-I", "-S", "-c",
                                            "import os\ntry:\n os.kill(-1, 9)\nexcept OSError:\n pass"]
    try:
        subprocess.run(argv,
                       user=uid, group=uid, extra_groups=[], env=MINIMAL_ENV, cwd="/",
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        logger.error("could not sweep processes of sandbox uid %d: %s", uid, exc)


def new_sandbox_uid() -> int:
    """A random uid in an otherwise unused range, so concurrent runs (even from other processes) do not share
    an RLIMIT_NPROC budget and a sweep kills only this run's processes."""
    return SANDBOX_UID_BASE + secrets.randbelow(SANDBOX_UID_SPAN)


def launch(job: dict, report: IsolationReport) -> SandboxProcess:
    """Start the harness for ``job`` (dict sent on its stdin by the caller) under the detected backend.

    Fills in the isolation fields of ``job`` (uid, workdir, who unshares the network).
    """
    uid = new_sandbox_uid() if report.is_root else None
    job["sandbox_uid"] = uid
    interpreter = list(harness_command())
    job.setdefault("sample_memory_bytes", job.get("memory_bytes", 4 << 30))
    job["tmpfs_bytes"] = SANDBOX_TMPFS_BYTES
    cgroup = new_memory_cgroup(job["sample_memory_bytes"]) if report.memory_cgroup else None
    # Without a kernel bound the monitor is the bound: it refuses any process it cannot read.
    job["kernel_memory_bound"] = cgroup is not None
    cpu = new_cpu_cgroup()
    groups = [g for g in (cgroup, cpu) if g is not None]

    def wrap(argv: list[str]) -> list[str]:
        for group in groups:
            argv = group.wrap(argv)
        return argv

    def remove_groups() -> None:
        for group in groups:
            group.remove()

    if report.backend == "bwrap":
        job.update(workdir="/tmp", unshare_network=False, network_isolated_by_launcher=True,
                   in_pid_namespace=True, in_ipc_namespace=True, tmpfs_dirs=["/tmp", "/dev/shm"],
                   nproc_in_user_namespace=not report.is_root and "sample_process_limit" in report.enforced)
        argv = _bwrap_prefix(report.bwrap_path, report.is_root) + ["--"] + interpreter
        try:
            proc = subprocess.Popen(wrap(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=MINIMAL_ENV, cwd="/", start_new_session=True,
                                    close_fds=True)
        except BaseException:
            remove_groups()
            raise
        return SandboxProcess(proc, uid, None, report, cgroup, cpu)
    # As root the work dir is under /tmp, which the harness covers with a private capped tmpfs (private_tmp;
    # not when the interpreter is /tmp itself)
    private = report.is_root and "/tmp" not in _interpreter_dirs()
    workdir = tempfile.mkdtemp(prefix="ibpo-sandbox-", dir="/tmp" if report.is_root else None)
    os.chmod(workdir, 0o700)
    if uid is not None:
        os.chown(workdir, uid, uid)
    job.update(workdir=workdir, unshare_network=report.is_root, network_isolated_by_launcher=False,
               in_pid_namespace=False, preimport=True, in_ipc_namespace=False,
               fallback_overlays=_fallback_overlays(workdir) if report.is_root else [],
               private_tmp=private, tmp_binds=[d for d in _interpreter_dirs() if d.startswith("/tmp/")],
               tmpfs_dirs=["/dev/shm", "/tmp"] if private else ["/dev/shm"] if report.is_root else [])
    env = dict(MINIMAL_ENV, HOME=workdir, TMPDIR=workdir)
    try:
        proc = subprocess.Popen(wrap(interpreter), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, cwd=workdir, start_new_session=True, close_fds=True)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        remove_groups()
        raise
    return SandboxProcess(proc, uid, workdir, report, cgroup, cpu)
