"""One run of a program in the sandbox: started with the bwrap command line, its output read up
to the cap, its wall-clock limit kept, every process of it killed at the end."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import time
from typing import Final, Self

from dapo_rllib.tasks.sandbox.command import Setup, seccomp_filter
from dapo_rllib.tasks.sandbox.limits import SandboxLimits, SandboxResult

# The only environment the program gets: nothing from this process (no tokens, no keys).
_CHILD_ENV: Final = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
# Seconds bwrap gets to exit once its namespace is killed, before it is killed too.
_STOP_GRACE_S: Final = 2.0
_READ_CHUNK: Final = 1 << 16


def run_program(setup: Setup, limits: SandboxLimits, source: str, stdin: bytes) -> SandboxResult:
    """Run one program; see :meth:`Sandbox.run`."""
    stdin_fd = _memory_file(stdin) if stdin else subprocess.DEVNULL
    with SandboxProcess(setup, limits, source, stdin_fd, limits.timeout_s) as program:
        return program.finish()


class SandboxProcess:
    """A program running in the sandbox that this process talks to while it runs: bytes in on its
    stdin (:meth:`send`), lines out on :data:`REPORT_FD` (:meth:`receive_line`). Its stdout and
    stderr are read meanwhile (so that it never blocks on them), up to the cap.

    Made by :meth:`Sandbox.start`; a context manager: leaving it kills every process of the run.
    The run's wall-clock limit counts from the start. The output cap applies to stdout and stderr
    in all, and to the report's bytes not yet received (so a long conversation of short lines is
    fine, one line past the cap is not).
    """

    def __init__(self, setup: Setup, limits: SandboxLimits, source: str, stdin: int, timeout_s: float) -> None:
        self._started = time.monotonic()
        self._deadline = self._started + timeout_s
        self._cap = limits.output_bytes
        self._cleanup = contextlib.ExitStack()
        with self._cleanup:  # closed here only if the start fails
            report_read, report_write = os.pipe()
            self._cleanup.callback(os.close, report_read)
            info_read, info_write = os.pipe()
            self._cleanup.callback(os.close, info_read)
            fds = {
                "source": _memory_file(source.encode("utf-8", "surrogatepass")),
                "report": report_write,
                "info": info_write,
                "seccomp": _memory_file(seccomp_filter()),
            }
            try:
                self._process = subprocess.Popen(
                    setup.command(limits, fds),
                    stdin=stdin,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=tuple(fds.values()),
                    env=_CHILD_ENV,
                    cwd="/",
                    start_new_session=True,
                )
            finally:
                for fd in (*fds.values(), stdin):
                    if fd not in (subprocess.DEVNULL, subprocess.PIPE):
                        os.close(fd)
            self._cleanup.callback(_stop, self._process, _namespace_init(self._process, info_read))
            if self._process.stdin is not None:
                os.set_blocking(self._process.stdin.fileno(), False)
                self._cleanup.callback(self._process.stdin.close)
            self._report = report_read
            # Kept as numbers: the buffers stay readable after the streams are closed.
            self._output_fds = (self._process.stdout.fileno(), self._process.stderr.fileno())
            self._buffers = {fd: bytearray() for fd in (*self._output_fds, report_read)}
            self._open = set(self._buffers)
            self._selector = selectors.DefaultSelector()  # the streams not yet at their end
            self._cleanup.callback(self._selector.close)
            for fd in self._buffers:
                self._selector.register(fd, selectors.EVENT_READ)
            self.truncated = self.timed_out = False
            self._cleanup = self._cleanup.pop_all()

    @property
    def running(self) -> bool:
        """Not yet stopped by its wall-clock limit or the output cap, nor ended its report."""
        return not (self.truncated or self.timed_out) and self._report in self._open

    @property
    def stderr(self) -> bytes:
        """What the program has written to stderr so far (as read)."""
        return bytes(self._buffers[self._output_fds[1]])

    def close(self) -> None:
        """Kill every process of the run (again: a no-op); nothing more is received."""
        self._cleanup.close()
        self._open.clear()

    def send(self, data: bytes, timeout_s: float) -> bool:
        """Write ``data`` to the program's stdin (a :meth:`Sandbox.start` program's), waiting at most
        ``timeout_s`` (and never past the run's limit) for it to read. False when not all of it went:
        the program closed its stdin, ended, or did not read in time."""
        stdin = self._process.stdin.fileno()
        deadline = min(time.monotonic() + timeout_s, self._deadline)
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(stdin, view) :]
                continue
            except BlockingIOError:  # the pipe is full: wait until the program reads
                pass
            except BrokenPipeError:
                return False
            remaining = deadline - time.monotonic()
            with selectors.DefaultSelector() as selector:
                selector.register(stdin, selectors.EVENT_WRITE)
                if remaining <= 0 or not selector.select(remaining):
                    return False
        return True

    def receive_line(self, timeout_s: float) -> bytes | None:
        """The next line the program writes to :data:`REPORT_FD` (without its newline), waiting at most
        ``timeout_s`` (and never past the run's limit); None when none came: it ended its report, went
        past its limit or the cap (see :attr:`timed_out`, :attr:`truncated`), or took longer."""
        deadline = min(time.monotonic() + timeout_s, self._deadline)
        report = self._buffers[self._report]
        while (end := report.find(b"\n")) < 0:
            if not self.running or not self._pump(deadline):
                return None
        line = bytes(report[:end])
        del report[: end + 1]
        return line

    def finish(self) -> SandboxResult:
        """Wait for the program to end (at most until the run's limit), and what it did; its report
        holds what :meth:`receive_line` has not taken."""
        while self._open and not self.truncated and self._pump(self._deadline):
            pass
        if not (self.truncated or self.timed_out):
            try:
                self._process.wait(max(self._deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                self.timed_out = True
        killed = self.truncated or self.timed_out
        stdout, stderr = (bytes(self._buffers[fd]) for fd in self._output_fds)
        return SandboxResult(
            exit_code=None if killed else _shell_exit_code(self._process.returncode),
            stdout=stdout,
            stderr=stderr,
            report=bytes(self._buffers[self._report]),
            timed_out=self.timed_out,
            output_truncated=self.truncated,
            duration_s=time.monotonic() - self._started,
        )

    def _pump(self, deadline: float) -> bool:
        """Read what the program has written, waiting at most until ``deadline``. False when nothing
        came by then (the run's own limit passed: :attr:`timed_out`), or a stream went past the cap."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            self.timed_out = self.timed_out or deadline >= self._deadline
            return False
        ready = self._selector.select(remaining)
        if not ready:
            self.timed_out = self.timed_out or deadline >= self._deadline
            return False
        for key, _ in ready:
            buffer = self._buffers[key.fd]
            chunk = os.read(key.fd, min(_READ_CHUNK, self._cap + 1 - len(buffer)))
            if not chunk:
                self._open.discard(key.fd)
                self._selector.unregister(key.fd)
            buffer += chunk
            if len(buffer) > self._cap:
                del buffer[self._cap :]
                self.truncated = True
                return False
        return True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _namespace_init(process: subprocess.Popen, info_read: int) -> int | None:
    """A pidfd of the sandbox's pid 1 (whose death kills every process of the run), or None
    if bwrap failed before making it or it is gone already."""
    info = b""
    while chunk := os.read(info_read, _READ_CHUNK):  # bwrap closes it once written
        info += chunk
    try:
        pid = json.loads(info)["child-pid"]
        pidfd = os.pidfd_open(pid)
    except (ValueError, KeyError, ProcessLookupError):
        return None
    # The pidfd holds the pid: if its parent is our (unreaped) bwrap now, it is the right process.
    if _parent_of(pid) != process.pid:
        os.close(pidfd)
        return None
    return pidfd


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])  # the command name may hold anything
    except OSError:
        return None


def _memory_file(data: bytes) -> int:
    """An anonymous in-memory file holding ``data``, positioned at its start."""
    fd = os.memfd_create("dapo-sandbox")
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _stop(process: subprocess.Popen, namespace_init: int | None) -> None:
    """End the run: kill the sandbox's pid 1 and wait until it has exited, which the kernel
    lets it do only once every other process of the namespace is gone; reap bwrap."""
    if namespace_init is not None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(namespace_init, signal.SIGKILL)
        # Readable once it has exited. bwrap may exit before it and leave it, a zombie, to
        # this machine's init (or subreaper), as bwrap does everywhere.
        with selectors.DefaultSelector() as selector:
            selector.register(namespace_init, selectors.EVENT_READ)
            selector.select(_STOP_GRACE_S)
        os.close(namespace_init)
    try:
        process.wait(_STOP_GRACE_S)
    except subprocess.TimeoutExpired:  # bwrap failed before making the namespace, and hangs
        process.kill()
        process.wait()
    process.stdout.close()
    process.stderr.close()


def _shell_exit_code(returncode: int) -> int:
    # bwrap already reports the program's death by signal N as 128 + N
    return returncode if returncode >= 0 else 128 - returncode
