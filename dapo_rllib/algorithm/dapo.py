"""DAPO on RLlib's new API stack: its config (`DAPOConfig`) and the algorithm (`DAPO`), in one module as
RLlib's own algorithms are.

`DAPO.training_step` reads as the recipe (docs/design/algorithm.md §2):

    dynamic sampling   generation rounds on the vLLM env runners until enough informative groups
                       (`dynamic_sampling.GroupSampler`, over `env_runner_group`)
    update             learner_group.update: connector (advantages, masks, old log-probs) → loss
    weight sync        learner weights → every env runner's running vLLM engine, in buckets
                       (`weight_sync.stream_weights`)

With `async_rollout` the env runners generate the next step's batch during the update.
Validation during training is `dapo_rllib.algorithm.validation`.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.connectors.common.numpy_to_tensor import NumpyToTensor
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
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
from transformers import AutoConfig

from dapo_rllib.algorithm.checkpoints import refuse_another_algorithms_checkpoint
from dapo_rllib.algorithm.connectors import GroupAdvantages, PadTokenBatch, RecomputeOldLogProbs
from dapo_rllib.algorithm.deepspeed_learner import DAPODeepSpeedLearner, DeepSpeedLearnerGroup, DeepSpeedSettings
from dapo_rllib.algorithm.dynamic_sampling import CollectSettings, Group, GroupSampler, SamplingSettings
from dapo_rllib.algorithm.learner import DAPOTorchLearner, LearnerSettings
from dapo_rllib.algorithm.loss import LossSettings, RolloutCorrectionSettings
from dapo_rllib.algorithm.role_baselines import RoleBaselines
from dapo_rllib.algorithm.runner_fleet import RunnerFleet
from dapo_rllib.algorithm.self_play.league import League, LeagueSettings, check_league_config
from dapo_rllib.algorithm.setting_names import split_settings
from dapo_rllib.algorithm.validation import EvaluationSettings, as_stats, evaluate_heldout, heldout_results
from dapo_rllib.columns import Metrics
from dapo_rllib.doctor.run import check_before_run
from dapo_rllib.models.lora import LoraSettings, lora_sync_path
from dapo_rllib.models.resolve import ModelSettings, ensure_policy_model
from dapo_rllib.models.rl_module import CausalLMRLModule, export_hf_model
from dapo_rllib.ray_private import count_restored_env_runners, env_runner_groups_built_as, value_error
from dapo_rllib.reporting.tensorboard import EVAL_BEFORE_TRAINING, TensorBoardWriter
from dapo_rllib.rollout.env_runner import VLLMEnvRunner
from dapo_rllib.rollout.env_runner_group import ByValueEnvRunnerGroup, on_env_runners
from dapo_rllib.rollout.turn_loop import TurnSettings
from dapo_rllib.rollout.vllm_engine import SamplerSettings
from dapo_rllib.rollout.weight_sync import WeightSyncSettings
from dapo_rllib.settings import FeatureSettings, require
from dapo_rllib.tasks.env_names import MATH_ENV
from dapo_rllib.tasks.rewards.overlong import OverlongSettings

logger = logging.getLogger(__name__)

__all__ = ["DAPO", "DAPOConfig", "learner_data"]

PROBLEM_SOURCE_KEYS = ("dataset", "split", "num_problems")  # env config keys that eval_dataset replaces


class _FeatureSettingsAttribute:
    """A `DAPOConfig` attribute that reads a feature's settings object off the config's flat attributes."""

    def __init__(self, settings_class: type[FeatureSettings]):
        self.settings_class = settings_class

    def __get__(self, config, owner=None):
        return self if config is None else self.settings_class.from_flat(config)


class DAPOConfig(AlgorithmConfig):
    """Configuration of DAPO. Defaults are the reference Qwen2.5-32B run (docs/design/algorithm.md §5).

    A flat façade, as RLlib's configs are: `.training(lr=..., lora_rank=...)` sets any setting, and each
    feature reads its own frozen settings object (`loss_settings`, `lora_settings`, ...), which owns the
    settings' documentation, defaults and checks.

    Example:
        config = (
            DAPOConfig()
            .environment("dapo_math", env_config={"dataset": "data/dapo-math-17k.parquet"})
            .training(model_path="/models/Qwen2.5-32B", group_size=16)
        )
        algo = config.build_algo()

    Attributes:
        async_rollout: Generate the next batch with the current weights while the learner updates on
            this one (one-step off-policy, as verl's recipe): each batch is one update stale; a step
            takes about max(generation, update) instead of their sum. Needs env runner actors
            (num_env_runners >= 1). Default False.
        tensorboard_dir: Directory for DAPO's TensorBoard event files when the algorithm runs in
            process (`dapo_rllib.reporting.tensorboard`). None: none written; under Ray Tune,
            `TensorBoardCallback` writes them instead. Set by `.reporting()`.
    """

    model_settings = _FeatureSettingsAttribute(ModelSettings)
    sampler_settings = _FeatureSettingsAttribute(SamplerSettings)
    turn_settings = _FeatureSettingsAttribute(TurnSettings)
    sampling_settings = _FeatureSettingsAttribute(SamplingSettings)
    learner_settings = _FeatureSettingsAttribute(LearnerSettings)
    loss_settings = _FeatureSettingsAttribute(LossSettings)
    overlong_settings = _FeatureSettingsAttribute(OverlongSettings)
    rollout_correction_settings = _FeatureSettingsAttribute(RolloutCorrectionSettings)
    weight_sync_settings = _FeatureSettingsAttribute(WeightSyncSettings)
    evaluation_settings = _FeatureSettingsAttribute(EvaluationSettings)
    league_settings = _FeatureSettingsAttribute(LeagueSettings)

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or DAPO)
        self.env = MATH_ENV
        self.env_runner_cls = VLLMEnvRunner
        # Token sequences are ragged: DAPO's connector pieces build the batch themselves.
        self.add_default_connectors_to_learner_pipeline = False
        self.custom_evaluation_function = evaluate_heldout
        self.evaluation_config = {"env_config": {"split": "test"}}
        # RLlib's own settings, with DAPO's values.
        self.lr = 1e-6
        self.grad_clip = 1.0
        self.grad_clip_by = "global_norm"
        self.num_epochs = 1
        # Every feature's settings start at their defaults; `async_rollout` and `tensorboard_dir` are the config's own.
        for settings_class in (*TRAINING_SETTINGS, EvaluationSettings):
            for name, value in settings_class.defaults().items():
                setattr(self, name, value)
        self.async_rollout = False
        self.tensorboard_dir = None

    @override(AlgorithmConfig)
    def training(self, **kwargs) -> "DAPOConfig":
        """Sets DAPO's training settings; other keywords (lr, grad_clip, ...) go to RLlib's.

        Each setting is documented by the feature that owns it: `ModelSettings` (model_path,
        model_dtype), `SamplerSettings` (max_prompt_length, max_response_length, temperature, top_p,
        vllm_engine_kwargs), `TurnSettings` (max_turns, tools), `SamplingSettings` (group_size, batch
        sizes, dynamic sampling), `LearnerSettings` (mini- and micro-batches, optimizer),
        `LossSettings` (policy loss, advantage estimator, clipping, KL), `OverlongSettings`,
        `RolloutCorrectionSettings`, `WeightSyncSettings`, `LoraSettings`, `DeepSpeedSettings`,
        `LeagueSettings` (self-play); and `async_rollout` (this class).
        """
        super().training(**split_settings(self, kwargs, TRAINING_SETTING_NAMES, AlgorithmConfig.training))
        return self

    @override(AlgorithmConfig)
    def evaluation(self, **kwargs) -> "DAPOConfig":
        """RLlib's evaluation settings (evaluation_interval: every how many training iterations), plus
        how DAPO validates (`EvaluationSettings`: eval_dataset, eval_num_samples, ...)."""
        super().evaluation(**split_settings(self, kwargs, EvaluationSettings.defaults(), AlgorithmConfig.evaluation))
        return self

    @override(AlgorithmConfig)
    def reporting(self, **kwargs) -> "DAPOConfig":
        """RLlib's reporting settings, plus `tensorboard_dir` (see the class's attributes)."""
        super().reporting(**split_settings(self, kwargs, ("tensorboard_dir",), AlgorithmConfig.reporting))
        return self

    @override(AlgorithmConfig)
    def env_runners(self, *, create_local_env_runner: bool = NotProvided, **kwargs) -> "DAPOConfig":
        """RLlib's env runner settings. Unless `create_local_env_runner` is given, the driver gets
        an env runner (and with it a vLLM engine, which is expensive) only when there are no
        remote ones."""
        kwargs = split_settings(self, kwargs, (), AlgorithmConfig.env_runners)
        super().env_runners(create_local_env_runner=create_local_env_runner, **kwargs)
        if create_local_env_runner is NotProvided:
            self.create_local_env_runner = self.num_env_runners == 0
        return self

    @override(AlgorithmConfig)
    def get_evaluation_config_object(self) -> "DAPOConfig | None":
        # RLlib sets the evaluation runner count directly; the driver's runner follows it as above.
        eval_config = super().get_evaluation_config_object()
        if eval_config is not None:  # a fresh, unfrozen copy
            eval_config.create_local_env_runner = self.create_local_env_runner and eval_config.num_env_runners == 0
        return eval_config

    def evaluation_env_config(self) -> dict:
        """The env config the validation environment is built with."""
        base = self if self.in_evaluation else self.get_evaluation_config_object()
        env_config = dict(base.env_config)
        if self.eval_dataset is not None:
            # "split" matters to the arithmetic generator only: its held-out half.
            env_config = {k: v for k, v in env_config.items() if k not in PROBLEM_SOURCE_KEYS} | {
                "dataset": self.eval_dataset,
                "split": "test",
            }
        return env_config

    # ----- settings the features read ------------------------------------------------------
    @property
    def lora_settings(self) -> LoraSettings | None:
        """The LoRA adapters' settings, or None for full fine-tuning (`lora_rank=None`)."""
        if self.lora_rank is None:
            return None
        return LoraSettings.from_flat(self, seed=self.seed or 0)

    @property
    def deepspeed_settings(self) -> DeepSpeedSettings:
        return DeepSpeedSettings.from_config(self)

    @property
    def policy_model_path(self) -> str:
        """The policy's model directory (`ModelSettings.policy_model_path`)."""
        return self.model_settings.policy_model_path

    @property
    def lora_sync_path(self) -> str | None:
        """How the policy reaches the engines with LoRA: "adapter" or "merged" (`lora_sync`, resolved
        against the model's layers, size and the engines' device by `lora_sync_path`); None for full
        fine-tuning."""
        settings, on_gpu = self.lora_settings, self.num_gpus_per_env_runner > 0
        return None if settings is None else lora_sync_path(self.policy_model_path, settings, on_gpu, self.model_dtype)

    @property
    def minibatch_size_sequences(self) -> int:
        return self.minibatch_size_prompts * self.group_size

    @property
    def micro_batch_token_budget(self) -> int:
        """`max_tokens_per_micro_batch`, or its default for the learners' device."""
        longest = self.sampler_settings.longest_sequence
        return self.learner_settings.micro_batch_token_budget(longest, on_gpu=self.num_gpus_per_learner > 0)

    @property
    def learner_attn_implementation(self) -> str:
        """`attn_implementation`, or its default for the learners' device and sequence length."""
        longest = self.sampler_settings.longest_sequence
        return self.learner_settings.attention_kernel(longest, self.num_gpus_per_learner > 0, self.model_dtype)

    @property
    def recomputes_old_logp(self) -> bool:
        """False when every batch gets exactly one optimizer step: the old log-probs are then the
        current ones, and the learner takes them from its own forward pass (ratio 1)."""
        return self.num_epochs > 1 or self.minibatch_size_prompts < self.train_batch_size_prompts

    # ----- checks --------------------------------------------------------------------------
    @override(AlgorithmConfig)
    def validate(self) -> None:
        """RLlib's checks, then each feature's, then those across features: each bad setting raises
        naming it. Changes nothing."""
        super().validate()
        features = [getattr(self, name) for name in FEATURE_SETTINGS_ATTRIBUTES]
        for settings in filter(None, [*features, self.lora_settings, self.deepspeed_settings]):
            try:
                settings.validate()
            except ValueError as error:
                value_error(self, str(error))
        try:
            self._validate_across_features()
        except ValueError as error:
            value_error(self, str(error))

    def _validate_across_features(self) -> None:
        longest = self.sampler_settings.longest_sequence
        check_league_config(self.league_settings, LoraSettings.from_flat(self))
        require(
            self.train_batch_size_prompts % self.minibatch_size_prompts == 0,
            f"train_batch_size_prompts={self.train_batch_size_prompts} must be a multiple of minibatch_size_prompts={self.minibatch_size_prompts}",
        )
        require(
            self.overlong_buffer_len is None or self.overlong_buffer_len <= self.max_response_length,
            f"overlong_buffer_len={self.overlong_buffer_len} must be in [0, max_response_length={self.max_response_length}]",
        )
        require(
            self.max_tokens_per_micro_batch is None
            or (isinstance(self.max_tokens_per_micro_batch, int) and self.max_tokens_per_micro_batch >= longest),
            f"max_tokens_per_micro_batch={self.max_tokens_per_micro_batch!r} must hold the longest possible sequence: at least max_prompt_length + max_response_length = {longest} (or None for the default)",
        )
        require(
            self.num_learners <= 1 or self.minibatch_size_prompts % self.num_learners == 0,
            f"num_learners={self.num_learners}: every learner takes whole groups, so minibatch_size_prompts={self.minibatch_size_prompts} (groups per optimizer step) must be a multiple of num_learners",
        )
        require(
            self.env_runner_cls is not None and hasattr(self.env_runner_cls, "evaluate"),
            f"env_runner_cls={self.env_runner_cls} must be a VLLMEnvRunner (subclass)",
        )
        require(
            # (An evaluation config has the evaluation runner count there; it does not train.)
            not self.async_rollout or self.in_evaluation or self.num_env_runners >= 1,
            "async_rollout=True generates in env runner actors while the learner updates in this process: set num_env_runners >= 1 (with 0 the engine would share the driver with the learner and nothing would overlap)",
        )

    # ----- RLlib hooks ---------------------------------------------------------------------
    @override(AlgorithmConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(
            module_class=CausalLMRLModule,
            model_config={
                "model_path": self.policy_model_path,
                "dtype": self.model_dtype,
                "temperature": self.temperature,
                "gradient_checkpointing": self.gradient_checkpointing,
                "attn_implementation": self.learner_attn_implementation,
                "lora": self.lora_settings,
            },
        )

    @override(AlgorithmConfig)
    def get_default_learner_class(self):
        return DAPOTorchLearner if self.deepspeed_config is None else DAPODeepSpeedLearner

    @override(AlgorithmConfig)
    def build_learner_group(self, *, env=None, spaces=None, rl_module_spec=None, placement_group=None):
        """RLlib's LearnerGroup; under DeepSpeed one that reads state from all learners at once."""
        if self.deepspeed_config is None:
            return super().build_learner_group(
                env=env, spaces=spaces, rl_module_spec=rl_module_spec, placement_group=placement_group
            )
        return DeepSpeedLearnerGroup(
            config=self.copy(),
            module_spec=rl_module_spec or self.get_multi_rl_module_spec(env=env, spaces=spaces),
            placement_group=placement_group,
        )

    @override(AlgorithmConfig)
    def build_learner_connector(self, input_observation_space, input_action_space, device=None):
        pipeline = super().build_learner_connector(input_observation_space, input_action_space, device=device)
        pad_token_id = getattr(AutoConfig.from_pretrained(self.policy_model_path), "pad_token_id", None)
        pipeline.append(
            PadTokenBatch(
                pad_token_id=0 if pad_token_id is None else pad_token_id, overlong_filtering=self.overlong_filtering
            )
        )
        pipeline.append(GroupAdvantages(estimator=self.adv_estimator))
        pipeline.append(NumpyToTensor(as_learner_connector=True, device=device))
        if self.recomputes_old_logp:
            pipeline.append(RecomputeOldLogProbs(max_tokens=self.micro_batch_token_budget))
        return pipeline


#: The feature settings `.training()` sets (evaluation's are `.evaluation()`'s).
TRAINING_SETTINGS = (
    ModelSettings,
    SamplerSettings,
    TurnSettings,
    SamplingSettings,
    LearnerSettings,
    LossSettings,
    OverlongSettings,
    RolloutCorrectionSettings,
    WeightSyncSettings,
    LoraSettings,
    DeepSpeedSettings,
    LeagueSettings,
)
TRAINING_SETTING_NAMES = {name for settings in TRAINING_SETTINGS for name in settings.defaults()} | {"async_rollout"}
FEATURE_SETTINGS_ATTRIBUTES = tuple(
    name for name, value in vars(DAPOConfig).items() if isinstance(value, _FeatureSettingsAttribute)
)


LORA_SYNC_LINES = {
    "adapter": "adapter-only weight sync (the vLLM engines serve the base model with the adapter)",
    "merged": "merged weight sync (the weights with the adapters merged in travel to the engines after each step, "
    "as in full fine-tuning, to engines without LoRA)",
}

PENDING_GROUPS = "pending_groups"  # checkpoint key: async_rollout's batch for the next step


class DAPO(Algorithm):
    #: The name Tune and `rllib train` know the algorithm by, and a checkpoint is restored as.
    NAME = "DAPO"
    #: Its settings (a neighbour of DAPO's, `dapo_rllib.algorithm.family`, has its own defaults).
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
        # The policy's directory made ready (the tiny default built) before any runner or learner loads it.
        ensure_policy_model(config.model_settings)
        if config.doctor_at_start:
            check_before_run(config)
        if config.lora_settings is not None:
            # Resolved (and refused with its reason) before any learner or env runner starts.
            logger.info(f"LoRA rank {config.lora_rank}: {LORA_SYNC_LINES[config.lora_sync_path]}")
        with env_runner_groups_built_as(ByValueEnvRunnerGroup):  # env runners that Ray can restart
            super().setup(config)
        self._tensorboard: TensorBoardWriter | None = None
        self._evaluated_before_training = False
        self._num_evaluations = 0  # evaluate() calls so far
        self._pending_groups = None  # async_rollout: the batch generated during the last update
        self._generator = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="dapo-rollout") if config.async_rollout else None
        )
        # Held while the learners update or send weights (see `RunnerFleet`).
        self._learner_lock = threading.Lock()
        self._fleet = RunnerFleet(
            self.env_runner_group, self.eval_env_runner_group, self.learner_group, config, self._learner_lock
        )
        self._league = League.for_config(config, self._fleet)
        self._league.start()  # its first snapshot, before a request's matchup is asked
        # The training data's position lives here, not in the env runners, so that a replaced runner
        # neither restarts nor repeats the epoch: a new order, as the training env's config defines it.
        group = self.env_runner_group
        ((draw_order, groups_per_request),) = on_env_runners(
            group,
            lambda runner: (runner.env.new_draw_order(), runner.groups_per_request()),
            list(group.healthy_worker_ids())[:1],
        )
        self._sampler = GroupSampler(CollectSettings.from_config(config), self._fleet, draw_order, groups_per_request)
        self._role_baselines = RoleBaselines.for_config(config)
        # The curriculum's levels, also the algorithm's (dapo_rllib.tasks.curriculum); None: the env has none.
        self._fleet.curriculum_levels = on_env_runners(
            group, lambda runner: runner.curriculum_levels(), list(group.healthy_worker_ids())[:1]
        )[0]

    @override(Algorithm)
    def step(self) -> dict:
        """RLlib's step, without the evaluation results it repeats from earlier iterations.

        RLlib's metrics keep reporting the last evaluation until the next one; a curve (and the
        "accuracy after training") must only show evaluations made in the iteration reported.
        """
        evaluations, first_iteration = self._num_evaluations, self.iteration == 0
        results = super().step()
        if self._num_evaluations == evaluations:
            results.pop(EVALUATION_RESULTS, None)
        if not first_iteration:
            results.pop(EVAL_BEFORE_TRAINING, None)
        if self._fleet.curriculum_levels is not None:  # the levels the next step trains at
            results[Metrics.CURRICULUM_LEVELS] = dict(self._fleet.curriculum_levels)
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
                groups, stats = self._sampler.collect_with_stats()
                self.metrics.aggregate([stats])
        if cfg.async_rollout:
            # The next batch, sampled during the update with the weights the runners hold now.
            next_batch = self._generator.submit(self._sampler.collect_with_stats)
        self._role_baselines.assign(groups, self.metrics)  # adv_estimator="rae": each episode's baseline

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
        self._league.after_step(self.iteration + 1, groups, self.metrics)  # snapshots follow the step's sync
        count_restored_env_runners(self, self._fleet.pop_restored_count())  # those brought back mid-sampling

    @override(Algorithm)
    def evaluate(self, *args, **kwargs) -> dict:
        """RLlib's evaluation, counted: `step` reports only the evaluations of its own iteration."""
        results = super().evaluate(*args, **kwargs)
        self._num_evaluations += 1
        if self._fleet.curriculum_levels is not None:
            self._advance_curriculum(results)  # {data source: metrics} of this validation
        return results

    # ----- the curriculum (dapo_rllib.tasks.curriculum) ---------------------------------------
    def _advance_curriculum(self, validation: dict[str, Any]) -> None:
        """The levels after a validation, set in every env runner where they changed."""
        avg = f"{Metrics.AVG_AT}{self.config.eval_num_samples}"
        accuracy = {source: m[avg] for source, m in validation.items() if isinstance(m, dict) and avg in m}
        levels = self._fleet.curriculum_levels
        group = self.env_runner_group
        new = on_env_runners(
            group,
            lambda runner: runner.next_curriculum_levels(levels, accuracy),
            list(group.healthy_worker_ids())[:1],
        )[0]
        for source in sorted(s for s in new if new[s] != levels[s]):
            logger.info(
                f"[DAPO] curriculum: {source} level {levels[source]} -> {new[source]} "
                f"(held-out {avg} {accuracy[source]:.3f})"
            )
        if new != levels:
            self._set_curriculum_levels(new)

    def _set_curriculum_levels(self, levels: dict[str, int]) -> None:
        self._fleet.curriculum_levels = dict(levels)
        for group in filter(None, (self.env_runner_group, self.eval_env_runner_group)):
            on_env_runners(group, lambda runner: runner.set_curriculum_levels(levels))

    def _evaluate_before_training(self) -> None:
        logger.info("[DAPO] evaluating before the first training step ...")
        results = heldout_results(self.config.evaluation_settings, self.eval_env_runner_group or self.env_runner_group)
        self.metrics.aggregate([as_stats(results)], key=EVAL_BEFORE_TRAINING)
        self._evaluated_before_training = True

    # ----- the env runners (see dapo_rllib.algorithm.runner_fleet) ------------------------------
    @override(Algorithm)
    def restore_env_runners(self, env_runner_group) -> list[int]:
        """RLlib's hook before each training step: every env runner in service, with the learner's
        current weights, before the step samples (`RunnerFleet.restore`)."""
        restored = self._fleet.restore(env_runner_group)
        count_restored_env_runners(self, self._fleet.pop_restored_count())
        return restored

    def sync_weights_to_env_runners(self, env_runner_ids: list[int] | None = None, *, group=None) -> int:
        """The learner's weights into the env runners' engines (`RunnerFleet.sync_weights`); returns the
        number of buckets sent."""
        return self._fleet.sync_weights(env_runner_ids, group=group)

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
        component = f"{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}/{DEFAULT_MODULE_ID}"
        state = self.learner_group.get_state(components=component)[COMPONENT_LEARNER][COMPONENT_RL_MODULE][
            DEFAULT_MODULE_ID
        ]
        return str(export_hf_model(state, self.config.policy_model_path, out_dir, self.config.model_dtype))

    # ----- state -----------------------------------------------------------------------------
    @override(Algorithm)
    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        state |= self._sampler.get_state() | self._role_baselines.get_state() | self._league.get_state()
        if self._fleet.curriculum_levels is not None:
            state[Metrics.CURRICULUM_LEVELS] = self._fleet.curriculum_levels
        if self._pending_groups is not None:
            # async_rollout: sampled with the previous weights, which a resumed run no longer has.
            state[PENDING_GROUPS] = self._pending_groups
        return state

    @override(Algorithm)
    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._pending_groups = state.get(PENDING_GROUPS)
        self._sampler.set_state(state)
        self._role_baselines.set_state(state)
        self._league.set_state(state)
        if Metrics.CURRICULUM_LEVELS in state:
            self._set_curriculum_levels(state[Metrics.CURRICULUM_LEVELS])
        if COMPONENT_LEARNER_GROUP in state:
            self.sync_weights_to_env_runners()

    @override(Algorithm)
    def restore_from_path(self, path, *args, **kwargs) -> None:
        if "component" not in kwargs:
            refuse_another_algorithms_checkpoint(path, type(self))
        super().restore_from_path(path, *args, **kwargs)
        self.sync_weights_to_env_runners()


def learner_data(groups: list[Group], num_learners: int, cfg: DAPOConfig) -> dict[str, Any]:
    """`LearnerGroup.update` arguments that give each learner whole groups.

    RLlib's own episode sharding balances by length and splits groups, which would change their
    advantages; object refs are dealt out contiguously, one shard per learner. Each learner's
    mini-batch is its share of `minibatch_size_prompts` groups, and all run the same number of
    mini-batches (their gradient sums must meet once per optimizer step).
    """
    if num_learners == 1:
        episodes = [ep for group in groups for ep in group.episodes]
        return {"episodes": episodes, "minibatch_size": min(cfg.minibatch_size_sequences, len(episodes))}
    if len(groups) % num_learners:
        raise ValueError(f"{len(groups)} groups cannot be shared whole by num_learners={num_learners}")
    per_learner = len(groups) // num_learners
    shards = [
        [ep for group in groups[i * per_learner : (i + 1) * per_learner] for ep in group.episodes]
        for i in range(num_learners)
    ]
    minibatch_prompts = min(cfg.minibatch_size_prompts, len(groups)) // num_learners
    return {
        "episodes_refs": [ray.put(shard) for shard in shards],
        "minibatch_size": minibatch_prompts * cfg.group_size,
        "num_total_minibatches": -(-per_learner // minibatch_prompts) * cfg.num_epochs,
    }
