"""A bounded, thread-safe pool of warm worker processes with a hard wall-clock kill.

Used by the math verifier: math-verify is imported once per worker, requests and replies are JSON lines over
pipes, and a request that overruns its deadline gets its worker SIGKILLed and replaced (a hung sympy call cannot
be cancelled any other way). The pool never uses ``signal`` or ``fork`` in the calling process: workers are
started with ``subprocess.Popen`` (fork+exec in C, safe from any thread), so callers may be verl's executor
threads.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any


class WorkerTimeout(Exception):
    """The worker did not answer before the deadline; it was killed."""


class WorkerDied(Exception):
    """The worker exited (or closed its pipe) while handling a request; it has been discarded.

    ``returncode`` is the worker's exit status once reaped (``-N``: killed by signal N, which the pool itself
    never sends during a request -- its only kill is the deadline's, reported as :class:`WorkerTimeout`), or
    ``None`` if it was still alive (a protocol error).
    """

    def __init__(self, message: str = "", returncode: int | None = None):
        super().__init__(message)
        self.returncode = returncode

    @property
    def signal(self) -> int | None:
        """The signal that killed the worker, if any."""
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None


class WorkerStartError(RuntimeError):
    """A new worker failed to start (bad interpreter, missing package); carries the worker's stderr tail."""


MAX_REPLY_BYTES = 16 * 1024 * 1024


def _read_line(fd: int, buffer: bytearray, deadline: float) -> bytes:
    """Read one ``\\n``-terminated line from ``fd`` before ``deadline`` (``time.monotonic``), using ``buffer``."""
    while True:
        newline = buffer.find(b"\n")
        if newline >= 0:
            line = bytes(buffer[:newline])
            del buffer[:newline + 1]
            return line
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WorkerTimeout()
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            raise WorkerTimeout()
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise WorkerDied("worker closed its output pipe")
        buffer.extend(chunk)
        if len(buffer) > MAX_REPLY_BYTES:
            raise WorkerDied(f"worker reply exceeds {MAX_REPLY_BYTES} bytes")


@dataclass(eq=False)
class _Worker:
    proc: subprocess.Popen
    buffer: bytearray = field(default_factory=bytearray)
    requests_served: int = 0
    saved_stderr: bytes | None = None

    def kill(self) -> None:
        """SIGKILL the worker and reap it (idempotent)."""
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.saved_stderr = self._read_stderr()  # before the pipe closes: why a worker failed to start is here
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def _read_stderr(self, limit: int = 1 << 16) -> bytes:
        """What the worker's stderr pipe holds now, without blocking (a child of the worker may keep it open)."""
        if self.proc.stderr is None or self.proc.stderr.closed:
            return b""
        fd = self.proc.stderr.fileno()
        os.set_blocking(fd, False)
        chunks: list[bytes] = []
        try:
            while sum(map(len, chunks)) < limit:
                chunk = os.read(fd, 1 << 14)
                if not chunk:
                    break
                chunks.append(chunk)
        except (BlockingIOError, OSError):
            pass
        return b"".join(chunks)

    def stderr_tail(self, limit: int = 2000) -> str:
        """The end of the worker's stderr (only meaningful after it exited; kept by :meth:`kill`)."""
        data = self.saved_stderr if self.saved_stderr is not None else self._read_stderr()
        return data[-limit:].decode("utf-8", "replace")


class WorkerPool:
    """Up to ``max_workers`` reused processes running ``argv``; one request at a time per worker.

    The worker program must print one JSON line ``{"ready": true}`` on stdout once initialised, then answer each
    JSON request line on stdin with one JSON line on stdout. Workers start lazily and are replaced after a
    timeout, a crash, or ``max_requests_per_worker`` requests (bounds slow memory growth in sympy caches).
    """

    def __init__(self, argv: list[str], max_workers: int, *, env: dict[str, str] | None = None,
                 startup_timeout_s: float = 120.0, max_requests_per_worker: int = 2000, name: str = "worker"):
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.argv = list(argv)
        self.max_workers = max_workers
        self.env = env
        self.startup_timeout_s = startup_timeout_s
        self.max_requests_per_worker = max_requests_per_worker
        self.name = name
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._cond = threading.Condition()
        self._closed = False
        self.stats = {"started": 0, "killed_timeout": 0, "died": 0, "recycled": 0}
        _LIVE_POOLS.add(self)

    def _start_worker(self) -> _Worker:
        proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=self.env, close_fds=True)
        worker = _Worker(proc)
        try:
            line = _read_line(proc.stdout.fileno(), worker.buffer, time.monotonic() + self.startup_timeout_s)
            if json.loads(line).get("ready") is not True:
                raise WorkerDied(f"unexpected greeting {line[:200]!r}")
        except (WorkerTimeout, WorkerDied, ValueError) as exc:
            worker.kill()
            raise WorkerStartError(f"{self.name} worker {self.argv} failed to start ({type(exc).__name__}: {exc}); "
                                   f"stderr: {worker.stderr_tail()}") from exc
        self.stats["started"] += 1
        return worker

    def _acquire(self) -> _Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError(f"{self.name} pool is closed")
                if self._idle:
                    return self._idle.pop()
                if len(self._all) < self.max_workers:
                    placeholder = _Worker(proc=None)  # reserve a slot while starting outside the lock
                    self._all.add(placeholder)
                    break
                self._cond.wait()
        try:
            worker = self._start_worker()
        except BaseException:
            with self._cond:
                self._all.discard(placeholder)
                self._cond.notify()
            raise
        with self._cond:
            self._all.discard(placeholder)
            self._all.add(worker)
        return worker

    def _release(self, worker: _Worker, healthy: bool) -> None:
        if healthy and worker.requests_served >= self.max_requests_per_worker:
            healthy = False
            self.stats["recycled"] += 1
        if not healthy:
            worker.kill()
        with self._cond:
            if healthy and not self._closed:
                self._idle.append(worker)
            else:
                self._all.discard(worker)
            self._cond.notify()
        if healthy and self._closed:
            worker.kill()

    def call(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send ``request`` to a free worker and return its reply, killing the worker after ``timeout_s``.

        Raises :class:`WorkerTimeout` or :class:`WorkerDied`; the pool stays usable either way. The deadline
        counts from when a worker has been acquired, so waiting for a free worker is not charged to the request.
        """
        worker = self._acquire()
        healthy = False
        try:
            payload = (json.dumps(request) + "\n").encode("utf-8")
            try:
                worker.proc.stdin.write(payload)
                worker.proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                self.stats["died"] += 1
                raise WorkerDied(f"could not write to worker: {exc}; {self._exit_status(worker)}",
                                 worker.proc.returncode) from exc
            try:
                line = _read_line(worker.proc.stdout.fileno(), worker.buffer, time.monotonic() + timeout_s)
            except WorkerTimeout:
                self.stats["killed_timeout"] += 1
                raise
            except WorkerDied as exc:
                self.stats["died"] += 1
                raise WorkerDied(f"{exc}; {self._exit_status(worker)}", worker.proc.returncode) from exc
            worker.requests_served += 1
            reply = json.loads(line)
            healthy = not reply.get("exit_after", False)
            return reply
        finally:
            self._release(worker, healthy)

    @staticmethod
    def _exit_status(worker: _Worker) -> str:
        """Reap a worker that closed its pipe (it normally exits right after) and describe how it ended."""
        try:
            code = worker.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "worker still running"
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"

    def warm_up(self, n: int | None = None) -> None:
        """Start up to ``n`` (default ``max_workers``) workers now, so the first requests do not pay the import."""
        n = self.max_workers if n is None else min(n, self.max_workers)
        workers = []
        try:
            for _ in range(n):
                with self._cond:
                    if len(self._all) >= self.max_workers:
                        break
                workers.append(self._acquire())
        finally:
            for worker in workers:
                self._release(worker, True)

    @property
    def size(self) -> int:
        """Number of live (idle or busy) workers."""
        with self._cond:
            return sum(1 for w in self._all if w.proc is not None)

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (for tests and diagnostics)."""
        with self._cond:
            return [w.proc.pid for w in self._all if w.proc is not None]

    def close(self) -> None:
        """Kill idle workers now; busy ones are killed when their request finishes."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            for worker in idle:
                self._all.discard(worker)
            self._cond.notify_all()
        for worker in idle:
            worker.kill()


_LIVE_POOLS: "weakref.WeakSet[WorkerPool]" = weakref.WeakSet()


@atexit.register
def _close_all_pools() -> None:
    for pool in list(_LIVE_POOLS):
        pool.close()
