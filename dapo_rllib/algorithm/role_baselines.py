"""The role baselines of adv_estimator="rae": the algorithm's state between steps.

SPIRAL's role-conditioned advantage (`core_algos.ema_baselines`, `core_algos.rae_advantages`) compares
an episode's reward with the moving average of the rewards its role got before. The driver keeps those
averages, one per role, in training order, and checkpoints them: each step's trained episodes read
their role's baseline before their own reward moves it. The learner connector (`GroupAdvantages`)
reads the baseline from the episode, so any number of learners sees the same values.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from dapo_rllib.algorithm import core_algos
from dapo_rllib.algorithm.connectors import episode_value
from dapo_rllib.algorithm.loss import LossSettings
from dapo_rllib.columns import DEFAULT_ROLE, CustomData, Extras, Metrics

ROLE_BASELINES_STATE = "role_baselines"


def episode_role(episode) -> str:
    """The role an episode's policy played: its `Extras.ROLE`, or `DEFAULT_ROLE` where the env has no roles."""
    return episode_value(episode, Extras.ROLE) if Extras.ROLE in episode.extra_model_outputs else DEFAULT_ROLE


class RoleBaselines:
    """{role: reward baseline}, moved by every trained episode in order (`decay`: `rae_decay`); all of it
    idle unless the config's estimator takes baselines (`active`)."""

    def __init__(self, decay: float, active: bool):
        self.decay = decay
        self.active = active
        self.values: dict[str, float] = {}

    @classmethod
    def for_config(cls, config) -> RoleBaselines:
        loss = LossSettings.from_flat(config)
        return cls(loss.rae_decay, core_algos.wants_baselines(loss.adv_estimator))

    def assign(self, groups, metrics: MetricsLogger) -> None:
        """Give each episode of `groups` (one step's, in training order) its role's baseline, then move
        the baselines by their rewards; the baselines after the step go to `metrics`."""
        if not self.active:
            return
        episodes = [ep for group in groups for ep in group.episodes]
        scores = torch.tensor([ep.get_return() for ep in episodes], dtype=torch.float64)
        used, self.values = core_algos.ema_baselines(
            scores, [episode_role(ep) for ep in episodes], self.values, self.decay
        )
        for episode, baseline in zip(episodes, used.tolist()):
            episode.custom_data[CustomData.ROLE_BASELINE] = baseline
        for role, baseline in self.values.items():
            metrics.log_value((Metrics.ROLLOUT, Metrics.ROLE_BASELINES, role), baseline, window=1)

    def get_state(self) -> dict[str, Any]:
        return {ROLE_BASELINES_STATE: dict(self.values)} if self.active else {}

    def set_state(self, state: dict[str, Any]) -> None:
        self.values = dict(state.get(ROLE_BASELINES_STATE, {}))
