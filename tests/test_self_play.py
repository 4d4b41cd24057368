"""Self-play on the built-in take-away game through DAPO's loop (RLlib's, vLLM's, the tiny model): both seats
played by the one policy, role-conditioned advantages, validation against the scripted opponents.

The tiny model is not trained on the game: these tests hold whatever it replies (a reply without a move loses
the game at once); learning is shown by the self-play example."""

import math

import numpy as np
import pytest
from ray.rllib.algorithms.algorithm import Algorithm

import dapo_rllib  # noqa: F401  (registers "dapo_take_away")
from dapo_rllib.columns import Metrics
from dapo_rllib.rollout.matchups import versus
from tests.test_dapo_integration import learner_weights, tiny_config
from tests.test_multi_turn import SMALL_MULTI_TURN_STEPS

# The rules make a long first message for the tiny model's character-level tokenizer.
GAME_STEPS = {**SMALL_MULTI_TURN_STEPS, "max_prompt_length": 512, "max_response_length": 256, "max_turns": 4}
OPPONENTS = ("random_legal", "heuristic")


def take_away_config(model_path, **training):
    return (
        tiny_config(model_path, **GAME_STEPS, adv_estimator="rae", **training)
        .environment("dapo_take_away", env_config={"num_problems": 16})
        .evaluation(
            evaluation_interval=1,
            eval_num_samples=1,
            eval_max_problems=2,
            evaluation_config={"env_config": {"split": "test", "num_problems": 2}},
        )
    )


@pytest.fixture(scope="module")
def shared_run(ray_session, tiny_model_path, tmp_path_factory):
    """The first iteration's result and state; the second iteration, and the same by an algorithm restored
    from the checkpoint after the first, each with its role baselines and learner weights after it."""
    checkpoint = tmp_path_factory.mktemp("self_play")
    algo = take_away_config(tiny_model_path).build_algo()
    try:
        first, state = algo.train(), algo.get_state()
        algo.save_to_path(str(checkpoint))
        continued = (algo.train(), algo.get_state()["role_baselines"], learner_weights(algo))
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(str(checkpoint))
    try:
        resumed = (restored.train(), restored.get_state()["role_baselines"], learner_weights(restored))
    finally:
        restored.stop()
    return first, state, continued, resumed


def test_shared_self_play_trains_the_seats_that_moved_with_their_role_baselines(shared_run):
    result, state, *_ = shared_run
    assert math.isfinite(result["learners"]["default_policy"]["policy_loss"])
    baselines = result[Metrics.ROLLOUT][Metrics.ROLE_BASELINES]
    # Player 0 always moves; player 1 only where player 0's move did not lose at once.
    assert "TakeAway/player_0" in baselines and set(baselines) <= {"TakeAway/player_0", "TakeAway/player_1"}
    assert state["role_baselines"] == baselines
    assert 1 <= result[Metrics.ROLLOUT][Metrics.TURNS_MEAN] <= 4


def test_validation_reports_the_win_rate_against_each_scripted_opponent(shared_run):
    result, *_ = shared_run
    for opponent in OPPONENTS:
        against = result["evaluation"][f"take_away/vs_{opponent}"]
        # Each position's games at both seats: 2 positions x 2 seats x 1 sample.
        assert (against["num_problems"], against["num_samples"]) == (2, 4)
        assert 0 <= against["avg@2"] <= 1 and against["invalid_moves"] >= 0


def test_a_resumed_self_play_run_continues_exactly(shared_run):
    *_, (continued, continued_baselines, continued_weights), (resumed, resumed_baselines, resumed_weights) = shared_run
    assert resumed["training_iteration"] == continued["training_iteration"] == 2
    for key in ("reward_mean", "turns_mean", "invalid_moves", "groups_kept"):
        assert resumed[Metrics.ROLLOUT][key] == continued[Metrics.ROLLOUT][key], key
    assert resumed_baselines == pytest.approx(continued_baselines)
    for name, value in continued_weights.items():
        np.testing.assert_allclose(resumed_weights[name], value, rtol=1e-5, atol=1e-7, err_msg=name)


def test_training_against_a_scripted_opponent_gives_one_group_per_request(ray_session, tiny_model_path):
    config = take_away_config(tiny_model_path).multi_agent(policy_mapping_fn=versus("heuristic"))
    config.evaluation(evaluation_interval=0, val_before_train=False)
    algo = config.build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert result[Metrics.ROLLOUT][Metrics.GROUPS_KEPT] == GAME_STEPS["train_batch_size_prompts"]
    assert set(result[Metrics.ROLLOUT][Metrics.ROLE_BASELINES]) <= {"TakeAway/player_0", "TakeAway/player_1"}
