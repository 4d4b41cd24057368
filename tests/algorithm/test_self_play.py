"""Self-play on the built-in take-away game through DAPO's loop (RLlib's, vLLM's, the tiny model): both seats
played by the one policy, role-conditioned advantages, validation against the scripted opponents.

A league run trains LoRA adapters against frozen snapshots of them, served side by side by the engine.

The tiny model is not trained on the game: these tests hold whatever it replies (a reply without a move loses
the game at once); learning is shown by the self-play example."""

import math

import numpy as np
import pytest
from ray import tune
from ray.rllib.algorithms.algorithm import Algorithm

import dapo_rllib  # noqa: F401  (registers "dapo_take_away")
from dapo_rllib.columns import Metrics
from dapo_rllib.rollout.matchups import versus, versus_league
from tests.support.runs import SMALL_MULTI_TURN_STEPS, learner_adapters, learner_weights, tiny_config

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


def test_training_against_a_scripted_opponent_async_with_tis_gives_one_group_per_request(ray_session, tiny_model_path):
    # An env runner actor generates step 2's games while the learner updates on step 1's; TIS corrects the
    # trained seat's tokens for that step of staleness.
    config = take_away_config(tiny_model_path, async_rollout=True, rollout_correction="tis")
    config.multi_agent(policy_mapping_fn=versus("heuristic")).env_runners(num_env_runners=1)
    config.evaluation(evaluation_interval=0, val_before_train=False)
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(2)]
    finally:
        algo.stop()
    for result in results:
        assert result[Metrics.ROLLOUT][Metrics.GROUPS_KEPT] == GAME_STEPS["train_batch_size_prompts"]
        assert set(result[Metrics.ROLLOUT][Metrics.ROLE_BASELINES]) <= {"TakeAway/player_0", "TakeAway/player_1"}
        assert 0 < result["learners"]["default_policy"][Metrics.ROLLOUT_IS_WEIGHT_MEAN] <= 2.0
    # The first games are sampled with the learner's weights: the mismatch is float32 noise.
    assert results[0]["learners"]["default_policy"][Metrics.ROLLOUT_LOGP_ABS_DIFF] < 0.01


# Adapters of rank 8, synced as adapters: the engine serves the trained policy's and the league's side by side.
LEAGUE = dict(lora_rank=8, lora_sync="adapter", lr=2e-3, league_size=2, league_snapshot_every=1)


@pytest.fixture(scope="module")
def league_run(ray_session, tiny_model_path, tmp_path_factory):
    """A league run's first iteration (result, the engine's adapters); its second iteration, and the same by an
    algorithm restored from the checkpoint after the first, each with the league's state and learner weights."""
    checkpoint = tmp_path_factory.mktemp("league")
    config = take_away_config(tiny_model_path, **LEAGUE).multi_agent(policy_mapping_fn=versus_league)
    algo = config.build_algo()
    try:
        first = algo.train()
        runner = algo.env_runner
        served = {name: runner.adapter_tensors(name) for name in ("policy", "league_0", "league_1")}
        served["learner"] = learner_adapters(algo)
        held_ids = runner.engine_adapter()[1]
        algo.save_to_path(str(checkpoint))
        continued = (algo.train(), algo.get_state()["league"], learner_weights(algo))
        league_1_after = runner.adapter_tensors("league_1")
    finally:
        algo.stop()
    restored = Algorithm.from_checkpoint(str(checkpoint))
    try:
        resumed = (restored.train(), restored.get_state()["league"], learner_weights(restored))
    finally:
        restored.stop()
    return (first, served, held_ids, league_1_after), continued, resumed


def test_a_league_serves_the_initial_policy_and_each_snapshot_beside_the_trained_adapter(league_run):
    (result, served, held_ids, league_1_after), *_ = league_run
    league = result[Metrics.ROLLOUT][Metrics.LEAGUE]
    # league_0 (the initial policy) played step 1; league_1 joined after it: the odds of step 2 are even.
    assert league[Metrics.LEAGUE_SIZE] == 2 and 0 <= league[Metrics.LEAGUE_WIN_RATE] <= 1
    assert league[Metrics.LEAGUE_ODDS] == {"league_0": 0.5, "league_1": 0.5}
    assert len(held_ids) == 3  # the trained policy's adapter and two snapshots, in one engine
    # The initial adapter's B matrices are zero (the base model); league_1 is the learner's adapter after step 1,
    # so the engine samples it with the learner's log-probs (tests/models/test_adapter_shelf.py, tests/models/test_lora.py).
    assert all(not value.any() for key, value in served["league_0"].items() if "lora_B" in key)
    assert sorted(served["league_1"]) == sorted(served["learner"])
    for key, value in served["learner"].items():
        np.testing.assert_array_equal(served["league_1"][key], value, err_msg=key)
        np.testing.assert_array_equal(served["policy"][key], value, err_msg=key)
        np.testing.assert_array_equal(league_1_after[key], value, err_msg=key)  # frozen while the policy trains


def test_validation_plays_each_snapshot_and_rates_it(league_run):
    (result, *_), *_ = league_run
    for opponent in (*OPPONENTS, "league_0", "league_1"):
        against = result["evaluation"][f"take_away/vs_{opponent}"]
        assert (against["num_problems"], against["num_samples"]) == (2, 4)
        assert math.isfinite(result["evaluation"]["take_away"][f"{Metrics.ELO}/{opponent}"])


def test_a_resumed_league_run_continues_exactly(league_run):
    _, (continued, continued_league, continued_weights), (resumed, resumed_league, resumed_weights) = league_run
    assert resumed[Metrics.ROLLOUT][Metrics.LEAGUE] == continued[Metrics.ROLLOUT][Metrics.LEAGUE]
    assert resumed_league["results"] == continued_league["results"]
    assert list(resumed_league["snapshots"]) == list(continued_league["snapshots"]) == ["league_1", "league_2"]
    for name, value in continued_weights.items():
        np.testing.assert_allclose(resumed_weights[name], value, rtol=1e-5, atol=1e-7, err_msg=name)


def test_tune_searches_the_league_size_and_snapshot_interval(ray_session, tiny_model_path, tmp_path):
    config = take_away_config(tiny_model_path, **LEAGUE).multi_agent(policy_mapping_fn=versus_league)
    # Two trials: a snapshot every step into a league of 1, and every 2 steps into a league of 2.
    config.training(
        league_size=tune.grid_search([1, 2]),
        league_snapshot_every=tune.sample_from(lambda spec: spec.config.league_size),
    )
    config.evaluation(evaluation_interval=0)
    run = tune.RunConfig(stop={"training_iteration": 1}, storage_path=str(tmp_path), verbose=0)
    results = tune.Tuner("DAPO", param_space=config, run_config=run).fit()
    assert not results.errors
    leagues = {
        (r.config["league_size"], r.config["league_snapshot_every"]): set(r.metrics["rollout"]["league"]["odds"])
        for r in results
    }
    # After step 1: league_0 and, where a snapshot is due every step, league_1, the oldest leaving past the size.
    assert leagues == {(1, 1): {"league_1"}, (2, 2): {"league_0"}}
