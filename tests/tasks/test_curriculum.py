"""Curricula (dapo_rllib/tasks/curriculum.py): reasoning-gym's own, raised by DAPO after a validation in which a
family's held-out accuracy reached the threshold, in every env runner, and kept by a checkpoint."""

import pytest
from ray.rllib.algorithms.algorithm import Algorithm

from dapo_rllib.columns import Metrics
from dapo_rllib.tasks.curriculum import next_levels
from envs.reasoning_gym_env import ReasoningGymEnv
from tests.support.runs import tiny_config

SUMS = {"operators": ["+"], "allow_negation": False, "allow_parentheses": False}
SOURCE = "reasoning_gym/basic_arithmetic"


def test_a_level_rises_by_one_where_the_accuracy_reached_the_threshold_up_to_the_last():
    levels = {"a": 0, "b": 1, "c": 2, "d": 0}
    accuracy = {"a": 0.8, "b": 0.5, "c": 0.9}  # d was not validated
    # a: 0.8 >= 0.75, 0 -> 1; b: 0.5 < 0.75 stays; c: already at its last level 2; d: no accuracy, stays.
    assert next_levels(levels, accuracy, 0.75, {"a": 3, "b": 3, "c": 2, "d": 3}) == {"a": 1, "b": 1, "c": 2, "d": 0}


def test_reasoning_gym_levels_are_the_familys_curriculum():
    env = ReasoningGymEnv(
        {"task": "basic_arithmetic", "task_config": SUMS, "num_problems": 40, "curriculum": {"threshold": 0.8}}
    )
    assert env.curriculum_levels() == {SOURCE: 0}
    # Level 0 of basic_arithmetic's curriculum: 2 terms of 1 digit.
    assert all(env.problem(i).entry["question"].count("+") == 1 for i in range(env.num_problems))
    assert env.next_curriculum_levels({SOURCE: 0}, {SOURCE: 0.79}) == {SOURCE: 0}
    raised = env.next_curriculum_levels({SOURCE: 0}, {SOURCE: 0.8})
    env.set_curriculum_levels(raised)
    # Level 1: 2 or 3 terms of up to 2 digits; task_config's operators still hold.
    questions = [env.problem(i).entry["question"] for i in range(env.num_problems)]
    assert {q.count("+") for q in questions} == {1, 2} and not any("-" in q or "*" in q for q in questions)
    assert env.num_problems == 40
    assert env.next_curriculum_levels({SOURCE: 4}, {SOURCE: 1.0}) == {SOURCE: 4}  # num_terms' last level


@pytest.mark.parametrize(
    "curriculum, message",
    [
        ({"threshold": 1.5}, r"expected None or \{'threshold': t\} with t in \[0, 1\]"),
        ({"level": 2}, r"expected None or \{'threshold': t\}"),
    ],
)
def test_a_bad_curriculum_setting_is_refused(curriculum, message):
    with pytest.raises(ValueError, match=message):
        ReasoningGymEnv({"task": "basic_arithmetic", "num_problems": 2, "curriculum": curriculum})


def test_a_family_without_a_curriculum_is_refused_listing_those_with_one():
    with pytest.raises(ValueError, match=r"no curriculum for \['gsm_symbolic'\]; it has \[.*'basic_arithmetic'"):
        ReasoningGymEnv({"task": "gsm_symbolic", "num_problems": 2, "curriculum": {"threshold": 0.5}})


def test_validation_raises_the_level_in_every_env_runner_and_a_checkpoint_keeps_it(
    ray_session, tiny_model_path, tmp_path
):
    # Threshold 0: the level rises after every validation, whatever the tiny model scores.
    env_config = {
        "task": "basic_arithmetic",
        "task_config": SUMS,
        "num_problems": 32,
        "train_problems": 32,
        "answer_format": "answer_line",
        "curriculum": {"threshold": 0.0},
    }
    config = (
        tiny_config(tiny_model_path, dynamic_sampling=False)
        .environment("dapo_reasoning_gym", env_config=env_config)
        .evaluation(evaluation_interval=1, eval_max_problems=8)
        .env_runners(num_env_runners=1)
    )

    def runner_levels(algo):
        return algo.env_runner_group.foreach_env_runner(
            lambda runner: (runner.env.curriculum_levels(), runner._evaluation_env().curriculum_levels()),
            local_env_runner=False,
        )

    algo = config.build_algo()
    try:
        first = algo.train()
        assert first[Metrics.CURRICULUM_LEVELS] == {SOURCE: 1}
        assert runner_levels(algo) == [({SOURCE: 1}, {SOURCE: 1})]
        checkpoint = algo.save(str(tmp_path / "checkpoint")).checkpoint.path
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(checkpoint)
    try:
        assert runner_levels(restored) == [({SOURCE: 1}, {SOURCE: 1})]
    finally:
        restored.stop()
