"""Where an environment finds its OpenEnv server: one already running, or a command it runs itself.

:class:`RunningServer` is a URL given in the config. :class:`LocalServer` runs a server command as a process on
127.0.0.1: on first use (not when the environment is built: the driver builds environments it never plays), on a
free port (``{port}`` in the command), its stdout and stderr in a log file that a log line names, and answering
``GET /health`` within ``startup_timeout_s`` or it is given up. When the process has died, or a call could not
reach it, the next :meth:`LocalServer.url` starts it anew (with a warning); episodes that were playing on it have
already failed with ``server_down``. The process is stopped when the object is closed, garbage collected, or the
Python process exits (``weakref.finalize``). A process killed with SIGKILL cannot stop its server: that server
is left running until it is killed (or until its machine's next reboot).

Shared (``share_server``): the env runners of a machine use one server per command. The first to need it starts
it and writes its URL to a record file in the temp directory, named by a hash of the command; the others read
it. One lock file serialises the check and the start, so two processes never start it at once. The process that
started it owns it and stops it when it exits; the others then find it gone (a call fails, or ``/health`` does
not answer) and one of them starts it again. This keeps no reference count across processes, at the cost of a
restart when the owner leaves first (env runners of a run start and stop together).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
import weakref
from collections.abc import Sequence
from pathlib import Path

from dapo_rllib.tasks.env_failures import SERVER_DOWN, EnvFailure

logger = logging.getLogger(__name__)

#: Where shared servers' records and locks, and the servers' logs, are kept.
STATE_DIR = Path(tempfile.gettempdir()) / "dapo_openenv"
# Seconds a /health request may take, and between two of them while a server starts.
_HEALTH_TIMEOUT_S, _HEALTH_POLL_S = 2.0, 0.1
# Seconds a server has to exit after SIGTERM before it is killed.
_STOP_GRACE_S = 5.0
# No proxy: the server is on this machine.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class RunningServer:
    """A server already running at ``url``: nothing to start, restart or stop."""

    def __init__(self, url: str):
        self._url = url.rstrip("/")

    def url(self) -> str:
        return self._url

    def suspect(self) -> None:
        """A call could not reach it: nothing to do, whoever runs it restarts it."""

    def close(self) -> None:
        """Nothing to stop: the server is not ours."""


class LocalServer:
    """A server ``command`` (a ``{port}`` in it stands for the port) run on 127.0.0.1 by this process, or shared.

    Thread-safe: the episodes of an environment's twins ask for its URL concurrently.

    Args:
        command: The command line, a list of str with ``{port}`` in one of them.
        startup_timeout_s: Seconds a new server has to answer ``/health``.
        shared: Share one server per command among the processes of this machine (see the module's docstring).
    """

    def __init__(self, command: Sequence[str], *, startup_timeout_s: float, shared: bool):
        self.command, self._startup_timeout_s, self._shared = list(command), startup_timeout_s, shared
        self._lock = threading.Lock()
        self._url: str | None = None
        self._suspect = False
        self._process = _OwnedProcess()
        self._stop = weakref.finalize(self, self._process.stop)
        key = hashlib.sha256(json.dumps(self.command).encode()).hexdigest()[:16]
        self._record = STATE_DIR / f"server-{key}.json"

    @property
    def log_path(self) -> Path | None:
        """The log file of the server this object started last (None: none yet)."""
        return self._process.log_path

    @property
    def pid(self) -> int | None:
        """The process id of the server this object runs (None: none, or another process's shared one)."""
        return self._process.pid

    def url(self) -> str:
        """The URL of a running server: this one, or a new one where it died or could not be reached.

        Raises:
            EnvFailure: (``server_down``) The command could not be run, exited, or did not answer in time.
        """
        with self._lock:
            if self._url is None or not self._answering():
                self._url = self._shared_url() if self._shared else self._start()
            return self._url

    def suspect(self) -> None:
        """A call could not reach the server: the next :meth:`url` checks it, and restarts it if needed."""
        self._suspect = True

    def close(self) -> None:
        """Stop the server if this object started it (others' shared server is theirs to stop)."""
        self._stop()

    def _answering(self) -> bool:
        """Whether the server of ``self._url`` is still there (checked over HTTP after a call could not reach
        it: one episode's broken connection must not restart the server under the others)."""
        returncode = self._process.returncode()
        if returncode is None:
            if not self._suspect:
                return True
            self._suspect = False
            if _healthy(self._url):
                return True
        logger.warning(
            "OpenEnv server %s %s; starting another (its log: %s)",
            self._url,
            "does not answer /health" if returncode is None else f"exited with code {returncode}",
            self._process.log_path,
        )
        return False

    def _shared_url(self) -> str:
        """The machine's server for this command, started here if none answers."""
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        with open(self._record.with_suffix(".lock"), "a") as lock:
            self._acquire(lock)
            try:
                url = self._recorded_url()
                if url is not None and _healthy(url):
                    return url
                url = self._start()
                self._record.write_text(json.dumps({"url": url, "pid": self._process.pid, "command": self.command}))
                return url
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _acquire(self, lock) -> None:
        """Take the machine-wide lock, waiting at most as long as another process may take to start a server."""
        deadline = time.monotonic() + self._startup_timeout_s + _STOP_GRACE_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise EnvFailure(
                        SERVER_DOWN, f"another process held {lock.name} for longer than a server start"
                    ) from None
                time.sleep(_HEALTH_POLL_S)

    def _recorded_url(self) -> str | None:
        try:
            return json.loads(self._record.read_text())["url"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _start(self) -> str:
        """Start the command on a free port and wait until it answers ``/health``: its URL."""
        self._process.stop()  # whatever is left of the last one (it may hang rather than have exited)
        port = _free_port()
        argv = [part.replace("{port}", str(port)) for part in self.command]
        url = f"http://127.0.0.1:{port}"
        try:
            process = self._process.start(argv)
        except OSError as error:
            raise EnvFailure(SERVER_DOWN, f"cannot run OpenEnv server command {argv}: {error}") from None
        logger.info("started OpenEnv server %s (pid %d) at %s; its output: %s", argv, process.pid, url, self.log_path)
        deadline = time.monotonic() + self._startup_timeout_s
        while not _healthy(url):
            if process.poll() is not None:
                raise EnvFailure(
                    SERVER_DOWN,
                    f"OpenEnv server {argv} exited with code {process.returncode} before answering {url}/health; "
                    f"its output is in {self.log_path}",
                )
            if time.monotonic() > deadline:
                self._process.stop()
                raise EnvFailure(
                    SERVER_DOWN,
                    f"OpenEnv server {argv} did not answer {url}/health within startup_timeout_s="
                    f"{self._startup_timeout_s}; its output is in {self.log_path}",
                )
            time.sleep(_HEALTH_POLL_S)
        return url


class _OwnedProcess:
    """The server process an object started: what its finalizer stops (it holds no reference to the object)."""

    def __init__(self):
        self._popen: subprocess.Popen | None = None
        self.log_path: Path | None = None

    @property
    def pid(self) -> int | None:
        return None if self._popen is None else self._popen.pid

    def start(self, argv: list[str]) -> subprocess.Popen:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        if self.log_path is None:  # one log per object: a restart appends to it
            fd, name = tempfile.mkstemp(prefix="server-", suffix=".log", dir=STATE_DIR)
            os.close(fd)
            self.log_path = Path(name)
        with open(self.log_path, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {argv}\n".encode())
            log.flush()
            self._popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        return self._popen

    def returncode(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def stop(self) -> None:
        popen, self._popen = self._popen, None
        if popen is None or popen.poll() is not None:
            return
        popen.terminate()
        try:
            popen.wait(_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()


def _free_port() -> int:
    """A port nothing listens on now (the server binds it a moment later; a clash fails that start only)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _healthy(url: str) -> bool:
    """Whether ``url`` answers OpenEnv's ``GET /health``."""
    try:
        with _DIRECT.open(f"{url}/health", timeout=_HEALTH_TIMEOUT_S) as response:
            return response.status == 200
    except (OSError, ValueError):
        return False
