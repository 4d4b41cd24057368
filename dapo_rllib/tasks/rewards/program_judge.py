"""Judge a candidate with a dataset's own test program, the two in sandboxes of their own.

A test program (HumanEval's ``check(candidate)``, MBPP's asserts and ``test_setup_code``, a unittest
case, a loop over generated inputs, helper code) runs in one sandbox, the candidate's code in
another, started together. In the test program, each of the candidate's names (:attr:`TestProgram.names`)
is a stand-in: calling it, or a method of an instance it made, sends the call to this process as a
request, arguments as data (:mod:`dapo_rllib.tasks.rewards.data_values`); this process checks it, passes
it to the candidate's sandbox, reads the answer there, decodes it as data (a value that is not data
is that call's failure), and hands it back. So the two never share a process, memory, a file
descriptor or a file system; the candidate never sees the test code nor its expected values (only
the arguments of its calls), and what it returns is a value built here from data, whose equality is
the builtin type's. The test program's own outcome is each test's verdict, read here.

One candidate process serves every call of a task. The candidate's time (its start and its calls)
and the test program's own time are budgeted apart, ``timeout_s`` each: a candidate that answers
slowly runs out of its own budget ("timeout") and the remaining calls fail at once; a test program
that runs out of its own budget, crashes, fails a test without calling the candidate, or writes
something that is not the protocol is a *broken task* (the task's fault, not the candidate's).

What a test's failure is: an ``AssertionError`` or any exception after the candidate answered is a
``"wrong answer"``; an exception the candidate raised (re-raised in the test program as the same
builtin exception type, so that tests expecting one still pass) is a ``"runtime error"`` (or
``"memory limit"``, ``"timeout"``) when it ends the test; a value that is not data is a ``"wrong answer"``.
"""

from __future__ import annotations

import marshal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from dapo_rllib.tasks.data.code_tests import TestProgram
from dapo_rllib.tasks.rewards import data_values
from dapo_rllib.tasks.rewards.data_values import NotData
from dapo_rllib.tasks.sandbox import Sandbox, SandboxProcess

__all__ = ["CANDIDATE_SERVER", "ProgramVerdict", "frame", "judge_program"]

# What both sandboxed programs start with: the data codec and the two directions of the protocol.
# From this process: frames of an 8-byte little-endian length and a `marshal`ed message, read from a
# private copy of stdin (fd 0 then reads as empty, so that code reading its input cannot eat them by
# accident); marshal is built into the interpreter and the frames hold only data that this process
# made. To this process: one JSON object per line on REPORT_FD, which it parses as data only.
_PRELUDE: Final = (
    Path(data_values.__file__).read_text()
    + r"""
import marshal, os, sys

_frames = os.fdopen(os.dup(0), "rb")
_empty, _writer = os.pipe()
os.close(_writer)
os.dup2(_empty, 0)


def receive():
    "The next message from the judge, or None at the end of its stream."
    header = _frames.read(8)
    if len(header) < 8:
        return None
    return marshal.loads(_frames.read(int.from_bytes(header, "little")))


def send(message):
    data = (to_json(message) + "\n").encode()
    while data:
        data = data[os.write(3, data):]


def described(error):
    message = str(error)
    return (type(error).__name__ + (": " + message if message else ""))[:300]
"""
)

# Runs in the candidate's sandbox. Its first message: the code; then one request per message: {"id",
# "name", "args", "kwargs"}, with "instance" for a method of an instance it made. On REPORT_FD:
# {"ready": true} or {"failure": ...} once the code has run, then one answer per request: {"id",
# "value": tree} | {"id", "instance": int} (a class was called) | {"id", "error", "type", "detail"}.
# Nothing here needs protecting: whatever the candidate changes, it only changes its own answers.
CANDIDATE_SERVER: Final = (
    _PRELUDE
    + r"""
namespace = {"__name__": "solution"}
try:
    exec(compile(receive(), "<solution>", "exec"), namespace)
except SystemExit:
    pass
except MemoryError:
    namespace.clear()
    send({"failure": "memory limit"})
    os._exit(0)
except BaseException as error:
    send({"failure": "runtime error", "detail": described(error)})
    os._exit(0)
send({"ready": True})
instances = []
while (request := receive()) is not None:
    answer = {"id": request["id"]}
    try:
        if "instance" in request:
            function = getattr(instances[request["instance"]], request["name"])
        elif request["name"] in namespace:
            function = namespace[request["name"]]
        else:
            send(dict(answer, error="runtime error", type="NameError", detail="the program defines no %s" % request["name"]))
            continue
        value = function(*request["args"], **request["kwargs"])
        if isinstance(function, type) and isinstance(value, function):
            instances.append(value)
            answer["instance"] = len(instances) - 1
        else:
            answer["value"] = dump(value)
    except MemoryError:
        answer.update(error="memory limit", type="MemoryError", detail="")
    except (NotData, RecursionError) as error:  # RecursionError: in dump, of the candidate's own value
        answer.update(error="not data", type="TypeError", detail=str(error)[:200])
    except BaseException as error:
        answer.update(error="runtime error", type=type(error).__name__[:100], detail=described(error))
    send(answer)
os._exit(0)
"""
)

# Runs in the test program's sandbox. Its first message: {"setup", "tests", "names"}; then one answer
# per request it made. On REPORT_FD: its requests, then per test {"test": i, "outcome", "detail"},
# then {"done": true}; or {"broken": why} when the setup fails or a test fails without calling the
# candidate.
_TEST_RUNNER: Final = (
    _PRELUDE
    + r"""
import builtins

program = receive()
calls_made = 0


class CandidateError(Exception):
    "The candidate's call failed in a way no builtin exception names (a value that is not data, a timeout)."


class ArgumentNotData(Exception):
    "The test passed the candidate something that is not data: the judge cannot send it."


def remote(request, args, kwargs):
    global calls_made
    try:
        request.update(args=[dump(arg) for arg in args], kwargs={key: dump(value) for key, value in kwargs.items()})
    except (NotData, RecursionError) as error:
        raise ArgumentNotData(str(error)) from None
    calls_made += 1
    request["id"] = calls_made
    send(request)
    answer = receive()
    if "value" in answer:
        return answer["value"]
    if "instance" in answer:
        return Instance(answer["instance"])
    kind = getattr(builtins, answer["type"], None) if answer["error"] == "runtime error" else None
    if not (isinstance(kind, type) and issubclass(kind, Exception)):
        kind = CandidateError
    error = kind(answer["detail"] or answer["error"])
    error.candidate_failure = answer["error"]
    raise error


class Function:
    "Stands for one of the candidate's functions or classes."

    def __init__(self, name):
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args, **kwargs):
        return remote({"name": self.__name__}, args, kwargs)

    def __repr__(self):
        return "<candidate's %s>" % self.__name__


class Instance:
    "Stands for an instance of one of the candidate's classes, living in the candidate's process."

    def __init__(self, index):
        self._index = index

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: remote({"instance": self._index, "name": name}, args, kwargs)


namespace = {"__name__": "__main__"}
try:
    exec(compile(program["setup"], "<test setup>", "exec"), namespace)
except BaseException as error:
    send({"broken": "the test setup raised " + described(error)})
    os._exit(0)
for name in program["names"]:
    namespace[name] = Function(name)
for index, test in enumerate(program["tests"]):
    before = calls_made
    verdict = {"test": index, "outcome": "pass", "detail": ""}
    try:
        exec(compile(test, "<test %d>" % index, "exec"), namespace)
    except ArgumentNotData as error:
        send({"broken": "test %d passes the candidate a value that is not data (%s)" % (index, error)})
        os._exit(0)
    except BaseException as error:
        failure = getattr(error, "candidate_failure", None)
        if failure is None and calls_made == before:
            send({"broken": "test %d fails without calling the candidate: %s" % (index, described(error))})
            os._exit(0)
        outcome = {None: "wrong answer", "not data": "wrong answer"}.get(failure, failure)
        verdict.update(outcome=outcome, detail=described(error))
    send(verdict)
send({"done": True})
os._exit(0)
"""
)

#: A candidate's call failures the server reports (and this process passes on), besides "timeout".
_CALL_ERRORS: Final = ("runtime error", "memory limit", "not data")
#: What the test runner may say of a test.
_TEST_OUTCOMES: Final = ("pass", "wrong answer", "runtime error", "memory limit", "timeout")
# Seconds past both budgets before the sandboxes' own wall-clock limit stops the runs.
_GRACE_S: Final = 2.0


@dataclass(frozen=True)
class ProgramVerdict:
    """How a candidate did against a test program.

    Attributes:
        outcomes: Per test, ``"pass"`` or one of :data:`dapo_rllib.tasks.rewards.code.FAILURES`.
        details: Per test, what went wrong in words ("" for a pass).
        answered: The candidate answered at least one call (it met its tests).
        timed_out: The candidate ran out of its time, or the test program out of its own.
        broken: Why the task is broken (the test program's fault), or None.
    """

    outcomes: tuple[str, ...]
    details: tuple[str, ...]
    answered: bool
    timed_out: bool
    broken: str | None = None


class _Budget:
    """Seconds one side may still spend, counted while this process waits for it."""

    def __init__(self, seconds: float) -> None:
        self.left = seconds

    def wait(self, receive) -> bytes | None:
        started = time.monotonic()
        try:
            return receive(max(self.left, 0.0))
        finally:
            self.left -= time.monotonic() - started

    @property
    def spent(self) -> bool:
        return self.left <= 0


def judge_program(code: str, program: TestProgram, sandbox: Sandbox) -> ProgramVerdict:
    """Run ``program``'s tests against the candidate ``code`` (see the module docstring)."""
    timeout_s = sandbox.limits.timeout_s
    run_limit_s = 2 * timeout_s + _GRACE_S
    with (
        sandbox.start(CANDIDATE_SERVER, timeout_s=run_limit_s) as candidate,
        sandbox.start(_TEST_RUNNER, timeout_s=run_limit_s) as tests,
    ):
        session = _Session(candidate, tests, program, _Budget(timeout_s), _Budget(timeout_s))
        return session.judge(code)


class _Session:
    """The relay between one candidate and one test program."""

    def __init__(
        self,
        candidate: SandboxProcess,
        tests: SandboxProcess,
        program: TestProgram,
        candidate_time: _Budget,
        test_time: _Budget,
    ) -> None:
        self.candidate, self.tests, self.program = candidate, tests, program
        self.candidate_time, self.test_time = candidate_time, test_time
        self.dead: str | None = None  # why the candidate can answer no more calls
        self.answered = False

    def judge(self, code: str) -> ProgramVerdict:
        setup = {"setup": self.program.setup, "tests": list(self.program.tests), "names": list(self.program.names)}
        self.candidate.send(frame(code), self.candidate_time.left)
        self.tests.send(frame(setup), self.test_time.left)
        started = self._candidate_message(expected=("ready", "failure"))
        if started is None or "ready" not in started:
            failure = "runtime error" if started is None else started.get("failure", "runtime error")
            failure = "timeout" if self.dead == "timeout" else failure
            # A program that said why it failed met its tests, as the call runner counts it.
            return self._all_failed(failure, f"the program failed before any call ({failure})", started is not None)
        outcomes: dict[int, tuple[str, str]] = {}
        while True:
            line = self.test_time.wait(self.tests.receive_line)
            if line is None:
                return self._broken(self._test_program_end())
            try:
                message = data_values.parse_json(line)
            except NotData:
                return self._broken(f"the test program wrote something that is not the protocol: {_shown(line)}")
            if not isinstance(message, dict):
                return self._broken(f"the test program wrote something that is not the protocol: {_shown(line)}")
            if "done" in message:
                break
            if "broken" in message:
                return self._broken(str(message["broken"])[:500])
            if "test" in message:
                index, outcome = message.get("test"), message.get("outcome")
                if not (type(index) is int and 0 <= index < len(self.program.tests) and outcome in _TEST_OUTCOMES):
                    return self._broken(f"the test program wrote a malformed verdict: {_shown(line)}")
                outcomes[index] = (outcome, str(message.get("detail", ""))[:300])
                continue
            answer = self._call(message)
            if answer is None:
                return self._broken(f"the test program made a malformed request: {_shown(line)}")
            if not self.tests.send(frame(answer), max(self.test_time.left, 0.0)):
                return self._broken(self._test_program_end())
        missing = [i for i in range(len(self.program.tests)) if i not in outcomes]
        if missing:
            return self._broken(f"the test program ended without verdicts for tests {missing}")
        return ProgramVerdict(
            outcomes=tuple(outcomes[i][0] for i in range(len(self.program.tests))),
            details=tuple(outcomes[i][1] for i in range(len(self.program.tests))),
            answered=self.answered,
            timed_out=self.dead == "timeout",
        )

    def _call(self, request: dict) -> dict | None:
        """The answer to one of the test program's requests (None: not a well-formed request)."""
        index, name, instance = request.get("id"), request.get("name"), request.get("instance", None)
        args, kwargs = request.get("args"), request.get("kwargs")
        if not (
            type(index) is int
            and isinstance(name, str)
            and (instance is None and name in self.program.names or type(instance) is int)
            and isinstance(args, list)
            and isinstance(kwargs, dict)
        ):
            return None
        try:  # the arguments rebuilt from data here
            forwarded = {
                "id": index,
                "name": name,
                "args": [data_values.load(arg) for arg in args],
                "kwargs": {key: data_values.load(value) for key, value in kwargs.items()},
            }
        except (NotData, RecursionError):
            return None
        if instance is not None:
            forwarded["instance"] = instance
        if self.dead is None and not self.candidate.send(frame(forwarded), max(self.candidate_time.left, 0.0)):
            self._candidate_gone()
        while self.dead is None:
            answer = self._candidate_message()
            if answer is not None and answer.get("id") == index:
                return self._checked_answer(answer)
        return _error(index, self.dead, "the program timed out" if self.dead == "timeout" else "the program ended")

    def _checked_answer(self, answer: dict) -> dict:
        """The candidate's answer as the test program gets it: its value rebuilt from data here."""
        index = answer["id"]
        if "value" in answer:
            try:
                value = data_values.load(answer["value"])
            except (NotData, RecursionError) as error:
                return _error(index, "not data", f"returned a value that is not data ({error})")
            self.answered = True
            return {"id": index, "value": value}
        if type(answer.get("instance")) is int:
            self.answered = True
            return {"id": index, "instance": answer["instance"]}
        error = answer.get("error")
        if error in _CALL_ERRORS:
            self.answered = True
            kind = answer.get("type")
            return _error(index, error, str(answer.get("detail", ""))[:300], kind if isinstance(kind, str) else "")
        return _error(index, "runtime error", f"the program answered with something else: {_shown(answer)}")

    def _candidate_message(self, expected: tuple[str, ...] = ("id",)) -> dict | None:
        """The candidate's next JSON object with one of the ``expected`` keys (other lines are
        skipped); None once it is gone."""
        while self.dead is None:
            line = self.candidate_time.wait(self.candidate.receive_line)
            if line is None:
                self._candidate_gone()
                return None
            try:
                message = data_values.parse_json(line)
            except NotData:
                continue
            if isinstance(message, dict) and any(key in message for key in expected):
                return message
        return None

    def _candidate_gone(self) -> None:
        self.dead = "timeout" if self.candidate_time.spent or self.candidate.timed_out else "runtime error"
        self.candidate.close()  # its processes stop now, not when the tests end

    def _test_program_end(self) -> str:
        if self.test_time.spent or self.tests.timed_out:
            return "the test program ran out of time"
        if self.tests.truncated:
            return "the test program wrote past the output cap"
        stderr = self.tests.stderr.decode(errors="replace").strip()
        return "the test program ended without a verdict" + (f": {stderr[-300:]}" if stderr else "")

    def _all_failed(self, failure: str, detail: str, met_tests: bool) -> ProgramVerdict:
        count = len(self.program.tests)
        return ProgramVerdict((failure,) * count, (detail,) * count, met_tests, failure == "timeout")

    def _broken(self, why: str) -> ProgramVerdict:
        count = len(self.program.tests)
        timed_out = self.dead == "timeout" or self.test_time.spent
        return ProgramVerdict(("broken task",) * count, (why,) * count, self.answered, timed_out, why)


def _error(index: int, error: str, detail: str, kind: str = "") -> dict:
    return {"id": index, "error": error, "type": kind, "detail": detail}


def frame(message) -> bytes:
    """``message`` (data only) as the sandboxed programs read it: its ``marshal`` bytes after their length."""
    data = marshal.dumps(message)
    return len(data).to_bytes(8, "little") + data


def _shown(value) -> str:
    text = value.decode(errors="replace") if isinstance(value, bytes) else repr(value)
    return text if len(text) <= 120 else text[:120] + "..."
