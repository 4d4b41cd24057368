"""The sandbox's front door: :class:`Sandbox` runs programs, one subprocess each, on a bounded
pool of threads."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
from collections.abc import Callable, Iterable, Sequence
from typing import Self, TypeVar

from dapo_rllib.tasks.sandbox.command import find_bwrap
from dapo_rllib.tasks.sandbox.limits import SandboxLimits, SandboxResult
from dapo_rllib.tasks.sandbox.process import SandboxProcess, run_program
from dapo_rllib.tasks.sandbox.startup_check import checked_setup

T = TypeVar("T")
R = TypeVar("R")


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
        self._setup = checked_setup(find_bwrap())
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
        return run_program(self._setup, self.limits, source, bytes(stdin))

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
