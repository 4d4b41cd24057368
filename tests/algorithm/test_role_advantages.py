"""Role-conditioned advantage estimation (adv_estimator="rae", SPIRAL): the math with literals, the driver's
baselines across steps and checkpoints, and the learner connector reading them from the episodes."""

import math

import numpy as np
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

import dapo_rllib  # noqa: F401  (registers the environments)
from dapo_rllib.algorithm.core_algos import compute_advantages, ema_baselines, rae_advantages
from dapo_rllib.algorithm.dapo import DAPO, DAPOConfig
from dapo_rllib.algorithm.dynamic_sampling import Group
from dapo_rllib.algorithm.role_baselines import RoleBaselines
from dapo_rllib.columns import DEFAULT_ROLE, Columns, CustomData, Metrics
from tests.support.episodes import episode, run_pieces
from tests.support.runs import ONE_STEP


def test_each_response_reads_its_roles_baseline_before_its_reward_moves_it():
    scores = torch.tensor([1.0, -1.0, 1.0, 1.0])
    used, after = ema_baselines(scores, ["a", "b", "a", "a"], {"b": 0.5}, decay=0.9)
    # a: 0 read, then 0.9*0 + 0.1*1 = 0.1; b: 0.5 read (the prior), then 0.45 - 0.1 = 0.35;
    # a: 0.1 read, then 0.09 + 0.1 = 0.19; a: 0.19 read, then 0.171 + 0.1 = 0.271.
    torch.testing.assert_close(used, torch.tensor([0.0, 0.5, 0.1, 0.19], dtype=torch.float64))
    assert after == pytest.approx({"a": 0.271, "b": 0.35})


def test_spirals_decay_from_a_fresh_start():
    used, after = ema_baselines(torch.tensor([1.0, 1.0]), ["p0", "p0"], {}, decay=0.95)
    # 0 read, then 0.05; 0.05 read, then 0.95*0.05 + 0.05 = 0.0975.
    torch.testing.assert_close(used, torch.tensor([0.0, 0.05], dtype=torch.float64))
    assert after == pytest.approx({"p0": 0.0975})


def test_rae_is_the_reward_minus_the_baseline_without_normalisation():
    # Equal rewards in a group keep a signal: 1 - 0.25 = 0.75, 1 - (-0.5) = 1.5, -1 - 0.25 = -1.25.
    advantages = rae_advantages(
        torch.tensor([1.0, 1.0, -1.0]), torch.tensor([0, 0, 1]), baselines=torch.tensor([0.25, -0.5, 0.25])
    )
    torch.testing.assert_close(advantages, torch.tensor([0.75, 1.5, -1.25]))


def test_bad_baselines_and_decays_are_clear_errors():
    mask = torch.ones(2, 3)
    with pytest.raises(ValueError, match="adv_estimator='rae' needs a baseline per response"):
        compute_advantages("rae", torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), mask)
    with pytest.raises(ValueError, match=r"baselines has shape \(3,\); expected \(2,\)"):
        compute_advantages("rae", torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), mask, torch.zeros(3))
    with pytest.raises(ValueError, match=r"decay=1.0 must be in \[0, 1\)"):
        ema_baselines(torch.tensor([1.0]), ["a"], {}, decay=1.0)
    with pytest.raises(ValueError, match="expected one role per score"):
        ema_baselines(torch.tensor([1.0, 2.0]), ["a"], {}, decay=0.5)


def role_episode(reward, group_id, role=None):
    return episode([1], [2, 3], reward, group_id, role=role)


def test_the_driver_gives_each_trained_episode_its_baseline_and_keeps_them_across_steps():
    baselines = RoleBaselines(decay=0.5, active=True)
    step_1 = [Group(0, [role_episode(1.0, 0, "g/player_0"), role_episode(-1.0, 0, "g/player_1")])]
    metrics = MetricsLogger(root=True)
    baselines.assign(step_1, metrics)
    assert [ep.custom_data[CustomData.ROLE_BASELINE] for ep in step_1[0].episodes] == [0.0, 0.0]
    # player_0: 0.5*0 + 0.5*1 = 0.5; player_1: -0.5.
    assert baselines.get_state() == {"role_baselines": {"g/player_0": 0.5, "g/player_1": -0.5}}
    assert metrics.peek((Metrics.ROLLOUT, Metrics.ROLE_BASELINES, "g/player_1")) == -0.5

    resumed = RoleBaselines(decay=0.5, active=True)
    resumed.set_state(baselines.get_state())
    step_2 = [Group(1, [role_episode(1.0, 1, "g/player_0"), role_episode(1.0, 1)])]
    resumed.assign(step_2, MetricsLogger(root=True))
    # player_0 reads 0.5; a single-agent episode reads its one role's fresh baseline, 0.
    assert [ep.custom_data[CustomData.ROLE_BASELINE] for ep in step_2[0].episodes] == [0.5, 0.0]
    assert resumed.values == {"g/player_0": 0.75, "g/player_1": -0.5, DEFAULT_ROLE: 0.5}


def test_idle_unless_the_estimator_takes_baselines():
    baselines = RoleBaselines(decay=0.95, active=False)
    groups = [Group(0, [role_episode(1.0, 0)])]
    baselines.assign(groups, MetricsLogger(root=True))
    assert CustomData.ROLE_BASELINE not in groups[0].episodes[0].custom_data
    assert baselines.get_state() == {}


def test_the_connector_reads_the_baselines_from_the_episodes():
    eps = [role_episode(1.0, 0), role_episode(1.0, 0)]
    RoleBaselines(decay=0.5, active=True).assign([Group(0, eps)], MetricsLogger(root=True))
    # Baselines 0 and 0.5 (after the first reward of 1): advantages 1 and 0.5 on both loss tokens.
    np.testing.assert_allclose(run_pieces(eps, estimator="rae")[Columns.ADVANTAGES], [[1.0, 1.0], [0.5, 0.5]])


def test_an_episode_without_a_baseline_is_a_clear_error():
    eps = [role_episode(1.0, 0)]
    with pytest.raises(ValueError, match="has no role baseline"):
        run_pieces(eps, estimator="rae")[DEFAULT_MODULE_ID]


def test_a_run_trains_with_rae_and_its_checkpoint_resumes_the_baselines(ray_session, tiny_model_path, tmp_path):
    config = (
        DAPOConfig()
        .environment("dapo_math", env_config={"dataset": "arithmetic", "split": "train"})
        .evaluation(val_before_train=False)
        .env_runners(num_env_runners=0)
        # A group whose rewards are all equal still has a signal under RAE: no dynamic sampling.
        .training(
            model_path=tiny_model_path,
            adv_estimator="rae",
            rae_decay=0.9,
            dynamic_sampling=False,
            overlong_buffer_len=4,
            **ONE_STEP,
        )
    )
    algo = config.build_algo()
    try:
        result = algo.train()
        algo.save_to_path(str(tmp_path))
        baselines = algo.get_state()["role_baselines"]
    finally:
        algo.stop()
    assert set(baselines) == {DEFAULT_ROLE}
    assert result[Metrics.ROLLOUT][Metrics.ROLE_BASELINES] == baselines
    assert math.isfinite(result["learners"]["default_policy"]["policy_loss"])
    restored = DAPO.from_checkpoint(str(tmp_path))
    try:
        assert restored._role_baselines.values == baselines
    finally:
        restored.stop()
