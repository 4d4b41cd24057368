"""DAPO: the algorithm on RLlib's new API stack (its settings: `dapo_rllib.dapo_config.DAPOConfig`).

`DAPO.training_step` reads as the recipe (docs/algorithm.md §2):

    dynamic sampling   generation rounds on the vLLM env runners until enough informative groups
                       (`dynamic_sampling.GroupSampler`, over `env_runner_group`)
    update             learner_group.update: connector (advantages, masks, old log-probs) → loss
    weight sync        learner weights → every env runner's running vLLM engine, in buckets
                       (`weight_sync.stream_weights`)

With `async_rollout` the env runners generate the next step's batch during the update.
Validation during training is `dapo_rllib.validation`.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    EVALUATION_RESULTS,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)

from dapo_rllib.checkpoints import refuse_another_algorithms_checkpoint
from dapo_rllib.columns import Metrics
from dapo_rllib.dapo_config import DAPOConfig
from dapo_rllib.dynamic_sampling import GroupSampler
from dapo_rllib.env_runner_group import bring_back_env_runners, on_env_runners, sample_on_env_runners
from dapo_rllib.problem_env import DrawOrder
from dapo_rllib.ray_private import count_restored_env_runners
from dapo_rllib.tensorboard import EVAL_BEFORE_TRAINING, TensorBoardWriter
from dapo_rllib.validation import as_stats, heldout_results
from dapo_rllib.weight_sync import stream_weights

LORA_SYNC_LINES = {
    "adapter": "adapter-only weight sync (the vLLM engines serve the base model with the adapter)",
    "merged": "merged weight sync (vLLM cannot serve these adapters: the weights with the adapters merged in "
    "travel to the engines after each step, as in full fine-tuning)",
}

__all__ = ["DAPO", "DAPOConfig", "learner_data"]

PENDING_GROUPS = "pending_groups"  # checkpoint key: async_rollout's batch for the next step


class DAPO(Algorithm):
    #: The name Tune and `rllib train` know the algorithm by, and a checkpoint is restored as.
    NAME = "DAPO"
    #: Its settings (a neighbour of DAPO's, `dapo_rllib.algorithms`, has its own defaults).
    config_class = DAPOConfig

    @classmethod
    @override(Algorithm)
    def get_default_config(cls) -> DAPOConfig:
        return cls.config_class()

    @classmethod
    @override(Algorithm)
    def from_checkpoint(cls, path, filesystem=None, **kwargs) -> Algorithm:
        refuse_another_algorithms_checkpoint(path, cls)
        return super().from_checkpoint(path, filesystem=filesystem, **kwargs)

    @classmethod
    @override(Algorithm)
    def _should_create_evaluation_env_runners(cls, eval_config) -> bool:
        # Without dedicated evaluation runners (evaluation_num_env_runners=0) DAPO evaluates on
        # the training runners' engines instead of starting another vLLM engine in the driver.
        return eval_config.evaluation_num_env_runners > 0

    @override(Algorithm)
    def setup(self, config) -> None:
        if config.model_path is None:
            from dapo_rllib.models.tiny import ensure_tiny_model

            # The documented default, built once (then cached) before any runner or learner loads it.
            ensure_tiny_model()
        if config.lora_settings is not None:
            # Resolved (and refused with its reason) before any learner or env runner starts.
            print(f"LoRA rank {config.lora_rank}: {LORA_SYNC_LINES[config.lora_sync_path]}", flush=True)
        super().setup(config)
        self._tensorboard: TensorBoardWriter | None = None
        self._evaluated_before_training = False
        self.num_evaluations = 0  # calls of the evaluation function so far
        self._pending_groups = None  # async_rollout: the batch generated during the last update
        self._generator = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="dapo-rollout") if config.async_rollout else None
        )
        # Held while the learners update or send weights: async_rollout's generation thread may
        # have to bring a restarted env runner up to date in the middle of an update.
        self._learner_lock = threading.Lock()
        # The training data's position lives here, not in the env runners, so that a replaced
        # runner neither restarts nor repeats the epoch: the order starts as the env's own.
        group = self.env_runner_group
        initial = on_env_runners(group, lambda runner: runner.env.get_state(), list(group.healthy_worker_ids())[:1])[0]
        self._sampler = GroupSampler(config, self._sample, DrawOrder.from_state(initial))

    @override(Algorithm)
    def step(self) -> dict:
        """RLlib's step, without the evaluation results it repeats from earlier iterations.

        RLlib's metrics keep reporting the last evaluation until the next one; a curve (and the
        "accuracy after training") must only show evaluations made in the iteration reported.
        """
        evaluations, first_iteration = self.num_evaluations, self.iteration == 0
        results = super().step()
        if self.num_evaluations == evaluations:
            results.pop(EVALUATION_RESULTS, None)
        if not first_iteration:
            results.pop(EVAL_BEFORE_TRAINING, None)
        return results

    @override(Algorithm)
    def training_step(self) -> None:
        cfg = self.config
        if cfg.val_before_train and self.iteration == 0 and not self._evaluated_before_training:
            self._evaluate_before_training()
        # RLlib's timers, per step (window 1) rather than smoothed: DAPO's steps differ a lot.
        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER), reduce="mean", window=1):
            if not cfg.async_rollout:
                groups = self._sampler.collect(self.metrics)
            elif self._pending_groups is not None:
                groups, self._pending_groups = self._pending_groups, None
            else:  # the first step of an async run
                groups, stats = self._sampler.collect_apart()
                self.metrics.aggregate([stats])
        if cfg.async_rollout:
            # The next batch, sampled during the update with the weights the runners hold now.
            next_batch = self._generator.submit(self._sampler.collect_apart)

        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER), reduce="mean", window=1), self._learner_lock:
            results = self.learner_group.update(
                **learner_data(groups, 1 if self.learner_group.is_local else len(self.learner_group), cfg),
                timesteps={
                    NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                        (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0
                    )
                },
                num_epochs=cfg.num_epochs,
                shuffle_batch_per_epoch=False,
            )
            self.metrics.aggregate(results, key=LEARNER_RESULTS)

        if cfg.async_rollout:
            start = time.perf_counter()
            self._pending_groups, stats = next_batch.result()
            self.metrics.aggregate([stats])
            self.metrics.log_value((TIMERS, Metrics.ASYNC_WAIT_S), time.perf_counter() - start, window=1)
        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER), reduce="mean", window=1):
            buckets = self.sync_weights_to_env_runners()
        self.metrics.log_value((Metrics.ROLLOUT, Metrics.WEIGHT_SYNC_BUCKETS), buckets, window=1)

    def _evaluate_before_training(self) -> None:
        print("[DAPO] evaluating before the first training step ...", flush=True)
        results = heldout_results(self.config, self.eval_env_runner_group or self.env_runner_group)
        self.metrics.aggregate([as_stats(results)], key=EVAL_BEFORE_TRAINING)
        self._evaluated_before_training = True

    # ----- sampling on the env runners (see dapo_rllib.env_runner_group) --------------------
    def _sample(self, requests: list[tuple[int, int]], metrics) -> list:
        """The `GroupSampler`'s way to the env runners: `requests` spread over those in service."""
        return sample_on_env_runners(
            self.env_runner_group,
            requests,
            restart_failed=self.config.restart_failed_env_runners,
            runners_in_service=self._env_runners_in_service,
            metrics=metrics,
        )

    def _env_runners_in_service(self) -> list[int]:
        """The env runners to sample on; when none is left, those `restore_env_runners` brings back."""
        group = self.env_runner_group
        if not group.healthy_worker_ids():
            self.restore_env_runners(group)
        return list(group.healthy_worker_ids())

    @override(Algorithm)
    def restore_env_runners(self, env_runner_group) -> list[int]:
        """RLlib's hook before each training step: every env runner in service, with the
        learner's current weights, before the step samples.

        With `restart_failed_env_runners`, a runner that died (found by a ping, or earlier by a
        failed call) is waited for until Ray has restarted it, for up to
        `env_runner_restore_timeout_s` (see `env_runner_group.bring_back_env_runners`); then the
        learner's weights are streamed into it. (RLlib's own restore would send the RL module's
        inference-only state, which holds no weights for vLLM engines; the draw order needs no
        restoring.)"""
        cfg = self.config
        if cfg.restart_failed_env_runners:
            restored = bring_back_env_runners(
                env_runner_group,
                probe_timeout_s=cfg.env_runner_health_probe_timeout_s,
                restore_timeout_s=cfg.env_runner_restore_timeout_s,
            )
        else:
            restored = env_runner_group.probe_unhealthy_env_runners()
        if restored:
            count_restored_env_runners(self, len(restored))
            self.sync_weights_to_env_runners(restored, group=env_runner_group)
            print(f"[DAPO] env runner(s) {sorted(restored)} restarted and given the current weights", flush=True)
        return restored

    # ----- weight sync (see dapo_rllib.weight_sync) ----------------------------------------
    def sync_weights_to_env_runners(self, env_runner_ids: list[int] | None = None, *, group=None) -> int:
        """Stream the learner's weights into every vLLM engine (or those of the env runners
        `env_runner_ids` of `group`, by default the training runners) and return once all hold
        them: DAPO is on-policy, the next generation round must use the new weights. Returns the
        number of buckets sent."""
        if env_runner_ids is None:
            targets = [(g, None) for g in (self.env_runner_group, self.eval_env_runner_group) if g is not None]
        else:
            targets = [(group or self.env_runner_group, env_runner_ids)]
        with self._learner_lock:
            return stream_weights(self.learner_group, targets, self.config.weight_sync_bucket_bytes)

    # ----- reporting ------------------------------------------------------------------------
    @override(Algorithm)
    def log_result(self, result: dict) -> None:
        super().log_result(result)
        if self.config.tensorboard_dir:
            self._tensorboard_writer().write(result)

    def log_evaluation(self, eval_results: dict) -> None:
        """Record an `evaluate()` made outside `train()` in TensorBoard, at the current iteration."""
        if self.config.tensorboard_dir:
            self._tensorboard_writer().write_evaluation(eval_results, step=self.iteration)

    def _tensorboard_writer(self) -> TensorBoardWriter:
        if self._tensorboard is None:
            self._tensorboard = TensorBoardWriter(self.config.tensorboard_dir)
        return self._tensorboard

    @override(Algorithm)
    def cleanup(self) -> None:
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._generator is not None:
            self._generator.shutdown(wait=True)
        super().cleanup()

    def export_hf_model(self, out_dir) -> str:
        """Save the current policy as a Hugging Face model directory (weights and tokenizer)."""
        from dapo_rllib.rl_module import export_hf_model

        component = f"{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}/{DEFAULT_MODULE_ID}"
        state = self.learner_group.get_state(components=component)[COMPONENT_LEARNER][COMPONENT_RL_MODULE][
            DEFAULT_MODULE_ID
        ]
        return str(export_hf_model(state, self.config.policy_model_path, out_dir, self.config.model_dtype))

    # ----- state -----------------------------------------------------------------------------
    @override(Algorithm)
    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        state |= self._sampler.get_state()
        if self._pending_groups is not None:
            # async_rollout: sampled with the previous weights, which a resumed run no longer has.
            state[PENDING_GROUPS] = self._pending_groups
        return state

    @override(Algorithm)
    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._pending_groups = state.get(PENDING_GROUPS)
        self._sampler.set_state(state)
        if COMPONENT_LEARNER_GROUP in state:
            self.sync_weights_to_env_runners()

    @override(Algorithm)
    def restore_from_path(self, path, *args, **kwargs) -> None:
        if "component" not in kwargs:
            refuse_another_algorithms_checkpoint(path, type(self))
        super().restore_from_path(path, *args, **kwargs)
        self.sync_weights_to_env_runners()


def learner_data(groups: list[list], num_learners: int, cfg: DAPOConfig) -> dict[str, Any]:
    """`LearnerGroup.update` arguments that give each learner whole groups.

    RLlib's own episode sharding balances by length and splits groups, which would change their
    advantages; object refs are dealt out contiguously, one shard per learner. Each learner's
    mini-batch is its share of `minibatch_size_prompts` groups, and all run the same number of
    mini-batches (their gradient sums must meet once per optimizer step).
    """
    if num_learners == 1:
        episodes = [ep for group in groups for ep in group]
        return {"episodes": episodes, "minibatch_size": min(cfg.minibatch_size_sequences, len(episodes))}
    if len(groups) % num_learners:
        raise ValueError(f"{len(groups)} groups cannot be shared whole by num_learners={num_learners}")
    per_learner = len(groups) // num_learners
    shards = [
        [ep for group in groups[i * per_learner : (i + 1) * per_learner] for ep in group] for i in range(num_learners)
    ]
    minibatch_prompts = min(cfg.minibatch_size_prompts, len(groups)) // num_learners
    return {
        "episodes_refs": [ray.put(shard) for shard in shards],
        "minibatch_size": minibatch_prompts * cfg.group_size,
        "num_total_minibatches": -(-per_learner // minibatch_prompts) * cfg.num_epochs,
    }
