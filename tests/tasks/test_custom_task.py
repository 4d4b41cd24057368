"""The docs' "Your own task type" example (reverse_word.py), run as written, and what a task subclass must provide."""

from __future__ import annotations

import json
import re
import types

import pytest

from dapo_rllib.tasks.env_factory import build_env
from dapo_rllib.tasks.problem_env import PROBLEM_CONFIG
from envs import ProblemEnv
from tests.support.doc_examples import doc_example, example_module


@pytest.fixture(scope="module")
def example() -> types.ModuleType:
    """The example of docs/guides/task-type.md, executed as a module of its own."""
    with example_module(doc_example("reverse_word.py"), "docs_reverse_word") as module:
        yield module


@pytest.fixture
def env(example) -> ProblemEnv:
    # Built the way an env runner builds it: the registered name and the config's env_config.
    return build_env(example.config.env, example.config.env_config, worker_index=1, num_workers=1)


def test_config_builds_the_example_env(example, env):
    assert example.config.env == "reverse_word"
    assert type(env) is example.ReverseEnv
    assert env.num_problems == 200
    problem = env.problem(0)
    word = re.search(r"'([a-h]{5})'", problem.messages[0]["content"]).group(1)
    assert (problem.ground_truth, problem.data_source) == (word[::-1], "reverse")


def test_draw_follows_the_seeded_order(example, env):
    twin = example.ReverseEnv({"num_problems": 200})
    expected = [twin.problem(twin.reset()[1]["problem_index"]) for _ in range(5)]
    assert env.draw(2) + env.draw(3) == expected
    assert env.get_state() == twin.get_state()


def test_score_many(env):
    (problem,) = env.draw(1)
    answer = problem.ground_truth
    completions = [f"Backwards it is\n{answer}", answer[1:], b"\xff " + answer.encode(), ""]
    infos = env.score_many([problem] * 4, completions)
    common = {"ground_truth": answer, "data_source": "reverse", "score_timed_out": False}
    assert infos == [
        {"score": 1.0, "acc": True, "pred": answer, **common},
        {"score": -1.0, "acc": False, "pred": answer[1:], **common},
        {"score": 1.0, "acc": True, "pred": answer, **common},
        {"score": -1.0, "acc": False, "pred": None, **common},
    ]


def test_reset_and_step(env):
    obs, info = env.reset()
    problem = env.problem(info["problem_index"])
    assert obs == [dict(m) for m in problem.messages]
    _, reward, terminated, truncated, step_info = env.step(problem.ground_truth)
    assert (reward, terminated, truncated, step_info["acc"]) == (1.0, True, False, True)
    env.reset(options={"problem_index": info["problem_index"]})
    assert env.step(problem.ground_truth[::-1] + "x")[1] == -1.0


def test_file_dataset(example, tmp_path):
    path = tmp_path / "words.jsonl"
    path.write_text("".join(json.dumps({"word": word}) + "\n" for word in ["stressed", "drawer"]))
    env = example.ReverseEnv({"dataset": str(path), "shuffle": False})
    assert [problem.ground_truth for problem in env.draw(2)] == ["desserts", "reward"]


class _Letters(ProblemEnv):
    DEFAULT_CONFIG = {"dataset": "letters", **PROBLEM_CONFIG}
    BUILTIN_DATASET = "letters"
    generate = staticmethod(
        lambda split, num_problems: [
            types.SimpleNamespace(
                messages=({"role": "user", "content": "Say a."},), ground_truth="a", data_source="letters"
            )
        ]
    )


def test_a_subclass_without_a_scorer_says_what_it_lacks():
    env = _Letters()
    with pytest.raises(NotImplementedError, match=r"_Letters must implement score\(problem, completion\)"):
        env.score_many(env.draw(1), ["a"])


@pytest.mark.parametrize(
    ("rating", "shown"),
    [
        ({"score": 1.0, "acc": True}, r"\{'score': 1.0, 'acc': True\}"),
        ({"score": "1", "acc": True, "pred": "a"}, r"\{'score': '1', 'acc': True, 'pred': 'a'\}"),
        ({"score": 1.0, "acc": True, "pred": 7}, r"\{'score': 1.0, 'acc': True, 'pred': 7\}"),
    ],
    ids=["no pred", "score not a number", "pred not a str"],
)
def test_a_rating_without_score_acc_pred_is_an_error(rating, shown):
    """The check a scorer's result gets in the scoring process (`contracts.check_score_result`)."""

    class NoPred(_Letters):
        def score(self, problem, completion):
            return rating

    env = NoPred()
    expected = r"expected a mapping with 'score' \(number\), 'acc' \(bool\) and 'pred' \(str or None\)"
    with pytest.raises(TypeError, match=rf"NoPred rated a completion {shown}; {expected}"):
        env.score_many(env.draw(1), ["a"])


def test_an_env_without_the_task_api_is_refused_by_name():
    from gymnasium.envs.classic_control import CartPoleEnv

    with pytest.raises(
        TypeError,
        match=r"built a CartPoleEnv; VLLMEnvRunner needs a dapo_rllib\.tasks\.problem_env\.ProblemEnv subclass",
    ):
        build_env(CartPoleEnv, {}, worker_index=1, num_workers=1)
