"""Run untrusted, model-written Python programs without letting them hurt the machine.

A candidate program may loop forever, fork-bomb, allocate or write without end, read
secrets, reach the network or kill its neighbours; training must survive all of it.
:class:`Sandbox` runs each program in its own subprocess, under the strongest isolation
this machine allows (probed once per process, logged at INFO, or WARNING without
namespaces, and named by :attr:`Sandbox.isolation`):

1. root + namespaces: ``unshare`` puts the program in fresh network, pid, IPC and mount
   namespaces. The system is read-only there, /tmp and /dev/shm are fresh size-capped
   tmpfs (the work dir is /tmp/sandbox), $HOME and the project directory are covered by
   empty tmpfs, and the program runs as nobody in a user namespace of its own, so that
   RLIMIT_NPROC counts its processes only.
2. not root + user namespaces: the same, inside ``unshare --map-root-user``; the program
   keeps the caller's uid (mapped to root of the namespace: nothing more outside it).
3. no namespaces: a fresh session and process group, a fresh work dir under the temp
   dir, socket creation refused, and nobody when running as root. Weaker: the program
   can read what its user can, and write where its user can.

In every mode: the base interpreter in isolated mode (``-I -S``: stdlib only, nothing from
the venv or $PYTHON*), an environment with only PATH and LANG, limits on wall clock, CPU
time, address space, file size, process count and open files, no core dumps, no new
privileges, a seccomp filter refusing mount and namespace syscalls (which could undo
the hiding), memfd_create (RAM outside RLIMIT_AS), io_uring and ptrace, stdin fed from
the given bytes only, and stdout, stderr and :data:`REPORT_FD` captured up to a cap.
When the run ends, for whatever reason, every process it started is killed and reaped
and its files are gone.

Inside, a small supervisor (``_BOOTSTRAP``) runs first: it builds the mounts, forks the
program, and kills everything the program left behind when the program exits or when this
side closes the control pipe (deadline, output cap, or this process dying). Because the
supervisor, not this process, ends the program, every process is reaped by its own
parent, even where the machine's init reaps no orphans.

Costs: 30-50 ms per run on a busy 2-core machine, mostly the interpreter's start-up;
a pool of 2 workers gets through one run per ~20-25 ms. tests/test_sandbox.py prints the
numbers measured where it runs.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import logging
import marshal
import math
import numbers
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Self

__all__ = ["REPORT_FD", "Sandbox", "SandboxLimits", "SandboxResult"]

logger = logging.getLogger(__name__)

#: The program may write its result to this file descriptor; it comes back as
#: :attr:`SandboxResult.report`. Unlike stdout, the program's own prints cannot forge it
#: by accident.
REPORT_FD: Final = 3

# The unprivileged user programs run as when this process is root.
_NOBODY: Final = 65534
# The program's working directory inside the mount namespace (a fresh tmpfs /tmp).
_NAMESPACE_WORKDIR: Final = "/tmp/sandbox"
# /tmp and /dev/shm in the namespace live in RAM, so their size is capped: room for this
# many files of the largest size the program may write.
_TMPFS_FILES: Final = 4
# The only environment the program gets: nothing from this process (no tokens, no keys).
_CHILD_ENV: Final = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
# RLIMIT_NOFILE: bounds the kernel memory a program can pin through sockets and pipes.
_OPEN_FILES: Final = 256
# Seconds the supervisor gets to kill the program's processes after being told to,
# before the whole process group is SIGKILLed from here.
_STOP_GRACE_S: Final = 2.0
# Seconds allowed for the start-up probe of each isolation mode (the machine may be busy).
_PROBE_TIMEOUT_S: Final = 30.0
_READ_CHUNK: Final = 1 << 16
# The directory holding the dapo_rllib package: hidden from programs, like $HOME.
_PROJECT_ROOT: Final = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """What one program may use. All values must be positive.

    Attributes:
        timeout_s: Wall-clock seconds; past them every process of the run is killed.
        cpu_s: CPU seconds per process (RLIMIT_CPU).
        memory_mb: Address space per process, in MiB (RLIMIT_AS).
        file_size_mb: Largest file the program may write, in MiB (RLIMIT_FSIZE). In a
            namespace, /tmp (with the work dir) holds a few such files in all.
        max_processes: Processes and threads the program may have at once
            (RLIMIT_NPROC; see :attr:`Sandbox.isolation` for what it counts here).
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

    Thread-safe. The isolation mode is chosen once per process, on the first instance.

    Args:
        limits: What each program may use.
        max_workers: How many programs :meth:`run_many` runs at once; by default the
            number of CPUs this process may use.

    Raises:
        TypeError: ``limits`` is not a :class:`SandboxLimits`.
        ValueError: ``max_workers`` is not a positive integer.
        RuntimeError: Not Linux, or not even the weakest isolation mode works here (the
            message says why each failed).
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
        self._plan, self._isolation = _chosen_plan()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="sandbox")
        self._closed = False

    @property
    def isolation(self) -> dict[str, str]:
        """What keeps programs in: keys "mode", "network", "processes", "filesystem", "user", "syscalls"."""
        return dict(self._isolation)

    def run(self, source: str, stdin: bytes = b"") -> SandboxResult:
        """Run ``source`` as a Python program (as ``__main__``), feeding it ``stdin``.

        Raises:
            TypeError: ``source`` is not a str or ``stdin`` not bytes.
        """
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, got {type(source).__name__}")
        if not isinstance(stdin, bytes | bytearray | memoryview):
            raise TypeError(f"stdin must be bytes, got {type(stdin).__name__}")
        return _run(self._plan, self.limits, source, bytes(stdin))

    def run_many(self, jobs: Sequence[tuple[str, bytes]]) -> list[SandboxResult]:
        """Run ``(source, stdin)`` jobs in parallel on the pool; results in the jobs' order.

        Raises:
            RuntimeError: The sandbox is closed.
            TypeError: A job is not a ``(str, bytes)`` pair.
        """
        if self._closed:
            raise RuntimeError("this Sandbox is closed")
        return list(self._pool.map(lambda job: self.run(*job), jobs))

    def close(self) -> None:
        """Wait for running jobs and stop the pool. :meth:`run` keeps working."""
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# --- the child side -------------------------------------------------------------------
# Runs as `<base python> -I -S -c _BOOTSTRAP <marshalled config in hex>`, stdlib only: the
# project and its venv are out of sight in there. The top part is the supervisor; the forked program
# process returns from `start()` and runs the program at module level, so that the
# interpreter ends it as it would any script (SystemExit, atexit, threads joined).
_BOOTSTRAP: Final = r"""
# Start-up time is paid per run, so imports are cheap ones: marshal rather than json (which
# imports re), _signal rather than signal (which imports enum).
import _signal as signal, ctypes, errno, marshal, os, resource, select, sys

REPORT_FD, NOBODY = 3, 65534
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
CLONE_NEWUSER = 0x10000000
PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 4, 22, 36, 38
config = marshal.loads(bytes.fromhex(sys.argv[1]))
libc = ctypes.CDLL(None, use_errno=True)


def check(result, action):
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{action}: {os.strerror(error)}")


def mount(source, target, fstype, flags, options=None):
    encode = lambda text: text and text.encode()
    check(libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(options)),
          f"mount {target}")


class MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def set_read_only(path, read_only, recursive):
    # mount_setattr(2) (Linux 5.12+). Older kernels leave the system as writable as file
    # permissions allow; the start-up probe reports which.
    attr = MountAttr(attr_set=1) if read_only else MountAttr(attr_clr=1)  # MOUNT_ATTR_RDONLY
    flags = 0x8000 if recursive else 0  # AT_RECURSIVE
    size = ctypes.c_size_t(ctypes.sizeof(attr))
    result = libc.syscall(ctypes.c_long(442), -100, path.encode(), flags, ctypes.byref(attr), size)  # -100: AT_FDCWD
    if result != 0 and ctypes.get_errno() != errno.ENOSYS:
        check(result, f"mount_setattr {path}")


def build_mounts():
    # Runs as root of the namespaces, before the program exists. The interpreter may live
    # under a hidden directory ($HOME/.pyenv): it is opened now and bound back over the
    # empty tmpfs, since the program still imports the stdlib from it.
    kept = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for paths in config["hide"].values() for path in paths}
    set_read_only("/", True, recursive=True)
    set_read_only("/proc", False, recursive=False)  # for the program's user namespace map
    for hidden, keep in config["hide"].items():
        mount("hidden", hidden, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
        for path in keep:
            os.makedirs(path)
            mount(f"/proc/self/fd/{kept[path]}", path, None, MS_BIND | MS_REC)
        mount(None, hidden, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for fd in kept.values():
        os.close(fd)
    for scratch in ("/tmp", "/dev/shm"):
        if os.path.isdir(scratch):
            mount("sandbox", scratch, "tmpfs", MS_NOSUID | MS_NODEV, f"size={config['tmpfs_mb']}m,mode=1777")
    os.mkdir(config["workdir"], 0o700)
    if config["drop_to_nobody"]:
        os.chown(config["workdir"], NOBODY, NOBODY)


def processes():
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            yield int(entry)


def parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])  # the command name may hold anything
    except OSError:  # gone meanwhile
        return None


def kill_descendants():
    # Without a pid namespace this supervisor is a subreaper: whatever the program left
    # running (even in a session of its own) stays in its tree, to be killed here. The
    # whole tree dies at once, so that a fork bomb cannot regrow from the levels below.
    while True:
        parents = {pid: parent_of(pid) for pid in processes()}
        tree, level = set(), {os.getpid()}
        while level:
            level = {pid for pid, parent in parents.items() if parent in level} - tree
            tree |= level
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        if not tree:
            return


def tasks_of(uid):
    # RLIMIT_NPROC counts all tasks of the user when there is no user namespace of our own.
    count = 0
    for pid in processes():
        try:
            with open(f"/proc/{pid}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue
        if int(fields["Uid"].split()[0]) == uid:
            count += int(fields["Threads"])
    return count


# Syscalls the program may not make, per architecture (with its seccomp audit value).
# Mounting and namespaces would let it undo the mounts that hide files, or mount an
# unbounded tmpfs; memfd_create would let it fill RAM outside RLIMIT_AS; io_uring works
# past seccomp; ptrace and process_vm_* reach into other processes where no pid namespace
# separates them. socket is refused only where no network namespace isolates it.
SYSCALLS = {
    "x86_64": (0xC000003E, dict(
        socket=41, ptrace=101, process_vm_readv=310, process_vm_writev=311, memfd_create=319, io_uring_setup=425,
        unshare=272, setns=308, mount=165, umount2=166, pivot_root=155, open_tree=428, move_mount=429,
        fsopen=430, fsconfig=431, fsmount=432, fspick=433, mount_setattr=442, clone=56, clone3=435)),
    "aarch64": (0xC00000B7, dict(
        socket=198, ptrace=117, process_vm_readv=270, process_vm_writev=271, memfd_create=279, io_uring_setup=425,
        unshare=97, setns=268, mount=40, umount2=39, pivot_root=41, open_tree=428, move_mount=429,
        fsopen=430, fsconfig=431, fsmount=432, fspick=433, mount_setattr=442, clone=220, clone3=435)),
}
CLONE_NEW_ANY = 0x7E020000  # CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET


def refuse_syscalls(block_sockets):
    arch, numbers = SYSCALLS[os.uname().machine]
    refused = [number for name, number in numbers.items() if name not in ("clone", "clone3")]
    if not block_sockets:
        refused.remove(numbers["socket"])
    LOAD, JEQ, JGE, AND, RET = 0x20, 0x15, 0x35, 0x54, 0x06
    # (code, label if true, label if false, k); BPF jumps forward only, to the returns at the end.
    program = [
        (LOAD, None, None, 4),  # the architecture
        (JEQ, None, "refuse", arch),
        (LOAD, None, None, 0),  # the syscall number
        (JGE, "refuse", None, 0x40000000),  # x32 ABI on x86_64
        (JEQ, "unknown", None, numbers["clone3"]),  # its flags are out of reach: libc falls back to clone
        *[(JEQ, "refuse", None, number) for number in refused],
        (JEQ, None, "allow", numbers["clone"]),
        (LOAD, None, None, 16),  # clone's flags
        (AND, None, None, CLONE_NEW_ANY),
        (JEQ, "allow", "refuse", 0),
    ]
    returns = {"allow": 0x7FFF0000, "refuse": 0x00050000 | errno.EPERM, "unknown": 0x00050000 | errno.ENOSYS}
    at = {label: len(program) + index for index, label in enumerate(returns)}
    program += [(RET, None, None, value) for value in returns.values()]

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Instruction))]

    offset = lambda index, label: at[label] - index - 1 if label else 0
    instructions = (Instruction * len(program))(
        *(Instruction(code, offset(index, jt), offset(index, jf), k) for index, (code, jt, jf, k) in enumerate(program))
    )
    check(libc.prctl(PR_SET_SECCOMP, 2, ctypes.byref(Program(len(program), instructions)), 0, 0), "seccomp")


def become_program(user_namespace_ready):
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if user_namespace_ready is not None:
        check(libc.unshare(CLONE_NEWUSER), "unshare user namespace")
        os.write(user_namespace_ready[1], b"1")
        if os.read(user_namespace_ready[0], 1) != b"1":
            raise RuntimeError("the supervisor did not map the program's user namespace")
    os.closerange(REPORT_FD + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    limits = config["limits"]
    uid = NOBODY if config["drop_to_nobody"] else os.getuid()
    processes = limits["max_processes"] + (tasks_of(uid) if config["shared_process_count"] else 0)
    for name, value in (("RLIMIT_CPU", limits["cpu_s"]), ("RLIMIT_AS", limits["memory_mb"] << 20),
                        ("RLIMIT_FSIZE", limits["file_size_mb"] << 20), ("RLIMIT_NPROC", processes),
                        ("RLIMIT_NOFILE", limits["open_files"]), ("RLIMIT_CORE", 0)):
        which = getattr(resource, name)
        # The hard CPU limit a second later turns the ignorable SIGXCPU into SIGKILL.
        soft, hard = value, value + 1 if name == "RLIMIT_CPU" else value
        ceiling = resource.getrlimit(which)[1]  # limits can only be lowered without privileges
        if ceiling != resource.RLIM_INFINITY:
            soft, hard = min(soft, ceiling), min(hard, ceiling)
        resource.setrlimit(which, (soft, hard))
    if config["drop_to_nobody"]:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
    check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "no core dumps")
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no new privileges")
    if config["seccomp"]:
        refuse_syscalls(block_sockets=not config["namespaces"])
    os.chdir(config["workdir"])


def map_user_namespace(pid, channel):
    if os.read(channel[0], 1) != b"1":
        raise RuntimeError("the program could not create its user namespace")
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as mapping:
            mapping.write(f"{NOBODY} {NOBODY} 1\n")
    os.write(channel[1], b"1")


def supervise(pid, control, wakeup):
    # Returns the program's wait status, or None when this side closed the control pipe.
    while True:
        ready, _, _ = select.select([control, wakeup], [], [])
        if control in ready:
            return None
        os.read(wakeup, 4096)
        while True:  # reap everything: as init or subreaper, orphans land here too
            try:
                reaped, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if reaped == 0:
                break
            if reaped == pid:
                return status


def start():
    with os.fdopen(config["source_fd"], encoding="utf-8", errors="surrogatepass") as source_file:
        source = source_file.read()
    control = config["control_fd"]
    if control == REPORT_FD:  # move it out of the report's way
        control = os.dup(control)
    if config["report_fd"] != REPORT_FD:
        os.dup2(config["report_fd"], REPORT_FD)
        os.close(config["report_fd"])
    if config["namespaces"]:
        build_mounts()
    else:
        check(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "subreaper")
    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_write, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wakeup_write)
    to_program, to_supervisor = (os.pipe(), os.pipe()) if config["own_user_namespace"] else (None, None)
    pid = os.fork()
    if pid == 0:
        become_program(None if to_program is None else (to_program[0], to_supervisor[1]))
        return source
    if to_program is not None:
        map_user_namespace(pid, (to_supervisor[0], to_program[1]))
    status = supervise(pid, control, wakeup_read)
    if not config["namespaces"]:  # in a pid namespace, the kernel kills them all as init exits
        kill_descendants()
    code = 137 if status is None else os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


PROGRAM = "<program>"
source = start()
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


# --- the host side --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Plan:
    """One way of isolating programs; the start-up probe picks the first that works."""

    mode: str
    unshare: tuple[str, ...]  # the command that wraps the interpreter in namespaces; () for none
    drop_to_nobody: bool
    own_user_namespace: bool  # the program gets a user namespace of its own (per-run RLIMIT_NPROC)
    seccomp: bool  # refuse the syscalls in the bootstrap's SYSCALLS (socket too, without namespaces)

    @property
    def namespaces(self) -> bool:
        return bool(self.unshare)


def _candidate_plans() -> list[_Plan]:
    """The isolation modes worth trying here, strongest first."""
    root = os.geteuid() == 0
    plans = []
    if unshare := shutil.which("unshare"):
        wrap = ("--net", "--pid", "--ipc", "--mount", "--mount-proc", "--fork", "--kill-child", "--")
        if root:
            plans.append(_Plan("root + namespaces", (unshare, *wrap), True, True, True))
            plans.append(_Plan("root + namespaces, no user namespace", (unshare, *wrap), True, False, True))
        else:
            plans.append(_Plan("user namespace", (unshare, "--map-root-user", *wrap), False, False, True))
    plans.append(_Plan("no namespaces", (), root, False, True))
    # seccomp is missing only on architectures the filter does not know: then for all modes.
    return plans + [dataclasses.replace(plan, mode=f"{plan.mode}, no seccomp", seccomp=False) for plan in plans]


def _interpreter() -> str:
    return getattr(sys, "_base_executable", None) or sys.executable


@functools.cache
def _hidden_directories() -> dict[str, list[str]]:
    """$HOME and the project directory (the outermost of nested ones), each with the
    interpreter directories under it that must stay visible."""
    interpreter = {Path(sys.base_prefix).resolve(), Path(sys.base_exec_prefix).resolve()}
    candidates = {Path(os.path.expanduser("~")), _PROJECT_ROOT}
    hidden = {
        path.resolve()
        for path in candidates
        if path.is_absolute()
        and path.is_dir()
        and path.resolve() != Path("/")
        # hiding the interpreter's own directory (or one inside it) would break it
        and not any(path.resolve().is_relative_to(kept) for kept in interpreter)
    }
    outermost = [path for path in hidden if not any(path != other and path.is_relative_to(other) for other in hidden)]
    return {
        str(path): sorted(str(kept) for kept in interpreter if kept.is_relative_to(path)) for path in sorted(outermost)
    }


def _run(plan: _Plan, limits: SandboxLimits, source: str, stdin: bytes) -> SandboxResult:
    """Run one program under ``plan``; see :meth:`Sandbox.run`."""
    started = time.monotonic()
    deadline = started + limits.timeout_s
    with contextlib.ExitStack() as cleanup:
        workdir = _NAMESPACE_WORKDIR
        if not plan.namespaces:
            workdir = _make_host_workdir(plan)
            cleanup.callback(_remove_host_workdir, workdir)
        report_read, report_write = os.pipe()
        cleanup.callback(os.close, report_read)
        # This side's end of the control pipe stays open exactly as long as the run.
        control_read, control_write = os.pipe()
        source_fd = _memory_file(source.encode("utf-8", "surrogatepass"))
        stdin_fd = _memory_file(stdin) if stdin else subprocess.DEVNULL
        config = {
            "source_fd": source_fd,
            "report_fd": report_write,
            "control_fd": control_read,
            "workdir": workdir,
            "namespaces": plan.namespaces,
            "hide": _hidden_directories() if plan.namespaces else {},
            "tmpfs_mb": _TMPFS_FILES * limits.file_size_mb,
            "drop_to_nobody": plan.drop_to_nobody,
            "own_user_namespace": plan.own_user_namespace,
            "shared_process_count": not plan.namespaces,
            "seccomp": plan.seccomp,
            "limits": {
                "cpu_s": limits.cpu_s,
                "memory_mb": limits.memory_mb,
                "file_size_mb": limits.file_size_mb,
                "max_processes": limits.max_processes,
                "open_files": _OPEN_FILES,
            },
        }
        try:
            process = subprocess.Popen(
                [*plan.unshare, _interpreter(), "-I", "-S", "-c", _BOOTSTRAP, marshal.dumps(config).hex()],
                stdin=stdin_fd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(source_fd, report_write, control_read),
                env=_CHILD_ENV,
                cwd="/",
                start_new_session=True,
            )
        except BaseException:
            os.close(control_write)
            raise
        finally:
            for fd in (source_fd, stdin_fd, report_write, control_read):
                if fd != subprocess.DEVNULL:
                    os.close(fd)
        cleanup.callback(_stop, process, control_write)
        outputs, truncated, timed_out = _collect(
            [process.stdout.fileno(), process.stderr.fileno(), report_read], deadline, limits.output_bytes
        )
        if not (truncated or timed_out):
            timed_out = not _wait_exited(process.pid, deadline)
    killed = truncated or timed_out
    return SandboxResult(
        exit_code=None if killed else _shell_exit_code(process.returncode),
        stdout=outputs[0],
        stderr=outputs[1],
        report=outputs[2],
        timed_out=timed_out,
        output_truncated=truncated,
        duration_s=time.monotonic() - started,
    )


def _memory_file(data: bytes) -> int:
    """An anonymous in-memory file holding ``data``, positioned at its start."""
    fd = os.memfd_create("dapo-sandbox")
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _collect(fds: list[int], deadline: float, cap: int) -> tuple[list[bytes], bool, bool]:
    """Read all ``fds`` at once until EOF, the deadline or a stream passing ``cap``.

    Returns:
        The bytes read per fd, whether one passed the cap, whether the deadline passed.
    """
    buffers = {fd: bytearray() for fd in fds}
    truncated = timed_out = False
    with selectors.DefaultSelector() as selector:
        for fd in fds:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map() and not truncated:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in selector.select(remaining):
                buffer = buffers[key.fd]
                chunk = os.read(key.fd, min(_READ_CHUNK, cap + 1 - len(buffer)))
                if not chunk:
                    selector.unregister(key.fd)
                buffer += chunk
                if len(buffer) > cap:
                    del buffer[cap:]
                    truncated = True
    return [bytes(buffers[fd]) for fd in fds], truncated, timed_out


def _wait_exited(pid: int, deadline: float) -> bool:
    """Wait until child ``pid`` has exited, without reaping it; False if the deadline passes.

    Unreaped, its pid stays reserved, so its process group can still be signalled safely.
    """
    delay = 0.0005
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(delay, remaining))
        delay = min(2 * delay, 0.02)
    return True


def _stop(process: subprocess.Popen, control_write: int) -> None:
    """End the run: tell the supervisor, make sure its whole process group is dead, reap it."""
    os.close(control_write)  # the supervisor kills everything and exits (no-op if it has)
    _wait_exited(process.pid, time.monotonic() + _STOP_GRACE_S)
    try:
        # Backstop: normally the group is only the unreaped leader by now.
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    process.stdout.close()
    process.stderr.close()


def _shell_exit_code(returncode: int) -> int:
    return returncode if returncode >= 0 else 128 - returncode


def _make_host_workdir(plan: _Plan) -> str:
    path = tempfile.mkdtemp(prefix="dapo-sandbox-")
    if plan.drop_to_nobody:
        os.chown(path, _NOBODY, _NOBODY)
    return path


def _remove_host_workdir(path: str) -> None:
    def unlock_and_retry(function, failed_path, _exc_info):
        # The program owns its files and may have taken its own permissions away.
        os.chmod(os.path.dirname(failed_path), 0o700)
        if function in (os.open, os.scandir):
            os.chmod(failed_path, 0o700)
            shutil.rmtree(failed_path, onerror=unlock_and_retry)
        else:
            function(failed_path)

    shutil.rmtree(path, onerror=unlock_and_retry)


# --- choosing the isolation mode, once per process --------------------------------------

_PROBE_SOURCE: Final = """
import json, os, socket, sys
secrets = json.loads(sys.stdin.read())
try:
    socket.socket().close()
    sockets = True
except OSError:
    sockets = False
try:
    interfaces = sorted(name for _, name in socket.if_nameindex())
except OSError:
    interfaces = None
try:
    os.close(os.memfd_create("probe"))
    syscalls_refused = False
except PermissionError:
    syscalls_refused = True
facts = {
    "uid": os.getuid(),
    "parent_pid": os.getppid(),
    "sockets": sockets,
    "interfaces": interfaces,
    "read_only_system": bool(os.statvfs("/").f_flag & os.ST_RDONLY),
    "secrets_visible": [path for path in secrets if os.path.lexists(path)],
    "syscalls_refused": syscalls_refused,
}
os.write(3, json.dumps(facts).encode())
"""

_plan_lock = threading.Lock()
_plan: tuple[_Plan, dict[str, str]] | None = None


def _chosen_plan() -> tuple[_Plan, dict[str, str]]:
    """The strongest isolation that works here and its description, probed on first call."""
    global _plan
    with _plan_lock:
        if _plan is None:
            _plan = _probe_plans()
            plan, isolation = _plan
            log = logger.warning if plan.mode.startswith("no namespaces") else logger.info
            log("Sandbox isolation: %s", "; ".join(f"{key}: {value}" for key, value in isolation.items()))
        return _plan


def _probe_plans() -> tuple[_Plan, dict[str, str]]:
    if not sys.platform.startswith("linux"):
        raise RuntimeError(f"the sandbox needs Linux, this is {sys.platform}")
    secrets = _secret_samples()
    failures = []
    for plan in _candidate_plans():
        try:
            result = _run(plan, SandboxLimits(timeout_s=_PROBE_TIMEOUT_S), _PROBE_SOURCE, json.dumps(secrets).encode())
        except OSError as error:
            failures.append(f"{plan.mode}: {error}")
            continue
        try:
            facts = json.loads(result.report) if result.exit_code == 0 else None
        except ValueError:
            facts = None
        problem = "it failed" if facts is None else _probe_problem(plan, facts)
        if problem is None:
            return plan, _describe(plan, facts)
        failures.append(f"{plan.mode}: {problem} (exit code {result.exit_code}, stderr {result.stderr[-2000:]!r})")
        logger.debug("Sandbox isolation %r does not work here: %s", plan.mode, failures[-1])
    raise RuntimeError("no sandbox isolation mode works here:\n" + "\n".join(failures) + _nobody_hint())


def _nobody_hint() -> str:
    """Why programs cannot run as nobody without namespaces, if the interpreter is the reason."""
    if os.geteuid() != 0:
        return ""
    stdlib = Path(sys.base_prefix).resolve()
    for directory in (*reversed(stdlib.parents), stdlib):
        if not directory.stat().st_mode & stat.S_IXOTH:
            return (
                f"\nWithout namespaces, programs run as nobody ({_NOBODY}), who cannot enter {directory} on the way "
                f"to the interpreter's files under {stdlib}: allow it (chmod o+x {directory}) or use a Python "
                "installed where every user can read it."
            )
    return ""


def _secret_samples() -> list[str]:
    """One entry of each hidden directory (not on the way to the interpreter) for the
    probe to look for."""
    samples = []
    for hidden, kept in _hidden_directories().items():
        visible = {Path(path).relative_to(hidden).parts[0] for path in kept}
        samples += [entry.path for entry in os.scandir(hidden) if entry.name not in visible][:1]
    return samples


def _probe_problem(plan: _Plan, facts: dict) -> str | None:
    """Why the probe's observations show ``plan`` not working, or None."""
    if plan.drop_to_nobody and facts["uid"] != _NOBODY:
        return f"the program ran as uid {facts['uid']}, not nobody"
    if plan.namespaces:
        if facts["parent_pid"] != 1:
            return "no pid namespace"
        if facts["interfaces"] != ["lo"]:
            return f"network interfaces {facts['interfaces']} visible"
        if facts["secrets_visible"]:
            return f"hidden paths visible: {facts['secrets_visible']}"
    elif plan.seccomp and facts["sockets"]:
        return "sockets could still be created"
    if plan.seccomp and not facts["syscalls_refused"]:
        return "the seccomp filter is not in force"
    return None


def _describe(plan: _Plan, facts: dict) -> dict[str, str]:
    if plan.namespaces:
        network = "network namespace (no interfaces but a loopback that is down)"
        counted = (
            "per run (own user namespace)"
            if plan.own_user_namespace or not plan.drop_to_nobody
            else ("for all programs running as nobody together")
        )
        processes = (
            "pid namespace: the program sees and can signal only its own processes, all killed "
            f"when it ends; RLIMIT_NPROC counted {counted}"
        )
        system = "system read-only" if facts["read_only_system"] else "system writable as permissions allow"
        hidden = ", ".join(_hidden_directories()) or "nothing"
        filesystem = (
            f"mount namespace: {system}, fresh tmpfs on /tmp (work dir {_NAMESPACE_WORKDIR}) and /dev/shm, "
            f"empty tmpfs over {hidden}"
        )
    else:
        network = (
            "socket creation blocked in-process by a seccomp filter (no network namespace available)"
            if plan.seccomp
            else "NOT isolated: no network namespace and no seccomp available"
        )
        processes = (
            "own session, leftovers killed by a subreaper (no pid namespace available); "
            + (
                "as nobody it can signal only other nobody processes"
                if plan.drop_to_nobody
                else "it can signal every process of this user"
            )
            + "; RLIMIT_NPROC set to the user's current count plus the limit"
        )
        filesystem = (
            f"none (no mount namespace available): fresh work dir under {tempfile.gettempdir()}, removed after; "
            "the program can read and write what its user can"
        )
    syscalls = (
        "seccomp refuses mount and namespace syscalls, memfd_create, io_uring, ptrace, process_vm_*"
        + ("" if plan.namespaces else ", socket")
        if plan.seccomp
        else "no seccomp filter (not available for this architecture)"
    )
    if plan.drop_to_nobody:
        user = f"nobody ({_NOBODY}), no capabilities, no new privileges"
    elif plan.namespaces:
        user = f"uid {os.getuid()} mapped to root of a user namespace (no privileges outside it)"
    else:
        user = f"uid {os.getuid()} (this process's user)"
    return {
        "mode": plan.mode,
        "network": network,
        "processes": processes,
        "filesystem": filesystem,
        "user": user,
        "syscalls": syscalls,
    }
