"""Score a completion against a code task by running its code and the task's tests in the sandbox.

The code (:func:`extract_code`) runs inside a *harness*: a Python program, one per sandbox run,
that executes the candidate, then the tests, and writes one JSON line to the sandbox's report
descriptor (:data:`dapo_rllib.sandbox.REPORT_FD`)::

    {"nonce": "<32 hex digits>", "failure": null | "syntax error" | "runtime error" | "memory limit",
     "outcomes": ["pass" | "wrong answer" | "runtime error" | "memory limit", ...]}

``failure`` says that the candidate itself did not run to its end (its tests were then not run
and ``outcomes`` is empty); ``outcomes`` has one entry per test otherwise. The nonce is drawn
afresh for every run by this process and written into that run's harness, so that only the
harness can write the report: a candidate that exits early (``sys.exit(0)`` counts as the
candidate's end, ``os._exit(0)`` as a run without a report), prints a fake report, replaces
``print``/``builtins`` or writes its own JSON to the report descriptor does not pass. A test
passes only on a report that carries the run's nonce, exactly once; the exit status counts for
nothing. The harness saves ``os.write``, ``os._exit`` and the report descriptor before the
candidate runs, and runs with a private copy of the builtins, so what the candidate replaces
is not what the harness uses.

Per format:

- ``assert``: the candidate runs as module ``solution``; then each test runs on its own in the
  candidate's namespace. An ``AssertionError`` is a wrong answer, any other exception a runtime
  error. ``SystemExit`` from the candidate ends the candidate, and the tests still run.
- ``function``: the same, and each test calls ``fn_name(*inputs[i])``. The return value is
  compared with ``outputs[i]`` as a JSON value (a tuple equals a list; an object of any other
  type, or of a subclass of a JSON type, never matches), so an object that claims to equal
  everything does not pass.
- ``stdio``: one sandbox run per case, the candidate running as ``__main__`` with the case's
  input on stdin (so ``input()``, ``sys.stdin`` and ``open(0)`` all work), each case with the
  full time limit. The case passes when the program ends (normally, or by ``SystemExit`` with
  code 0 or None: a non-zero code is a runtime error, as a judge would see it) and its stdout
  equals the expected output after :func:`normalize_output`.

A run without a valid report failed: ``"timeout"`` when it ran out of time (wall clock or CPU
time), ``"runtime error"`` otherwise (a crash, ``os._exit``, output past the sandbox's cap, which
makes the sandbox stop the program; for a stdio case that is a wrong answer). In the ``assert``
and ``function`` formats a timeout fails all of the task's tests, which share one run.

Limits of the protection: the harness shares its interpreter with the candidate, so a
candidate written to read the nonce out of the interpreter (frames, ``gc``) could forge a
report, and ``assert`` tests trust what the candidate's objects say about themselves
(``__eq__``, replaced builtins). The ``function`` format is immune to the latter; the built-in
generated tasks use it.
"""

from __future__ import annotations

import json
import re
import secrets
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from dapo_rllib.data.code_tasks import CodeTask, tests_to_json
from dapo_rllib.sandbox import REPORT_FD, Sandbox, SandboxResult

__all__ = [
    "FAILURES",
    "REWARD_MODES",
    "extract_code",
    "harness_program",
    "normalize_output",
    "score_code",
    "score_code_many",
]

#: Why a candidate failed (``None`` in the result when it passed every test).
FAILURES: Final = ("no code", "syntax error", "runtime error", "wrong answer", "timeout", "memory limit")
#: ``"binary"``: +1 when every test passes, else -1 (DAPO's reward). ``"fraction"``: the
#: fraction of tests passed, in [0, 1].
REWARD_MODES: Final = ("binary", "fraction")

# What a report may say: the candidate's own failure, and each test's outcome.
_CANDIDATE_FAILURES: Final = ("syntax error", "runtime error", "memory limit")
_TEST_OUTCOMES: Final = ("pass", "wrong answer", "runtime error", "memory limit")

# A fenced block: the info string's first word is the language.
_FENCED_BLOCK = re.compile(r"^```[ \t]*(?P<language>[^\s`]*)[^\n]*\n(?P<code>.*?)^```", re.DOTALL | re.MULTILINE)
_PYTHON_LANGUAGES: Final = ("", "python", "py", "python3")


def extract_code(completion: str) -> str | None:
    """The candidate program in ``completion``.

    The last fenced block tagged ``python``, ``py``, ``python3`` or untagged; without one, the
    whole completion. ``None`` when that is empty or whitespace.
    """
    blocks = [m["code"] for m in _FENCED_BLOCK.finditer(completion) if m["language"].lower() in _PYTHON_LANGUAGES]
    code = blocks[-1] if blocks else completion
    return code if code.strip() else None


def normalize_output(text: str) -> str:
    """``text`` without trailing whitespace on each line and without leading and trailing blank lines."""
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


# The harness program (see the module docstring). `_harness` runs with a private copy of the
# builtins, made before the candidate runs: names it uses (compile, exec, type, MemoryError...)
# are then the originals, whatever the candidate does to the `builtins` module.
_HARNESS_SOURCE: Final = r'''
import builtins, json, os, sys


def _harness(config, write, hard_exit, candidate_builtins, sys_module, original_stdout):
    nonce, kind, code, tests = config["nonce"], config["kind"], config["code"], config["tests"]

    def quoted(text):
        return "null" if text is None else '"' + text + '"'

    def report(failure, outcomes):
        """Write the report and end the process (never returns)."""
        # Formatted by hand from fixed words: the candidate may have replaced json's internals.
        line = '{"nonce": "%s", "failure": %s, "outcomes": [%s]}\n' % (
            nonce, quoted(failure), ", ".join([quoted(outcome) for outcome in outcomes]))
        data = line.encode()
        while data:
            data = data[write(config["report_fd"], data):]
        # Skips the candidate's atexit hooks and threads: nothing of it runs after the report.
        hard_exit(0)

    def outcome(test):
        try:
            test()
        except AssertionError:
            return "wrong answer"
        except MemoryError:
            return "memory limit"
        except BaseException:
            return "runtime error"
        return "pass"

    unmatchable = object()

    def plain(value):
        """`value` as plain JSON data (tuples become lists); `unmatchable` if it is not JSON data."""
        of_type = type(value)
        if value is None or of_type is bool or of_type is int or of_type is float or of_type is str:
            return value
        if of_type is list or of_type is tuple:
            return [plain(item) for item in value]
        if of_type is dict and all([type(key) is str for key in value]):
            return {key: plain(item) for key, item in value.items()}
        return unmatchable

    namespace = {"__name__": "__main__" if kind == "stdio" else "solution", "__builtins__": candidate_builtins}
    try:
        program = compile(code, "<solution>", "exec")
    except MemoryError:
        report("memory limit", [])
    except BaseException:  # SyntaxError; ValueError (NUL bytes); RecursionError (deep nesting)
        report("syntax error", [])
    try:
        exec(program, namespace)
    except SystemExit as stop:
        if kind == "stdio" and stop.code is not None and stop.code != 0:
            report("runtime error", [])
    except MemoryError:
        namespace.clear()  # frees what the candidate holds, so the report can be written
        report("memory limit", [])
    except BaseException:
        report("runtime error", [])

    if kind == "stdio":
        for stream in (original_stdout, sys_module.stdout):
            try:
                stream.flush()
            except BaseException:
                pass  # a closed or replaced stream: its output is what reached stdout
        report(None, [])
    if kind == "assert":
        checks = [compile(test, "<test %d>" % i, "exec") for i, test in enumerate(tests)]
        report(None, [outcome(lambda check=check: exec(check, namespace)) for check in checks])

    def call(arguments, expected):
        function = namespace.get(tests["fn_name"])
        if function is None:
            raise NameError(tests["fn_name"])
        if plain(function(*arguments)) != expected:
            raise AssertionError

    report(None, [outcome(lambda a=a, e=e: call(a, e)) for a, e in zip(tests["inputs"], tests["outputs"])])


_start = type(_harness)(_harness.__code__, {"__builtins__": dict(vars(builtins))})
'''
# The configuration goes into the call rather than a global, where `import __main__` would show the nonce.
_HARNESS_CALL: Final = "_start(json.loads({config!r}), os.write, os._exit, builtins, sys, sys.stdout)\n"


def harness_program(code: str, kind: str, tests: Any, nonce: str) -> str:
    """The harness program that runs ``code`` and then ``tests`` (JSON data) of a ``kind`` task.

    ``tests``: the assert statements (``"assert"``), the fn_name/inputs/outputs object
    (``"function"``), or None (``"stdio"``: the program only runs ``code``).
    """
    config = {"nonce": nonce, "kind": kind, "code": code, "tests": tests, "report_fd": REPORT_FD}
    return _HARNESS_SOURCE + _HARNESS_CALL.format(config=json.dumps(config))


@dataclass(frozen=True)
class _Run:
    """One sandbox run of a harness, and the nonce its report must carry."""

    program: str
    stdin: bytes
    nonce: str


@dataclass(frozen=True)
class _Report:
    failure: str | None
    outcomes: tuple[str, ...]


def _runs(code: str, task: CodeTask) -> list[_Run]:
    """The sandbox runs that test ``code`` on ``task``: one per stdio case, else one."""

    def run(tests: Any, stdin: bytes = b"") -> _Run:
        nonce = secrets.token_hex(16)
        return _Run(harness_program(code, task.kind, tests, nonce), stdin, nonce)

    if task.kind == "stdio":
        return [run(None, case.input.encode()) for case in task.tests]
    return [run(tests_to_json(task.tests))]


def _parse_report(report: bytes, nonce: str, num_tests: int) -> _Report | None:
    """The harness's report in ``report``, or None when there is no single valid one."""
    found = []
    for line in report.decode("utf-8", errors="replace").splitlines():
        try:
            fields = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(fields, dict) and fields.get("nonce") == nonce:
            found.append(fields)
    if len(found) != 1:
        return None
    failure, outcomes = found[0].get("failure"), found[0].get("outcomes")
    if not isinstance(outcomes, list) or not all(outcome in _TEST_OUTCOMES for outcome in outcomes):
        return None
    if failure is None and len(outcomes) == num_tests or failure in _CANDIDATE_FAILURES and not outcomes:
        return _Report(failure, tuple(outcomes))
    return None


def _outcomes(task: CodeTask, runs: Sequence[_Run], results: Sequence[SandboxResult]) -> tuple[list[str], bool]:
    """``(one outcome per test: "pass" or a FAILURES word, whether the candidate met its tests)``."""
    if task.kind == "stdio":
        outcomes = [_stdio_outcome(run, result, case.output) for run, result, case in zip(runs, results, task.tests)]
        return outcomes, "syntax error" not in outcomes
    (run,), (result,) = runs, results
    report = _parse_report(result.report, run.nonce, task.num_tests)
    if report is None:
        return [_unreported_failure(result)] * task.num_tests, False
    if report.failure is not None:
        return [report.failure] * task.num_tests, report.failure != "syntax error"
    return list(report.outcomes), True


def _unreported_failure(result: SandboxResult) -> str:
    """Why a run ended without a report."""
    return "timeout" if _ran_out_of_time(result) else "runtime error"


def _ran_out_of_time(result: SandboxResult) -> bool:
    """The run hit the wall-clock limit, or the CPU-time limit (SIGXCPU)."""
    return result.timed_out or result.exit_code == 128 + signal.SIGXCPU  # shell-style status of a signal death


def _stdio_outcome(run: _Run, result: SandboxResult, expected: str) -> str:
    if result.output_truncated:  # the sandbox stopped a program that printed past its cap
        return "wrong answer"
    report = _parse_report(result.report, run.nonce, num_tests=0)
    if report is None:
        return _unreported_failure(result)
    if report.failure is not None:
        return report.failure
    output = result.stdout.decode("utf-8", errors="replace")
    return "pass" if normalize_output(output) == normalize_output(expected) else "wrong answer"


def _score(task: CodeTask, runs: Sequence[_Run], results: Sequence[SandboxResult], reward: str) -> dict[str, Any]:
    outcomes, met_tests = _outcomes(task, runs, results)
    return _result(
        task,
        reward,
        passed=outcomes.count("pass"),
        failure=next((outcome for outcome in outcomes if outcome != "pass"), None),
        # No signature for a candidate that never met its tests: it casts no majority vote.
        pred="".join("P" if outcome == "pass" else "F" for outcome in outcomes) if met_tests else None,
        timed_out=any(_ran_out_of_time(result) for result in results),
    )


def _result(task: CodeTask, reward: str, *, passed: int, failure: str | None, pred: str | None, timed_out: bool) -> dict[str, Any]:
    total = task.num_tests
    acc = passed == total
    score = (1.0 if acc else -1.0) if reward == "binary" else passed / total
    return {
        "score": score,
        "acc": acc,
        "pred": pred,
        "tests_passed": passed,
        "tests_total": total,
        "failure": failure,
        "score_timed_out": timed_out,
    }


def _checked_reward(reward: str) -> str:
    if reward not in REWARD_MODES:
        raise ValueError(f"code reward must be one of {REWARD_MODES}, got {reward!r}")
    return reward


def score_code(completion: str, task: CodeTask, sandbox: Sandbox, *, reward: str = "binary") -> dict[str, Any]:
    """Score one completion on ``task``; see :func:`score_code_many`."""
    return score_code_many([(completion, task)], sandbox, reward=reward)[0]


def score_code_many(
    completions_and_tasks: Iterable[tuple[str, CodeTask]], sandbox: Sandbox, *, reward: str = "binary"
) -> list[dict[str, Any]]:
    """Score each ``(completion, task)`` by running its code and tests in ``sandbox``.

    All runs of all candidates go to the sandbox's pool in one batch. Each result holds:

    - ``score``: see :data:`REWARD_MODES`;
    - ``acc``: every test passed;
    - ``pred``: the candidate's behaviour, one letter per test ("P" passed, "F" failed), for
      majority voting; None when the candidate never met its tests (no code, syntax error, a
      run that ended without a report);
    - ``tests_passed``, ``tests_total``;
    - ``failure``: None when every test passed, else one of :data:`FAILURES` (for a candidate
      that ran, the first failed test's);
    - ``score_timed_out``: a sandbox run hit the time limit (wall-clock or CPU time).

    Raises:
        ValueError: ``reward`` is not one of :data:`REWARD_MODES`.
    """
    reward = _checked_reward(reward)
    pending = []  # (task, its runs, or None: no code)
    for completion, task in completions_and_tasks:
        code = extract_code(completion)
        pending.append((task, None if code is None else _runs(code, task)))
    results = iter(sandbox.run_many([(run.program, run.stdin) for _, runs in pending if runs for run in runs]))
    scores = []
    for task, runs in pending:
        if runs is None:
            scores.append(_result(task, reward, passed=0, failure="no code", pred=None, timed_out=False))
        else:
            scores.append(_score(task, runs, [next(results) for _ in runs], reward))
    return scores
