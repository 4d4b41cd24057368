"""Code repair with feedback (envs.code_repair_env): the failed public tests shown after an attempt, the
reward on the hidden ones, the sandbox's reports of what a program returned."""

from __future__ import annotations

import pytest

from dapo_rllib.models.tiny import code_answer, repair_answer, repair_feedback
from dapo_rllib.tasks.data.code_arithmetic import reference_solution
from dapo_rllib.tasks.data.code_tasks import CodeTask
from dapo_rllib.tasks.data.code_tests import FunctionTests
from dapo_rllib.tasks.rewards.code import CaseReport, feedback_text, judge_code_many
from envs.code_repair_env import CodeRepairEnv

LIMITS = {"timeout_s": 5.0, "max_workers": 2}


def task(outputs=(5, -14, 14, 15)) -> CodeTask:
    prompt = ({"role": "user", "content": "Write `calc(u, v)`: the larger of its arguments."},)
    tests = FunctionTests("calc", ([3, 5], [-18, -14], [14, -4], [15, -13]), tuple(outputs))
    return CodeTask(prompt, tests, "function", "code_arithmetic", 0)


def program(body: str) -> str:
    return f"```python\ndef calc(u, v):\n    {body}\n```"


def test_the_judge_reports_what_each_call_returned(sandbox_env):
    ((result, reports),) = judge_code_many([(program("return u"), task())], sandbox_env._sandbox)
    assert (result["tests_passed"], result["tests_total"]) == (2, 4)
    assert reports == [
        CaseReport("calc(3, 5)", "wrong answer", "3", "5"),
        CaseReport("calc(-18, -14)", "wrong answer", "-18", "-14"),
        CaseReport("calc(14, -4)", "pass", "14", "14"),
        CaseReport("calc(15, -13)", "pass", "15", "15"),
    ]
    ((_, reports),) = judge_code_many([(program("return u / 0"), task())], sandbox_env._sandbox)
    assert reports[0] == CaseReport(
        "calc(3, 5)", "runtime error", "runtime error: ZeroDivisionError: division by zero", "5"
    )


@pytest.fixture(scope="module")
def sandbox_env() -> CodeRepairEnv:
    return CodeRepairEnv({"num_problems": 4, **LIMITS})


def test_a_failed_attempt_is_shown_its_failed_public_tests(sandbox_env):
    env = sandbox_env.spawn()
    env.reset(options={"problem_index": 0})
    problem = env.problem(0)
    reply, reward, terminated, truncated, info = env.step(code_answer(problem, "print"))
    assert (reward, terminated, truncated) == (0.0, False, False)
    (message,) = reply
    assert message["role"] == "user"
    calls = problem.calls
    first, second = (c[0] for c in calls[:2])
    assert message["content"] == (
        "Your program failed these tests:\n"
        f"{first.fn_name}({first.args[0]}, {first.args[1]}) returned None, expected {first.expected}\n"
        f"{second.fn_name}({second.args[0]}, {second.args[1]}) returned None, expected {second.expected}\n"
        "Fix it and answer with the whole program again."
    )
    # The hidden tests (2 of the task's 4) rate the attempt: failed.
    assert (info["acc"], info["tests_total"]) == (False, 2)
    _, reward, terminated, _, info = env.step(reference_solution(problem))
    assert (reward, terminated, info["acc"]) == (1.0, True, True)


def test_the_last_attempt_is_rated_when_the_runner_stops_the_episode(sandbox_env):
    env = sandbox_env.spawn()
    env.reset(options={"problem_index": 1})
    env.step(code_answer(env.problem(1), "wrong name"))
    reward, info = env.finish()
    assert (reward, info["acc"], info["failure"]) == (-1.0, False, "runtime error")


def test_feedback_for_a_program_that_never_ran():
    assert feedback_text("no code", []).startswith("Your answer has no Python code.")
    assert feedback_text("syntax error", []).startswith("Your program has a syntax error.")
    failures = [CaseReport(f"f({i})", "timeout", "no answer (timeout)", "1") for i in range(5)]
    text = feedback_text("timeout", failures)
    assert "f(0): no answer (timeout) (expected 1)\n" in text and "(and 2 more)" in text and "f(3)" not in text


def test_public_tests_must_be_positive():
    with pytest.raises(ValueError, match="CodeRepairEnv 'public_tests' must be a positive int, got 0"):
        CodeRepairEnv({"public_tests": 0, **LIMITS})


def test_the_repair_warm_start_imitates_the_environments_own_feedback(sandbox_env):
    env = sandbox_env.spawn()
    for style in ("print", "wrong name"):
        env.reset(options={"problem_index": 2})
        task = env.problem(2)
        (reply,) = env.step(code_answer(task, style))[0]
        assert reply == {"role": "user", "content": repair_feedback(task, style)}
    first, feedback, second = repair_answer(task, "print, then return")
    assert (first, second) == (code_answer(task, "print"), code_answer(task, "return"))
    assert feedback == {"role": "user", "content": repair_feedback(task, "print")}
    assert repair_answer(task, "return") == [code_answer(task, "return")]


def test_a_test_program_task_shows_its_failed_public_tests(sandbox_env):
    tests = [
        "assert abs(calc(3, 5) - 5) < 1e-9",
        "for u in range(3):\n    assert calc(u, 9) == 9",
        "assert calc(2, 1) == 2",
    ]
    program_task = CodeTask(task().messages, {"tests": tests}, "program", "code", 0)
    env = sandbox_env.spawn()
    reply = env.feedback(program_task, program("return u"), {})
    assert reply == [
        {
            "role": "user",
            "content": "Your program failed these tests:\n"
            "assert abs(calc(3, 5) - 5) < 1e-9\n  failed: AssertionError\n"
            "for u in range(3):\n    assert calc(u, 9) == 9\n  failed: AssertionError\n"
            "Fix it and answer with the whole program again.",
        }
    ]
    # The hidden test, the third, rates it: right.
    assert env.score_batch([program_task], [program("return u")])[0]["acc"] is True
