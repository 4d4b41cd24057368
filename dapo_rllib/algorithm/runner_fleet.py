"""The env runners in service, as the algorithm sees them: where a generation round is sampled, and how a
runner that died comes back with the learner's current weights.

`DAPO` builds one `RunnerFleet` and hands it to the `GroupSampler`, so sampling never calls back into the
algorithm: the fleet holds what bringing a runner back needs (the env runner group, the learners whose
weights it streams, and the lock that keeps that apart from an update).
"""

from __future__ import annotations

import logging
import threading

import numpy as np
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from dapo_rllib.rollout.env_runner_group import (
    SampleReport,
    bring_back_env_runners,
    on_env_runners,
    sample_on_env_runners,
)
from dapo_rllib.rollout.matchups import LeagueDraw
from dapo_rllib.rollout.weight_sync import WeightSyncSettings, stream_weights

logger = logging.getLogger(__name__)


class RunnerFleet:
    """The training (and evaluation) env runners of one algorithm, and the learners that feed them weights.

    Args:
        env_runner_group: The training runners; `eval_env_runner_group`: the evaluation runners, if any.
        learner_group: The learners whose weights every engine must hold before it samples.
        config: The algorithm's config (RLlib's restart settings, and the weight sync's).
        learner_lock: Held while the learners update or send weights: async_rollout's generation thread
            may have to bring a restarted runner up to date in the middle of an update.
    """

    def __init__(self, env_runner_group, eval_env_runner_group, learner_group, config, learner_lock: threading.Lock):
        self.env_runner_group, self.eval_env_runner_group = env_runner_group, eval_env_runner_group
        self.learner_group, self.config, self.learner_lock = learner_group, config, learner_lock
        self.weight_sync = WeightSyncSettings.from_flat(config)
        self._restored_since_read = 0  # runners brought back since `pop_restored_count`
        self.curriculum_levels: dict[str, int] | None = None  # the algorithm's; a restarted runner gets them
        # The league every engine serves (`serve_league`): its draw and its snapshots' adapters, by name.
        self._league: tuple[LeagueDraw, dict[str, dict[str, np.ndarray]]] | None = None

    def sample(self, requests: list[tuple[int, int]], metrics: MetricsLogger) -> list[SampleReport]:
        """The env runners' reports for `(problem index, group id)` requests, spread over those in service."""
        return sample_on_env_runners(
            self.env_runner_group,
            requests,
            restart_failed=self.config.restart_failed_env_runners,
            runners_in_service=self.in_service,
            metrics=metrics,
        )

    def in_service(self) -> list[int]:
        """The training runners to sample on; when none is left, those `restore` brings back."""
        group = self.env_runner_group
        if not group.healthy_worker_ids():
            self.restore(group)
        return list(group.healthy_worker_ids())

    def restore(self, group) -> list[int]:
        """Every runner of `group` in service, with the learner's current weights.

        With `restart_failed_env_runners`, a runner that died (found by a ping, or earlier by a failed
        call) is waited for until Ray has restarted it, for up to `env_runner_restore_timeout_s`; then
        the learner's weights are streamed into it. (RLlib's own restore would send the RL module's
        inference-only state, which holds no weights for vLLM engines; the draw order needs no restoring.)
        """
        cfg = self.config
        if cfg.restart_failed_env_runners:
            restored = bring_back_env_runners(
                group,
                probe_timeout_s=cfg.env_runner_health_probe_timeout_s,
                restore_timeout_s=cfg.env_runner_restore_timeout_s,
            )
        else:
            restored = group.probe_unhealthy_env_runners()
        if restored:
            self._restored_since_read += len(restored)
            self.sync_weights(restored, group=group)
            if self.curriculum_levels is not None:
                levels = self.curriculum_levels
                on_env_runners(group, lambda runner: runner.set_curriculum_levels(levels), restored)
            if self._league is not None:
                league, snapshots = self._league
                on_env_runners(group, lambda runner: runner.serve_league(league, snapshots, []), restored)
            logger.info(f"[DAPO] env runner(s) {sorted(restored)} restarted and given the current weights")
        return restored

    def pop_restored_count(self) -> int:
        """Runners brought back since the last call: what the algorithm adds to RLlib's restored-runner counter."""
        count, self._restored_since_read = self._restored_since_read, 0
        return count

    def sync_weights(self, env_runner_ids: list[int] | None = None, *, group=None) -> int:
        """Stream the learner's weights into every vLLM engine (or those of the runners `env_runner_ids`
        of `group`, by default the training runners) and return once all hold them: DAPO is on-policy,
        the next generation round must use the new weights. Returns the number of buckets sent."""
        if env_runner_ids is None:
            targets = [(g, None) for g in (self.env_runner_group, self.eval_env_runner_group) if g is not None]
        else:
            targets = [(group or self.env_runner_group, env_runner_ids)]
        with self.learner_lock:
            return stream_weights(self.learner_group, targets, self.weight_sync.bucket_bytes)

    # ----- the league (dapo_rllib.algorithm.self_play.league) ----------------------------------------------
    def policy_adapter(self) -> dict[str, np.ndarray]:
        """The trained policy's adapter tensors as the engines serve them (the first training runner's)."""
        group = self.env_runner_group
        return on_env_runners(group, lambda runner: runner.adapter_tensors(), list(group.healthy_worker_ids())[:1])[0]

    def serve_league(
        self, league: LeagueDraw, snapshots: dict[str, dict[str, np.ndarray]], *, replace: bool = False
    ) -> None:
        """Every engine serves exactly `snapshots` as adapters and draws opponents from `league`: the snapshots
        new to it are sent and those gone removed, or with `replace` (a restored checkpoint's league, whose
        names may be taken) all are sent again."""
        served = set(self._league[1]) if self._league is not None else set()
        added = {name: tensors for name, tensors in snapshots.items() if replace or name not in served}
        removed = sorted(served if replace else served - set(snapshots))
        for group in filter(None, (self.env_runner_group, self.eval_env_runner_group)):
            on_env_runners(group, lambda runner: runner.serve_league(league, added, removed))
        self._league = (league, dict(snapshots))
