"""Tests of what only the code environment does: sandboxed scoring and its settings (shared interface: test_problem_env.py)."""

from __future__ import annotations

import pytest

from dapo_rllib.tasks.data.code_arithmetic import generate_code_tasks, reference_solution
from dapo_rllib.tasks.data.code_tasks import task_to_row
from dapo_rllib.tasks.data.datasets import write_jsonl
from envs.code_env import CodeEnv

# Small sandbox limits; every env with them shares one sandbox.
LIMITS = {"timeout_s": 2.0, "memory_mb": 256}
INFO_KEYS = {
    "score",
    "acc",
    "pred",
    "ground_truth",
    "data_source",
    "tests_passed",
    "tests_total",
    "failure",
    "broken_task",
    "score_timed_out",
}


def _env(**config) -> CodeEnv:
    return CodeEnv({**LIMITS, **config})


def _wrong(env: CodeEnv, i: int) -> str:
    return reference_solution(env.problem(i)).replace("return ", "return 1000 + ")


def test_correct_solution_gets_plus_one():
    env = _env(num_problems=20)
    obs, info = env.reset()
    i = info["problem_index"]
    task = env.problem(i)
    assert obs == [dict(m) for m in task.messages]
    assert info == {
        "problem_index": i,
        "ground_truth": task.ground_truth,
        "data_source": "code_arithmetic",
        "epoch": 0,
        "tools": [],
    }

    obs2, reward, terminated, truncated, step_info = env.step(reference_solution(task))
    assert obs2 == []  # nothing follows the answer
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert step_info == {
        "score": 1.0,
        "acc": True,
        "pred": "PPPP",
        "ground_truth": task.ground_truth,
        "data_source": "code_arithmetic",
        "tests_passed": 4,
        "tests_total": 4,
        "broken_task": None,
        "failure": None,
        "score_timed_out": False,
    }


def test_wrong_solution_gets_minus_one():
    env = _env(num_problems=20)
    _, info = env.reset()
    _, reward, terminated, _, step_info = env.step(_wrong(env, info["problem_index"]))
    assert (reward, terminated) == (-1.0, True)
    assert set(step_info) == INFO_KEYS
    assert (step_info["acc"], step_info["failure"], step_info["pred"], step_info["tests_passed"]) == (
        False,
        "wrong answer",
        "FFFF",
        0,
    )


def test_fraction_reward():
    env = _env(num_problems=5, reward="fraction")
    env.reset(options={"problem_index": 0})
    assert env.step(reference_solution(env.problem(0)))[1] == 1.0
    env.reset(options={"problem_index": 0})
    assert env.step(_wrong(env, 0))[1] == 0.0
    env.reset(options={"problem_index": 0})
    assert env.step("no code fence, no function")[1] == 0.0


def test_score_many_equals_step():
    env = _env(num_problems=6, shuffle=False)
    indices, completions = [], []
    for i in range(6):
        solution = reference_solution(env.problem(i))
        variants = [solution, _wrong(env, i), "```python\ndef broken(:\n```", "", solution.encode()]
        indices += [i] * len(variants)
        completions += variants
    state = env.get_state()
    batch = env.score_many([env.problem(i) for i in indices], completions)
    assert env.get_state() == state  # no draw
    one_by_one = []
    for i, completion in zip(indices, completions):
        env.reset(options={"problem_index": i})
        one_by_one.append(env.step(completion)[-1])
    assert batch == one_by_one
    assert all(set(info) == INFO_KEYS for info in batch)
    assert [info["failure"] for info in batch[:5]] == [None, "wrong answer", "syntax error", "no code", None]
    assert env.score_many([], []) == []


def test_envs_with_the_same_limits_share_a_sandbox():
    a, b = _env(num_problems=2), _env(num_problems=3, split="test")
    assert a._sandbox is b._sandbox
    assert _env(num_problems=2, timeout_s=3.0)._sandbox is not a._sandbox
    assert a.sandbox_isolation == a._sandbox.isolation


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"reward": "partial"}, r"'reward' must be one of \('binary', 'fraction'\), got 'partial'"),
        ({"timeout_s": 0}, r"'timeout_s' must be .*got 0$"),
        ({"timeout_s": float("inf")}, "got inf$"),
        ({"timeout_s": "10"}, "got '10'$"),
        ({"memory_mb": 0}, r"'memory_mb' must be .*got 0$"),
        ({"memory_mb": 1.5}, "got 1.5$"),
        ({"max_workers": 0}, r"'max_workers' must be .*got 0$"),
        ({"split": "valid"}, "unknown code task split 'valid'"),
        ({"num_problems": 5000}, "num_problems=5000 is out of range"),
    ],
)
def test_bad_config_fails_at_construction(config, message):
    with pytest.raises(ValueError, match=message):
        _env(**config)


def test_file_dataset(tmp_path):
    tasks = generate_code_tasks("test", 3)
    rows = [task_to_row(task) for task in tasks]
    rows.append({"data_source": "ace", "question": "Write add(a, b).", "tests": ["assert add(2, 2) == 4"]})
    rows.append({"prompt": [{"role": "user", "content": "Echo."}], "stdio": [{"input": "hi\n", "output": "hi"}]})
    path = tmp_path / "tasks.jsonl"
    write_jsonl(rows + rows, path)  # duplicates are removed on load

    env = _env(dataset=str(path), shuffle=False)
    assert env.num_problems == 5
    completions = [reference_solution(task) for task in tasks] + [
        "def add(a, b):\n    return a + b\n",
        "print(input())",
    ]
    infos = env.score_many([env.problem(i) for i in range(5)], completions)
    assert [(info["data_source"], info["acc"]) for info in infos] == [("code_arithmetic", True)] * 3 + [
        ("ace", True),
        ("code", True),
    ]
    _, info = env.reset()
    assert info["problem_index"] == 0
