"""Score a completion against a code task by running its code in the sandbox and judging here.

The verdict never lives in the candidate's process: the sandboxed program only ever receives
inputs and returns outputs, and the expected outputs, the comparison and the pass/fail decision
stay in this (trusted) process. What the candidate does to its own interpreter (walking frames,
scanning ``gc``, patching builtins, writing to any descriptor, exiting early, signalling its
parent) can change only the answers it gives, never what they are compared with.

Per format:

- ``stdio``: one sandbox run per case, the candidate running as ``__main__`` with the case's
  input on stdin. The case passes when the program ended normally (exit status 0, which
  ``SystemExit`` with code 0 or None gives) and its stdout equals the expected output after
  :func:`normalize_output`.
- ``function``, and ``assert`` tasks whose every statement is a literal call (``assert
  f(<literals>) == <literal>``, ``is None/True/False``, truthy, falsy; :attr:`CodeTask.judged_by_calls`):
  one sandbox run per candidate of the candidate server
  (:data:`dapo_rllib.tasks.rewards.program_judge.CANDIDATE_SERVER`), given the code and every call's
  arguments (never the expected values) on stdin. It runs the code as module ``solution``
  (``SystemExit`` at its top level ends it, the calls still run), makes each call and writes the
  returned value, as data (:mod:`dapo_rllib.tasks.rewards.data_values`), one line per call to
  :data:`dapo_rllib.tasks.sandbox.REPORT_FD`. This process decodes the lines with a data-only parser
  (never unpickling or evaluating them) and compares each with the expected value: equality of the
  values with tuples as lists (JSON has no tuples), identity for ``is None/True/False``. A value that
  is not data is a wrong answer; an object that claims to equal everything cannot cross, only its
  data can. A candidate that writes lines of its own can only answer the calls it was given: that is
  solving them. Calls answered before a timeout or a crash count; the rest fail.
- ``program``, and ``assert`` tasks with any other statement: the dataset's own test program runs in
  a sandbox of its own and calls the candidate, in another, through this process
  (:mod:`dapo_rllib.tasks.rewards.program_judge`). A test program that is itself broken (it crashes, runs
  out of its time, fails a test without calling the candidate) makes the result a ``"broken task"``
  (``broken_task`` says why), not the candidate's failure.

Syntax errors are found here by compiling the code (nothing runs). A run's failures:
``"timeout"`` (wall clock or CPU time), ``"memory limit"`` (a ``MemoryError``), ``"runtime error"``
(an exception, a non-zero exit, ``os._exit`` before answering, output past the sandbox's cap,
which makes the sandbox stop the program; for a stdio case that is a wrong answer). Exit
status, stdout markers and timing can only fail a candidate, never pass one.

Not protected against: a candidate that reads the expected outputs from somewhere it can reach
(the sandbox hides the project and $HOME; the prompt itself may give examples), and answers
that are right for the given inputs by any means (a lookup table of the test inputs is a pass,
as it would be for any judge that shows the inputs).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Sequence
from typing import Any, Final, NamedTuple

from dapo_rllib.contracts import ScoreResult
from dapo_rllib.tasks.data.code_tasks import CodeTask
from dapo_rllib.tasks.data.code_tests import Call
from dapo_rllib.tasks.data.datasets import short_repr
from dapo_rllib.tasks.rewards.data_values import NotData, load, parse_json
from dapo_rllib.tasks.rewards.program_judge import CANDIDATE_SERVER, frame, judge_program
from dapo_rllib.tasks.sandbox import Sandbox, SandboxResult

__all__ = [
    "FAILURES",
    "REWARD_MODES",
    "CaseReport",
    "call_text",
    "feedback_text",
    "CodeScoreResult",
    "extract_code",
    "normalize_output",
    "score_code",
    "score_code_many",
    "judge_code_many",
]

#: Why a candidate failed (``None`` in the result when it passed every test).
FAILURES: Final = ("no code", "syntax error", "runtime error", "wrong answer", "timeout", "memory limit", "broken task")
#: ``"binary"``: +1 when every test passes, else -1 (DAPO's reward). ``"fraction"``: the
#: fraction of tests passed, in [0, 1].
REWARD_MODES: Final = ("binary", "fraction")


class CodeScoreResult(ScoreResult):
    """What :func:`score_code_many` gives per completion (see there); ``score_timed_out`` is always set."""

    tests_passed: int
    tests_total: int
    failure: str | None
    broken_task: str | None  # why the task's own tests failed (not the candidate's fault), else None


class CaseReport(NamedTuple):
    """How a candidate did on one test, in words a model can act on (the multi-turn code environment's
    feedback). Candidate output in it is shortened, never evaluated."""

    test: str  # the call ("add(1, 2)"), a stdio case's input, or a test program's test (its statement)
    outcome: str  # "pass" or one of FAILURES
    got: str  # what the candidate returned or printed, or what went wrong
    expected: str  # "" for a test program's test: the statement says what it expects


# A fenced block: the info string's first word is the language.
_FENCED_BLOCK = re.compile(r"^```[ \t]*(?P<language>[^\s`]*)[^\n]*\n(?P<code>.*?)^```", re.DOTALL | re.MULTILINE)
# With no closed block, at most one fence line: an opening one.
_OPENING_FENCE = re.compile(r"^```[ \t]*(?P<language>[^\s`]*)[^\n]*\n", re.MULTILINE)
_PYTHON_LANGUAGES: Final = ("", "python", "py", "python3")


def extract_code(completion: str) -> str | None:
    """The candidate program in ``completion``.

    The last fenced block tagged ``python``, ``py``, ``python3`` or untagged; without one, what
    follows an opening fence that is never closed (a completion cut short, or continuing a
    completion-style prompt's open block); without either, the whole completion. ``None`` when
    that is empty or whitespace.
    """
    blocks = [m["code"] for m in _FENCED_BLOCK.finditer(completion) if m["language"].lower() in _PYTHON_LANGUAGES]
    if blocks:
        code = blocks[-1]
    elif (opening := _OPENING_FENCE.search(completion)) and opening["language"].lower() in _PYTHON_LANGUAGES:
        code = completion[opening.end() :]
    else:
        code = completion
    return code if code.strip() else None


def normalize_output(text: str) -> str:
    """``text`` without trailing whitespace on each line and without leading and trailing blank lines."""
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


# A call's outcome per the candidate server's error (a value that is not data is a wrong answer).
_CALL_ERRORS: Final = {
    "runtime error": "runtime error",
    "memory limit": "memory limit",
    "not data": "wrong answer",
}


def score_code(completion: str, task: CodeTask, sandbox: Sandbox, *, reward: str = "binary") -> CodeScoreResult:
    """Score one completion on ``task``; see :func:`score_code_many`."""
    return score_code_many([(completion, task)], sandbox, reward=reward)[0]


def score_code_many(
    completions_and_tasks: Iterable[tuple[str, CodeTask]], sandbox: Sandbox, *, reward: str = "binary"
) -> list[CodeScoreResult]:
    """Score each ``(completion, task)``: :func:`judge_code_many`'s results without the reports."""
    return [result for result, _ in judge_code_many(completions_and_tasks, sandbox, reward=reward)]


def judge_code_many(
    completions_and_tasks: Iterable[tuple[str, CodeTask]], sandbox: Sandbox, *, reward: str = "binary"
) -> list[tuple[CodeScoreResult, list[CaseReport]]]:
    """Score each ``(completion, task)`` by running its code in ``sandbox`` and judging the answers here;
    with each score, a :class:`CaseReport` per test.

    All runs of all candidates go to the sandbox's pool in one batch. Each result holds:

    - ``score``: see :data:`REWARD_MODES`;
    - ``acc``: every test passed;
    - ``pred``: the candidate's behaviour, one letter per test ("P" passed, "F" failed), for
      majority voting; None when the candidate never met its tests (no code, syntax error, a
      call-based run that answered nothing);
    - ``tests_passed``, ``tests_total``;
    - ``failure``: None when every test passed, else one of :data:`FAILURES` (for a candidate
      that ran, the first failed test's);
    - ``score_timed_out``: a sandbox run hit the time limit (wall-clock or CPU time).

    Raises:
        ValueError: ``reward`` is not one of :data:`REWARD_MODES`.
    """
    if reward not in REWARD_MODES:
        raise ValueError(f"code reward must be one of {REWARD_MODES}, got {reward!r}")
    pending = []  # (task, the candidate's code, or its failure before any run)
    for completion, task in completions_and_tasks:
        code = extract_code(task.completion_prefix + completion)
        failure = "no code" if code is None else None if _compiles(code) else "syntax error"
        pending.append((task, code, failure))
    # A job per task (its runs belong together), all on the sandbox's pool.
    jobs = [(task, code) for task, code, failure in pending if not failure]
    judged = iter(sandbox.map(lambda job: _judged(*job, sandbox), jobs))
    results = []
    for task, _, failure in pending:
        if failure:
            verdict = _Verdict([_report(task, i, failure, failure) for i in range(task.num_tests)], False, False)
        else:
            verdict = next(judged)
        outcomes = [report.outcome for report in verdict.reports]
        results.append((_result(task, reward, outcomes, verdict), verdict.reports))
    return results


class _Verdict(NamedTuple):
    reports: list[CaseReport]
    met_tests: bool  # the candidate ran and met its tests (answered a call, or ran a stdio case)
    timed_out: bool
    broken: str | None = None  # why the task itself is broken


def _compiles(code: str) -> bool:
    """Whether ``code`` is Python (compiled here, never run: the parser guards its own depth)."""
    try:
        compile(code, "<solution>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # ValueError: NUL bytes
        return False
    return True


def _judged(task: CodeTask, code: str, sandbox: Sandbox) -> _Verdict:
    """Run ``code`` against ``task``'s tests in the way its kind needs."""
    if task.kind == "stdio":
        return _judged_stdio(task, code, sandbox)
    if task.judged_by_calls:
        return _judged_calls(task, code, sandbox)
    return _judged_program(task, code, sandbox)


def _judged_stdio(task: CodeTask, code: str, sandbox: Sandbox) -> _Verdict:
    """One run of the program per case, its stdout compared here."""
    results = [sandbox.run(code, case.input.encode()) for case in task.tests]
    reports = [
        _report(task, i, _stdio_outcome(result, case.output), _shown(result.stdout) or _run_failure(result))
        for i, (result, case) in enumerate(zip(results, task.tests))
    ]
    return _Verdict(reports, True, any(_ran_out_of_time(result) for result in results))


def _judged_calls(task: CodeTask, code: str, sandbox: Sandbox) -> _Verdict:
    """One run of the candidate server, given every call at once; the answers compared here."""
    calls = [call for test in task.calls for call in test]
    requests = [
        {"id": i, "name": call.fn_name, "args": call.args, "kwargs": call.kwargs} for i, call in enumerate(calls)
    ]
    stdin = b"".join(frame(message) for message in [code, *requests])
    result = sandbox.run(CANDIDATE_SERVER, stdin)
    timed_out = _ran_out_of_time(result)
    answers, failure = _call_answers(result.report, len(calls))
    if failure is not None:
        detail = f"the program failed before any call ({failure})"
        return _Verdict([_report(task, i, failure, detail) for i in range(task.num_tests)], True, timed_out)
    unanswered = _run_failure(result)
    judged = iter([(_call_outcome(call, answers.get(i), unanswered), answers.get(i)) for i, call in enumerate(calls)])
    reports = []
    # A test passes when all its calls do; it fails as its first failed call.
    for test in task.calls:
        outcomes = [next(judged) for _ in test]
        failed = next(((call, o, a) for call, (o, a) in zip(test, outcomes) if o != "pass"), None)
        call, outcome, answer = failed or (test[0], "pass", outcomes[0][1])
        reports.append(CaseReport(call_text(call), outcome, _got(answer, unanswered), short_repr(call.expected)))
    return _Verdict(reports, bool(answers), timed_out)


def _judged_program(task: CodeTask, code: str, sandbox: Sandbox) -> _Verdict:
    """The task's test program in a sandbox of its own, calling the candidate in another."""
    verdict = judge_program(code, task.program, sandbox)
    reports = [
        CaseReport(_shown(test.encode()), outcome, detail, "")
        for test, outcome, detail in zip(task.program.tests, verdict.outcomes, verdict.details)
    ]
    return _Verdict(reports, verdict.answered, verdict.timed_out, verdict.broken)


def _report(task: CodeTask, i: int, outcome: str, got: str) -> CaseReport:
    """The report of test ``i`` from the task's side alone (what it runs and expects)."""
    if task.kind == "stdio":
        case = task.tests[i]
        return CaseReport(_shown(case.input.encode()), outcome, got, _shown(case.output.encode()))
    if not task.judged_by_calls:
        return CaseReport(_shown(task.program.tests[i].encode()), outcome, got, "")
    call = task.calls[i][0]
    return CaseReport(call_text(call), outcome, got, short_repr(call.expected))


def call_text(call: Call) -> str:
    """A call as the model reads it: ``add(1, 2)``."""
    arguments = [short_repr(a) for a in call.args] + [f"{k}={short_repr(v)}" for k, v in call.kwargs.items()]
    return f"{call.fn_name}({', '.join(arguments)})"


def _got(answer: dict | None, unanswered: str) -> str:
    if answer is None:
        return f"no answer ({unanswered})"
    if "error" in answer:
        detail = answer.get("detail")
        return f"{answer['error']}: {detail}" if isinstance(detail, str) else answer["error"]
    return short_repr(answer["value"])


def _shown(data: bytes, limit: int = 200) -> str:
    text = data.decode("utf-8", errors="replace")
    return text if len(text) <= limit else text[:limit] + "..."


def _call_answers(report: bytes, num_calls: int) -> tuple[dict[int, dict], str | None]:
    """({call index: its answer, the value decoded}, the code's own failure or None) from the server's lines.

    A line that is not a JSON object of the expected shape is ignored; a call answered twice
    (the candidate wrote lines of its own) counts as a runtime error; a value that is not data
    (:mod:`dapo_rllib.tasks.rewards.data_values`) as the server's "not data".
    """
    answers: dict[int, dict] = {}
    failure = None
    for line in report.splitlines():
        try:
            fields = parse_json(line)
        except NotData:
            continue
        if not isinstance(fields, dict):
            continue
        if fields.get("failure") in ("runtime error", "memory limit"):
            failure = failure or fields["failure"]
            continue
        index = fields.get("id")
        if not (type(index) is int and 0 <= index < num_calls):
            continue
        if "value" in fields:
            try:
                fields["value"] = load(fields["value"])
            except NotData as error:
                fields = {"error": "not data", "detail": str(error)}
        elif fields.get("error") not in _CALL_ERRORS:
            continue
        answers[index] = {"error": "runtime error", "detail": "answered twice"} if index in answers else fields
    return answers, failure if not answers else None


def _call_outcome(call: Call, answer: dict | None, unanswered: str) -> str:
    if answer is None:
        return unanswered
    if "error" in answer:
        return _CALL_ERRORS[answer["error"]]
    value = answer["value"]
    right = {
        "==": lambda: _as_json_values(value) == call.expected,
        "is": lambda: value is call.expected,  # None, True and False decode to the singletons
        "truthy": lambda: bool(value),
        "falsy": lambda: not value,
    }[call.compare]()
    return "pass" if right else "wrong answer"


def _as_json_values(value: Any) -> Any:
    """``value`` with its tuples as lists, at any depth: the expected values are JSON, where a
    tuple is written as a list (APPS' outputs, an assert's tuple literal)."""
    if type(value) in (list, tuple):
        return [_as_json_values(item) for item in value]
    if type(value) is dict:
        return {key: _as_json_values(item) for key, item in value.items()}
    return value


def _run_failure(result: SandboxResult) -> str:
    """What a run's unanswered calls (or a stdio case's failed run) failed of."""
    if _ran_out_of_time(result):
        return "timeout"
    if (result.stderr.rstrip().splitlines() or [b""])[-1].startswith(b"MemoryError"):
        return "memory limit"
    return "runtime error"


def _ran_out_of_time(result: SandboxResult) -> bool:
    """The run hit the wall-clock limit, or the CPU-time limit (SIGXCPU)."""
    return result.timed_out or result.exit_code == 128 + signal.SIGXCPU  # shell-style status of a signal death


def _stdio_outcome(result: SandboxResult, expected: str) -> str:
    if result.output_truncated:  # the sandbox stopped a program that printed past its cap
        return "wrong answer"
    if result.exit_code != 0:
        return _run_failure(result)
    output = result.stdout.decode("utf-8", errors="replace")
    return "pass" if normalize_output(output) == normalize_output(expected) else "wrong answer"


def _result(task: CodeTask, reward: str, outcomes: list[str], verdict: _Verdict) -> CodeScoreResult:
    passed, total = outcomes.count("pass"), task.num_tests
    acc = passed == total and verdict.broken is None
    return CodeScoreResult(
        score=(1.0 if acc else -1.0) if reward == "binary" else passed / total,
        acc=acc,
        # No signature for a candidate that never met its tests: it casts no majority vote.
        pred="".join("P" if outcome == "pass" else "F" for outcome in outcomes) if verdict.met_tests else None,
        tests_passed=passed,
        tests_total=total,
        failure="broken task" if verdict.broken else next((outcome for outcome in outcomes if outcome != "pass"), None),
        broken_task=verdict.broken,
        score_timed_out=verdict.timed_out,
    )


def _failure_line(report: CaseReport) -> str:
    if not report.expected:  # a test program's test
        return f"{report.test}\n  failed: {report.got}"
    if report.outcome == "wrong answer":
        return f"{report.test} returned {report.got}, expected {report.expected}"
    return f"{report.test}: {report.got} (expected {report.expected})"


#: Failed tests shown after an attempt (the first ones).
MAX_FAILURES_SHOWN = 3


def feedback_text(failure: str | None, reports: Sequence[CaseReport]) -> str:
    """What the model is told after an attempt that failed (``failure``, :data:`dapo_rllib.tasks.rewards.code.FAILURES`)."""
    if failure == "no code":
        return "Your answer has no Python code. Answer with a single ```python code block."
    if failure == "syntax error":
        return "Your program has a syntax error. Fix it and answer with the whole program again."
    failed = [report for report in reports if report.outcome != "pass"]
    lines = [_failure_line(r) for r in failed[:MAX_FAILURES_SHOWN]]
    more = f"\n(and {len(failed) - MAX_FAILURES_SHOWN} more)" if len(failed) > MAX_FAILURES_SHOWN else ""
    return (
        "Your program failed these tests:\n"
        + "\n".join(lines)
        + more
        + "\nFix it and answer with the whole program again."
    )
