"""Tests of the interface all single-step problem environments share, run on each of them.

What only one environment does (its scoring and its own config keys) is tested in
test_math_env.py and test_code_env.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from dapo_rllib.tasks.data import generate_arithmetic_problems, problem_to_row, write_jsonl
from dapo_rllib.tasks.data.code_arithmetic import generate_code_tasks, reference_solution
from dapo_rllib.tasks.data.code_tasks import task_to_row
from envs import CodeEnv, MathEnv, ProblemEnv


@dataclass(frozen=True)
class EnvKind:
    """One environment class, and how to answer its problems."""

    env_class: type[ProblemEnv]
    base_config: dict[str, Any]  # what every env of this class in these tests gets
    builtin_dataset: str  # the "dataset" value of the built-in generator
    generate: Callable[[str, int], list]  # the built-in problems of a split
    to_row: Callable[[Any], dict]  # a problem as a dataset file row
    solve: Callable[[ProblemEnv, int], str]  # a completion that scores +1 on problem i
    fail: str  # a completion that scores no problem +1

    def make(self, **config) -> ProblemEnv:
        return self.env_class({**self.base_config, **config})


MATH = EnvKind(
    env_class=MathEnv,
    base_config={},
    builtin_dataset="arithmetic",
    generate=generate_arithmetic_problems,
    to_row=problem_to_row,
    solve=lambda env, i: f"Let me think step by step.\nAnswer: {env.problem(i).ground_truth}",
    fail="no answer",
)
CODE = EnvKind(
    env_class=CodeEnv,
    # Small sandbox limits; every code env with them shares one sandbox.
    base_config={"timeout_s": 2.0, "memory_mb": 256},
    builtin_dataset="generated",
    generate=generate_code_tasks,
    to_row=task_to_row,
    solve=lambda env, i: reference_solution(env.problem(i)),
    fail="",
)


@pytest.fixture(params=[MATH, CODE], ids=["math", "code"])
def kind(request) -> EnvKind:
    return request.param


def _draw(env: ProblemEnv, n: int) -> list[int]:
    return [env.reset()[1]["problem_index"] for _ in range(n)]


def test_observation_is_a_copy(kind):
    env = kind.make(num_problems=3)
    obs, info = env.reset()
    assert obs == [dict(m) for m in env.problem(info["problem_index"]).messages]
    obs[0]["content"] = "tampered"
    assert env.problem(info["problem_index"]).messages[0]["content"] != "tampered"


def test_replay_by_problem_index_does_not_move_cursor(kind):
    expected = _draw(kind.make(num_problems=10, seed=5), 4)

    env = kind.make(num_problems=10, seed=5)
    got = []
    for _ in range(4):
        _, info = env.reset()
        i = info["problem_index"]
        got.append(i)
        # G completions of the same prompt, each scored as its own episode.
        for completion in (kind.fail, kind.solve(env, i)):
            obs, replay_info = env.reset(options={"problem_index": i})
            assert replay_info["problem_index"] == i
            assert obs == [dict(m) for m in env.problem(i).messages]
            env.step(completion)
    assert got == expected


def test_draw_gives_what_resets_give(kind):
    resets = kind.make(num_problems=7, seed=3)
    expected = _draw(resets, 17)

    env = kind.make(num_problems=7, seed=3)
    drawn = env.draw(5) + env.draw(1) + env.draw(11)  # across the epoch boundaries
    assert drawn == [env.problem(i) for i in expected]
    assert env.get_state() == resets.get_state()
    with pytest.raises(RuntimeError, match=r"reset\(\)"):
        env.step(kind.fail)  # drawing starts no episode


@pytest.mark.parametrize("n", [0, -2, 1.5, True, "3", None])
def test_draw_needs_a_positive_int(kind, n):
    env = kind.make(num_problems=3)
    state = env.get_state()
    with pytest.raises(ValueError, match=rf"draw\(n\) needs a positive int n, got {re.escape(repr(n))}$"):
        env.draw(n)
    assert env.get_state() == state


def test_score_many_equals_step_one_by_one(kind):
    env = kind.make(num_problems=4, shuffle=False)
    indices = [0, 0, 1, 2, 3, 3]
    completions = [kind.solve(env, 0), kind.fail, kind.solve(env, 1).encode(), kind.fail, kind.solve(env, 3), kind.fail]
    _, current = env.reset()  # an episode in progress stays as it is
    state = env.get_state()

    infos = env.score_many([env.problem(i) for i in indices], completions)
    assert env.get_state() == state
    assert [(info["score"], info["acc"]) for info in infos] == [(1.0, True), (-1.0, False)] * 3
    assert [(info["ground_truth"], info["data_source"], info["score_timed_out"]) for info in infos] == [
        (env.problem(i).ground_truth, env.problem(i).data_source, False) for i in indices
    ]
    assert all("pred" in info for info in infos)
    assert env.step(kind.solve(env, current["problem_index"]))[1] == 1.0

    one_by_one = []
    for i, completion in zip(indices, completions):
        env.reset(options={"problem_index": i})
        one_by_one.append(env.step(completion)[-1])
    assert infos == one_by_one
    assert env.score_many([], []) == []


def test_score_many_checks_its_arguments(kind):
    env = kind.make(num_problems=3)
    problems = [env.problem(0), env.problem(1)]
    with pytest.raises(ValueError, match=r"one problem per completion, got 2 problems and 1 completions"):
        env.score_many(problems, [kind.fail])
    with pytest.raises(TypeError, match=r"completion 1: .*str or bytes, got NoneType"):
        env.score_many(problems, [kind.fail, None])


def test_bad_problem_index(kind):
    env = kind.make(num_problems=10)
    with pytest.raises(IndexError, match=r"problem index 10 .*10 problems"):
        env.reset(options={"problem_index": 10})
    with pytest.raises(IndexError, match=r"problem index 10 .*10 problems"):
        env.problem(10)
    with pytest.raises(IndexError, match="-1"):
        env.reset(options={"problem_index": -1})
    with pytest.raises(TypeError, match="must be an int, got str"):
        env.reset(options={"problem_index": "3"})
    with pytest.raises(ValueError, match="problem_idx"):
        env.reset(options={"problem_idx": 0})


@pytest.mark.parametrize("shuffle", [True, False])
def test_each_epoch_covers_every_problem_once(kind, shuffle):
    n = 7
    env = kind.make(num_problems=n, shuffle=shuffle)
    epochs: dict[int, list[int]] = {}
    for _ in range(3 * n):
        _, info = env.reset()
        epochs.setdefault(info["epoch"], []).append(info["problem_index"])
    assert sorted(epochs) == [0, 1, 2]
    for order in epochs.values():
        assert sorted(order) == list(range(n))
    if shuffle:
        assert epochs[0] != epochs[1] or epochs[1] != epochs[2]
    else:
        assert all(order == list(range(n)) for order in epochs.values())


def test_draw_order_is_the_same_for_every_env():
    # Same seed and dataset size: the same draws, so a run's schedule does not depend on the task.
    code_env, math_env = CODE.make(num_problems=9, seed=4), MATH.make(num_problems=9, seed=4)
    assert _draw(code_env, 30) == _draw(math_env, 30)
    assert code_env.get_state() == math_env.get_state()


def test_seed_controls_order_and_reset_seed_restarts(kind):
    a = _draw(kind.make(num_problems=50, seed=1), 50)
    b = _draw(kind.make(num_problems=50, seed=2), 50)
    assert a != b and sorted(a) == sorted(b)

    env = kind.make(num_problems=50, seed=2)
    _draw(env, 13)
    _, info = env.reset(seed=1)
    assert info["epoch"] == 0
    assert [info["problem_index"]] + _draw(env, 49) == a


def test_problem_set_does_not_depend_on_seed(kind):
    assert kind.make(num_problems=5, seed=0).problem(0) == kind.make(num_problems=5, seed=1).problem(0)


def test_get_state_set_state_resumes_the_same_prompts(kind):
    config = {"num_problems": 6, "seed": 11}
    uninterrupted = kind.make(**config)
    expected = [uninterrupted.reset()[0] for _ in range(20)]

    first = kind.make(**config)
    seen = [first.reset()[0] for _ in range(8)]  # mid-way through epoch 1
    state = first.get_state()

    resumed = kind.make(**config)
    _draw(resumed, 3)  # state of the fresh env must be overwritten entirely
    resumed.set_state(state)
    seen += [resumed.reset()[0] for _ in range(12)]
    assert seen == expected


def test_set_state_rejects_other_dataset_size(kind):
    state = kind.make(num_problems=6).get_state()
    env = kind.make(num_problems=7)
    with pytest.raises(ValueError, match=rf"{type(env).__name__} state has a permutation of 6 problems.*has 7"):
        env.set_state(state)


def test_step_requires_reset(kind):
    env = kind.make(num_problems=3)
    with pytest.raises(RuntimeError, match=r"reset\(\)"):
        env.step(kind.fail)
    _, info = env.reset()
    env.step(kind.solve(env, info["problem_index"]))
    with pytest.raises(RuntimeError, match=r"reset\(\)"):
        env.step(kind.solve(env, info["problem_index"]))


def test_non_str_action(kind):
    env = kind.make(num_problems=3)
    _, info = env.reset()
    with pytest.raises(TypeError, match="str or bytes, got int"):
        env.step(42)
    assert env.step(kind.solve(env, info["problem_index"]))[1] == 1.0  # the episode is still on


def test_bytes_action_is_decoded_with_replacement(kind):
    env = kind.make(num_problems=3)
    _, info = env.reset()
    solution = kind.solve(env, info["problem_index"])
    _, reward, _, _, step_info = env.step(b"\xff\xfe not UTF-8 \xed\xa0\x80\n" + solution.encode())
    env.reset(options={"problem_index": info["problem_index"]})
    assert reward == 1.0 and step_info == env.step(solution)[-1]


def test_unknown_config_key_is_rejected_but_underscore_keys_pass(kind):
    with pytest.raises(ValueError, match=r"num_problem\b.*num_problems"):
        kind.make(num_problem=3)
    assert kind.make(num_problems=3, _caller_note="x").num_problems == 3


def test_no_problems_is_an_error(kind):
    name = kind.env_class.__name__
    with pytest.raises(ValueError, match=rf"^{name} dataset '{kind.builtin_dataset}' has no (problems|tasks)$"):
        kind.make(num_problems=0)


def test_ray_env_context_config(kind):
    env_context = pytest.importorskip("ray.rllib.env.env_context")
    config = env_context.EnvContext({**kind.base_config, "num_problems": 4, "split": "test"}, worker_index=1)
    env = kind.env_class(config)
    assert env.num_problems == 4
    assert [env.problem(i) for i in range(4)] == kind.generate("test", 4)


def test_file_dataset_config_errors(kind, tmp_path):
    path = tmp_path / "problems.jsonl"
    write_jsonl([kind.to_row(problem) for problem in kind.generate("test", 2)], path)
    with pytest.raises(ValueError, match="num_problems"):
        kind.make(dataset=str(path), num_problems=1)
    with pytest.raises(FileNotFoundError):
        kind.make(dataset=str(tmp_path / "missing.jsonl"))
    with pytest.raises(TypeError, match=rf"'dataset' must be '{kind.builtin_dataset}' or a file path, got int"):
        kind.make(dataset=3)
