"""What one sandboxed program may use (:class:`SandboxLimits`) and what comes back of its run
(:class:`SandboxResult`)."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Final

#: The program may write its result to this file descriptor; it comes back as
#: :attr:`SandboxResult.report`. Unlike stdout, the program's own prints cannot forge it
#: by accident.
REPORT_FD: Final = 3


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
