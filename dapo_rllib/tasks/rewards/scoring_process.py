"""Score responses in a child process, so that a scorer that hangs can be killed.

A reward function can hang on degenerate model output (a regex backtracking
catastrophically, sympy simplifying a monster expression) or on user code. Such work
often sits in C code that holds the GIL and ignores signals, so neither a thread nor
``signal.alarm`` can stop it: only killing the process that runs it does (docs/design/algorithm.md §8).

:class:`ScoringProcess` keeps one persistent child,
``python -m dapo_rllib.tasks.rewards.scoring_process``, and sends it one request at a time as
length-prefixed pickle frames over its stdin/stdout. When a reply does not arrive
within the timeout, the child is SIGKILLed, the sample counts as wrong
(:data:`TIMED_OUT`), and the next call starts a fresh child. The child is started with
``subprocess`` rather than ``multiprocessing`` because this runs inside Ray actors and
vLLM processes, where forking is unsafe and spawning re-imports ``__main__``.

Costs: starting a child takes about 0.4 s and 110 MB of memory (it imports no Ray: see
``dapo_rllib.env_vars.NO_REGISTRATION_ENV``); this is paid once per process with
:func:`shared_scoring_process`, and again after each timeout. Starting it and
loading each scorer module are bounded by :data:`STARTUP_TIMEOUT_S`, not by the scoring
timeout. A round trip adds well under a millisecond per sample.
"""

from __future__ import annotations

import atexit
import ctypes
import dataclasses
import math
import numbers
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, Final, Self

from dapo_rllib.columns import Info
from dapo_rllib.contracts import ScoreResult, check_score_result
from dapo_rllib.env_vars import NO_REGISTRATION_ENV
from dapo_rllib.tasks.rewards import load_scorer
from dapo_rllib.tasks.rewards.math_dapo import INVALID_PRED

__all__ = ["STARTUP_TIMEOUT_S", "TIMED_OUT", "ScoreOutcome", "ScoringProcess", "shared_scoring_process"]

#: Seconds allowed for the child to start, and for it to import a scorer's module.
#: Generous because imports crawl on a loaded machine (3.5 s idle); exceeding it is an
#: error, not a wrong answer.
STARTUP_TIMEOUT_S: Final = 120.0

# After closing the child's stdin, how long it gets to exit on its own before SIGKILL.
_EXIT_GRACE_S: Final = 2.0
# Frame header: the pickle's length in bytes.
_FRAME_HEADER: Final = struct.Struct("!Q")
# Linux prctl option that makes the kernel signal a process when its parent dies.
_PR_SET_PDEATHSIG: Final = 1


@dataclasses.dataclass(frozen=True)
class ScoreOutcome:
    """A scorer's verdict on one response, and whether it ran out of time."""

    score: float
    acc: bool
    pred: str | None
    timed_out: bool = False

    @classmethod
    def from_result(cls, scorer_spec: str, result: Any) -> ScoreOutcome:
        """Check a scorer's result (:func:`dapo_rllib.contracts.check_score_result`) and wrap it (pred None: no
        answer).

        Raises:
            TypeError: ``result`` lacks a key, or a value has the wrong type.
        """
        result = check_score_result(result, f"scorer {scorer_spec!r} returned")
        # math_dapo keeps the reference's "[INVALID]" for "no answer"; downstream (majority
        # voting) needs one meaning for it, so it becomes None like every other scorer's.
        pred = None if result[Info.PRED] == INVALID_PRED else result[Info.PRED]
        return cls(score=float(result[Info.SCORE]), acc=bool(result[Info.ACC]), pred=pred)

    def as_result(self) -> ScoreResult:
        """This verdict as a :class:`ScoreResult`, ``timed_out`` as its ``score_timed_out``."""
        return ScoreResult(score=self.score, acc=self.acc, pred=self.pred, score_timed_out=self.timed_out)


#: What a response scores when its scorer runs out of time: wrong.
TIMED_OUT: Final = ScoreOutcome(score=-1.0, acc=False, pred=None, timed_out=True)


class ScoringProcess:
    """Runs scorers in a persistent child process, with a timeout per response.

    Thread-safe: calls are serialised, since the child scores one response at a time.
    Use :func:`shared_scoring_process` rather than one instance per environment. The
    child is started on first use and ended by :meth:`close`, by leaving a ``with``
    block, or at interpreter exit.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: _Child | None = None
        _LIVE_INSTANCES.add(self)

    def score(self, scorer_spec: str, response: str, ground_truth: str, timeout_s: float) -> ScoreOutcome:
        """Score ``response`` with the scorer named by ``scorer_spec`` within ``timeout_s``.

        Args:
            scorer_spec: A name registered in ``dapo_rllib.tasks.rewards.SCORERS`` or an import
                path ``"package.module:function"`` importable in the child (which gets
                this process's ``sys.path``).
            response: The model's response text.
            ground_truth: The reference answer.
            timeout_s: Seconds the scorer may take, from sending the request to receiving
                the reply. Past it the child is killed and :data:`TIMED_OUT` returned.

        Raises:
            TypeError, ValueError: Bad arguments.
            RuntimeError: The scorer raised (the message names its exception and
                includes the child's traceback), the child could not start, or it died
                twice in a row. A child that dies once (e.g. killed from outside) is
                replaced and the request resent; its time does not count against
                ``timeout_s``.
        """
        for name, value in (("scorer_spec", scorer_spec), ("response", response), ("ground_truth", ground_truth)):
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a str, got {type(value).__name__}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real) or not 0 < timeout_s < math.inf:
            raise ValueError(f"timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")

        with self._lock:
            try:
                return self._score_in_child(scorer_spec, response, ground_truth, timeout_s)
            except _ChildDied:
                # Most likely killed from outside (or by the kernel, see _die_with_parent):
                # a fresh child gets a second try.
                self._discard_child()
            try:
                return self._score_in_child(scorer_spec, response, ground_truth, timeout_s)
            except _ChildDied as died:
                # Twice on the same request: the request crashes it, which must surface.
                self._discard_child()
                raise RuntimeError(
                    f"the scoring process died twice in a row while scoring with "
                    f"{scorer_spec!r} ({died}); see its stderr above"
                ) from None

    def close(self) -> None:
        """End the child process, if one is running. Scoring again starts a new one."""
        with self._lock:
            self._discard_child()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _score_in_child(self, scorer_spec: str, response: str, ground_truth: str, timeout_s: float) -> ScoreOutcome:
        if self._child is None:
            self._child = _start_child()
        if scorer_spec not in self._child.loaded_scorers:
            # Importing a scorer module is startup work, not scoring time.
            try:
                reply = self._child.call(("load", scorer_spec), STARTUP_TIMEOUT_S)
            except TimeoutError:
                self._kill_child()
                raise RuntimeError(
                    f"loading scorer {scorer_spec!r} took longer than STARTUP_TIMEOUT_S = {STARTUP_TIMEOUT_S} s"
                ) from None
            _unwrap_reply(reply, scorer_spec, "loading")
            self._child.loaded_scorers.add(scorer_spec)
        try:
            reply = self._child.call(("score", scorer_spec, response, ground_truth), timeout_s)
        except TimeoutError:
            self._kill_child()
            return TIMED_OUT
        return ScoreOutcome(**_unwrap_reply(reply, scorer_spec, "scoring"))

    def _kill_child(self) -> None:
        self._child.kill()
        self._child = None

    def _discard_child(self) -> None:
        if self._child is not None:
            self._child.stop()
            self._child = None

    def _forget_child_after_fork(self) -> None:
        # The child belongs to the process we were forked from: drop our copies of its
        # pipes (a copy of its stdin would keep it from ever seeing EOF) without killing it.
        self._lock = threading.Lock()
        if self._child is not None:
            self._child.close_pipes()
            self._child = None


class _ChildDied(Exception):
    """The child exited or closed its pipes unexpectedly."""


class _Child:
    """One child process and the frame protocol with it."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.loaded_scorers: set[str] = set()
        self._poller = select.poll()  # not select.select: Ray processes hold fds > 1024
        self._poller.register(process.stdout.fileno(), select.POLLIN)

    @classmethod
    def start(cls) -> _Child:
        env = dict(os.environ)
        # So the child can import what this process can: user scorers, test helpers,
        # Ray runtime_env working dirs. '' (the current directory) is made explicit.
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in sys.path if isinstance(p, str))
        # Scorers are plain Python: `import dapo_rllib` need not load Ray and RLlib in the child.
        env[NO_REGISTRATION_ENV] = "1"
        process = subprocess.Popen(
            [sys.executable, "-m", __spec__.name, str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        child = cls(process)
        try:
            first_bytes = child._read_exactly(len(_READY_FRAME), time.monotonic() + STARTUP_TIMEOUT_S)
        except TimeoutError:
            child.kill()
            raise RuntimeError(
                f"the scoring process did not start within STARTUP_TIMEOUT_S = {STARTUP_TIMEOUT_S} s"
            ) from None
        except _ChildDied as died:
            child.stop()
            raise RuntimeError(f"the scoring process failed to start: {died}; see its stderr above") from None
        if first_bytes != _READY_FRAME:
            child.kill()
            raise RuntimeError(
                f"the scoring process wrote {first_bytes!r} to stdout instead of its 'ready' frame: "
                f"something it imports at start-up prints to stdout, which is reserved for replies"
            )
        return child

    def call(self, request: tuple, timeout_s: float) -> tuple:
        """Send ``request`` and return the reply; TimeoutError past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        try:
            _write_frame(self.process.stdin, request)
        except BrokenPipeError:
            raise _ChildDied(self._exit_description()) from None
        return self._read_frame(deadline)

    def stop(self) -> None:
        """End the child: it exits at EOF on its stdin if it is idle, else it is killed."""
        self.close_pipes()
        try:
            self.process.wait(_EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL the child: a regex stuck in C code ignores every gentler signal."""
        self.process.kill()
        self.process.wait()  # reaped, so no zombie is left behind
        self.close_pipes()

    def close_pipes(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except BrokenPipeError:  # flushing a request to a child that is gone
                pass

    def _read_frame(self, deadline: float) -> Any:
        (length,) = _FRAME_HEADER.unpack(self._read_exactly(_FRAME_HEADER.size, deadline))
        return pickle.loads(self._read_exactly(length, deadline))

    def _read_exactly(self, size: int, deadline: float) -> bytes:
        data = bytearray()
        while len(data) < size:
            remaining_ms = math.ceil((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0 or not self._poller.poll(remaining_ms):
                raise TimeoutError
            chunk = os.read(self.process.stdout.fileno(), size - len(data))
            if not chunk:
                raise _ChildDied(self._exit_description())
            data += chunk
        return bytes(data)

    def _exit_description(self) -> str:
        try:
            code = self.process.wait(_EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            return "it closed its pipes but did not exit"
        if code < 0:
            return f"it was killed by {signal.Signals(-code).name}"
        return f"it exited with status {code}"


def _unwrap_reply(reply: tuple, scorer_spec: str, doing: str) -> Any:
    """The payload of an ``("ok", payload)`` reply; RuntimeError for an ``("error", ...)`` one."""
    if reply[0] == "ok":
        return reply[1]
    _, error_type, message, child_traceback = reply
    raise RuntimeError(
        f"{doing} scorer {scorer_spec!r} raised {error_type}: {message}\n\n"
        f"Traceback in the scoring process:\n{child_traceback}"
    )


def _frame(message: Any) -> bytes:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _FRAME_HEADER.pack(len(payload)) + payload


def _write_frame(stream: IO[bytes], message: Any) -> None:
    stream.write(_frame(message))
    stream.flush()


def _read_frame_blocking(stream: IO[bytes]) -> Any:
    """The next frame from ``stream``, or None at end of file (the parent is done)."""
    header = stream.read(_FRAME_HEADER.size)
    if len(header) < _FRAME_HEADER.size:
        return None
    (length,) = _FRAME_HEADER.unpack(header)
    return pickle.loads(stream.read(length))


# The child's first frame, compared byte for byte: anything printed to stdout while the
# child imports dapo_rllib (before it can redirect prints) would corrupt the protocol.
_READY_FRAME: Final = _frame("ready")

_LIVE_INSTANCES: weakref.WeakSet[ScoringProcess] = weakref.WeakSet()
_shared_instance: ScoringProcess | None = None
_shared_instance_lock = threading.Lock()
# The kernel kills a child when the *thread* that started it exits (_die_with_parent), and environments score
# from short-lived threads (an env runner's calls, `rollout.env_calls`): started there, a child lived for one
# call, and every call paid a new child's start and its scorer's import. Children are started from this one
# thread instead, which lives as long as the process.
_starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scoring-process-starter")


def _start_child() -> _Child:
    """A new child, started from the long-lived starter thread."""
    return _starter.submit(_Child.start).result()


def shared_scoring_process() -> ScoringProcess:
    """The process-wide :class:`ScoringProcess`, so all environments share one child."""
    global _shared_instance
    with _shared_instance_lock:
        if _shared_instance is None:
            _shared_instance = ScoringProcess()
        return _shared_instance


def _close_all() -> None:
    for instance in list(_LIVE_INSTANCES):
        instance.close()


def _reset_after_fork() -> None:
    global _shared_instance_lock, _starter
    _shared_instance_lock = threading.Lock()
    # The starter's thread did not come along into the forked process.
    _starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scoring-process-starter")
    for instance in list(_LIVE_INSTANCES):
        instance._forget_child_after_fork()


atexit.register(_close_all)
os.register_at_fork(after_in_child=_reset_after_fork)


# --- the child's side ------------------------------------------------------------------


def _serve(parent_pid: int) -> None:
    """Answer requests from the parent until it closes our stdin."""
    _die_with_parent(parent_pid)
    # The parent decides when we stop; Ctrl-C in a terminal reaches the whole process
    # group, and must not kill us in the middle of a reply.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The protocol gets private copies of stdin/stdout; fds 0 and 1 are pointed at
    # /dev/null and stderr, so a scorer that reads or prints cannot corrupt a frame.
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    with open(os.devnull, "rb") as devnull:
        os.dup2(devnull.fileno(), 0)
    os.dup2(2, 1)

    replies.write(_READY_FRAME)
    replies.flush()
    while (request := _read_frame_blocking(requests)) is not None:
        _write_frame(replies, _handle(request))


def _handle(request: tuple) -> tuple:
    kind, scorer_spec, *arguments = request
    try:
        scorer = load_scorer(scorer_spec)
        if kind == "load":
            return ("ok", None)
        outcome = ScoreOutcome.from_result(scorer_spec, scorer(*arguments))
    except Exception as error:  # noqa: BLE001 - every scorer error goes back to the parent
        return ("error", type(error).__name__, str(error), traceback.format_exc())
    # A plain dict: a ScoreOutcome pickled here would be __main__.ScoreOutcome.
    return ("ok", dataclasses.asdict(outcome))


def _die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGKILL us when the parent dies, even while we are stuck in C code.

    Linux only. The signal comes when the parent *thread* that started us exits, which is why the parent
    starts children from one long-lived thread (`_start_child`).
    """
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
