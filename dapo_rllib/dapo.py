"""DAPOConfig and DAPO: the algorithm on RLlib's new API stack.

`DAPO.training_step` reads as the recipe (DAPO.md §2):

    dynamic sampling   generation rounds on the vLLM env runners until enough informative groups
    update             learner_group.update: connector (advantages, masks, old log-probs) → loss
    weight sync        learner weights → every env runner's running vLLM engine, in buckets

With `async_rollout` the env runners generate the next step's batch during the update.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np
import ray
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.connectors.common.numpy_to_tensor import NumpyToTensor
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger
from ray.tune.utils import flatten_dict
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    EVALUATION_RESULTS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED,
    NUM_EPISODES,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)

from dapo_rllib import core_algos, eval_metrics
from dapo_rllib.columns import Extras, Metrics
from dapo_rllib.connectors import GroupAdvantages, PadTokenBatch, RecomputeOldLogProbs, episode_value
from dapo_rllib.tensorboard import EVAL_BEFORE_TRAINING, TensorBoardWriter
from envs.problem_env import DrawOrder

FILTER_METRICS = {"acc": Extras.ACC, "score": Extras.SCORE}
# Tries of a generation round's share before a failing env runner stops the run: a runner that
# raises dies and comes back (RLlib), so a share that kills every runner would loop for ever.
SAMPLE_ATTEMPTS = 3
DRAW_ORDER = "draw_order"  # checkpoint key: the training data's position and the next group id
PENDING_GROUPS = "pending_groups"  # checkpoint key: async_rollout's batch for the next step
WEIGHT_TRANSPORT = "object_store"  # see dapo_rllib.weight_sync
PROBLEM_SOURCE_KEYS = ("dataset", "split", "num_problems")  # env config keys that eval_dataset replaces
DATA_FILE_SUFFIXES = (".parquet", ".jsonl")  # an eval_dataset with these names a file; others a built-in set


class DAPOConfig(AlgorithmConfig):
    """Configuration of DAPO. Defaults are the reference Qwen2.5-32B run (DAPO.md §5).

    Example:
        config = (
            DAPOConfig()
            .environment("dapo_math", env_config={"dataset": "data/dapo-math-17k.parquet"})
            .training(model_path="/models/Qwen2.5-32B", group_size=16)
        )
        algo = config.build_algo()
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or DAPO)
        from dapo_rllib.env_runner import VLLMEnvRunner

        self.env = "dapo_math"
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

        # Model and sampler.
        self.model_path = None
        self.model_dtype = "float32"
        self.vllm_engine_kwargs = {}
        self.max_prompt_length = 2048
        self.max_response_length = 20480
        self.temperature = 1.0
        self.top_p = 1.0
        # Validation (see .evaluation()).
        self.eval_dataset = None
        self.eval_num_samples = 32
        self.eval_max_problems = None
        self.eval_temperature = 1.0
        self.eval_top_p = 0.7
        self.val_before_train = True
        # Reporting.
        self.tensorboard_dir = None
        # Batches and dynamic sampling.
        self.group_size = 16
        self.train_batch_size_prompts = 512
        self.gen_batch_size_prompts = 1536
        self.max_num_gen_batches = 10
        self.dynamic_sampling = True
        self.filter_metric = "acc"
        self.train_on_partial_batch = False
        self.minibatch_size_prompts = 32
        self.max_tokens_per_micro_batch = None
        self.gradient_checkpointing = False
        self.deepspeed_config = None
        # Rollout side: weight sync, mismatch correction, overlap.
        self.weight_sync_bucket_mb = 512
        self.rollout_correction = None
        self.rollout_is_cap = 2.0
        self.async_rollout = False
        # Loss (names in core_algos' registries).
        self.policy_loss = "ppo_clip"
        self.adv_estimator = "grpo"
        self.clip_eps_low = 0.2
        self.clip_eps_high = 0.28
        self.clip_ratio_c = 10.0
        self.loss_agg_mode = "token-mean"
        self.kl_coef = 0.0
        self.kl_penalty = "low_var_kl"
        # Overlong reward shaping.
        self.overlong_filtering = False
        self.overlong_buffer_len = 4096
        self.overlong_penalty_factor = 1.0
        # Optimizer.
        self.lr_warmup_steps = 10
        self.weight_decay = 0.1

    def training(
        self,
        *,
        model_path: str | None = NotProvided,
        model_dtype: str = NotProvided,
        vllm_engine_kwargs: dict = NotProvided,
        max_prompt_length: int = NotProvided,
        max_response_length: int = NotProvided,
        temperature: float = NotProvided,
        top_p: float = NotProvided,
        group_size: int = NotProvided,
        train_batch_size_prompts: int = NotProvided,
        gen_batch_size_prompts: int = NotProvided,
        max_num_gen_batches: int = NotProvided,
        dynamic_sampling: bool = NotProvided,
        filter_metric: str = NotProvided,
        train_on_partial_batch: bool = NotProvided,
        minibatch_size_prompts: int = NotProvided,
        max_tokens_per_micro_batch: int | None = NotProvided,
        gradient_checkpointing: bool = NotProvided,
        deepspeed_config: dict | str | None = NotProvided,
        weight_sync_bucket_mb: float = NotProvided,
        rollout_correction: str | None = NotProvided,
        rollout_is_cap: float = NotProvided,
        async_rollout: bool = NotProvided,
        policy_loss: str = NotProvided,
        adv_estimator: str = NotProvided,
        clip_eps_low: float = NotProvided,
        clip_eps_high: float = NotProvided,
        clip_ratio_c: float | None = NotProvided,
        loss_agg_mode: str = NotProvided,
        kl_coef: float = NotProvided,
        kl_penalty: str = NotProvided,
        overlong_filtering: bool = NotProvided,
        overlong_buffer_len: int = NotProvided,
        overlong_penalty_factor: float = NotProvided,
        lr_warmup_steps: int = NotProvided,
        weight_decay: float = NotProvided,
        **kwargs,
    ) -> "DAPOConfig":
        """Sets DAPO's training settings; other keywords (lr, grad_clip, ...) go to RLlib.

        Args:
            model_path: Local Hugging Face model directory (e.g. a Qwen2.5 checkpoint). None:
                the built-in tiny arithmetic model, built on first use.
            model_dtype: "float32", "bfloat16" or "float16", for the learner and vLLM.
            vllm_engine_kwargs: Extra `vllm.LLM(...)` arguments (tensor_parallel_size,
                gpu_memory_utilization, ...); they override the runner's defaults.
            max_prompt_length: Prompt tokens; longer prompts are left-truncated and counted
                (`prompts_left_truncated`). Reference 2048.
            max_response_length: L_max, generation limit in tokens. Reference 20480.
            temperature, top_p: Rollout sampling. Reference 1.0, 1.0.
            group_size: G, completions sampled per prompt. Reference 16.
            train_batch_size_prompts: Prompts (groups) per training step. Reference 512.
            gen_batch_size_prompts: Prompts per generation round. Reference 1536.
            max_num_gen_batches: Generation rounds allowed per step before dynamic sampling
                gives up. Reference 10.
            dynamic_sampling: Keep only groups whose `filter_metric` varies (DAPO §2.2).
                Off: one round of `train_batch_size_prompts` prompts, every group kept.
            filter_metric: "acc" (correctness, reference) or "score" (reward incl. shaping).
            train_on_partial_batch: When the round cap is hit, train on the groups collected
                (trimmed to whole mini-batches) instead of raising.
            minibatch_size_prompts: Prompts per optimizer step. Reference 32 (16 optimizer
                steps per training step at 512 prompts).
            max_tokens_per_micro_batch: Token budget of one forward pass of the learner
                (prompt + response tokens, padding included). Each mini-batch is sorted by
                length and cut into micro-batches within it; gradients accumulate to one
                optimizer step per mini-batch, and the loss is exactly that of the mini-batch
                in one piece. Memory only: no effect on results. None: 16,384 or two of the
                longest possible sequences (max_prompt_length + max_response_length),
                whichever is larger. The old log-prob recomputation uses the same budget.
            gradient_checkpointing: Recompute each decoder layer's activations in the
                backward pass instead of keeping them (Hugging Face gradient checkpointing):
                less memory, about a third more learner compute.
            deepspeed_config: Run the learner under DeepSpeed ZeRO (stage 2 or 3, optional
                optimizer offload): a DeepSpeed config dict or the path of a JSON file. Batch
                sizes, clipping and the optimizer stay DAPO's settings and must not be set
                there. None: plain PyTorch (DDP with several learners).
            weight_sync_bucket_mb: Size of the buckets in which the learner's weights stream
                to the vLLM engines after each step (`dapo_rllib.weight_sync`): memory the
                sync adds is about one bucket on each side. A parameter larger than a bucket
                travels in row slices and is joined on arrival (vLLM loads parameters whole).
                Default 512.
            rollout_correction: "tis": weight each token's policy-gradient term by the
                truncated importance ratio min(pi_old / pi_rollout, rollout_is_cap) of the
                learner's old log-prob to vLLM's (SCALE.md §4); corrects the rollout/learner
                mismatch and, with async_rollout, the one step of staleness. None: off.
                Either way `rollout_logp_abs_diff` (mean and max) is reported.
            rollout_is_cap: C of the truncated importance weight (>= 1). Default 2.0.
            async_rollout: Generate the next batch with the current weights while the
                learner updates on this one (one-step off-policy, as verl's recipe): each
                batch is one update stale; a step takes about max(generation, update) instead
                of their sum. Needs env runner actors (num_env_runners >= 1).
            policy_loss: Policy loss, by name in `core_algos`' registry: "ppo_clip" (PPO's
                clipped ratio with the decoupled bounds below; DAPO, GRPO), a name
                registered with `core_algos.register_policy_loss`, or "module:function".
            adv_estimator: Advantage estimator, by name in `core_algos`' registry: "grpo"
                (group-normalised: GRPO, DAPO), "dr_grpo" (group-centred only: Dr. GRPO), a
                name registered with `core_algos.register_adv_estimator`, or "module:function".
            clip_eps_low, clip_eps_high: Decoupled clip range (Clip-Higher). Reference
                0.2 and 0.28.
            clip_ratio_c: Dual-clip bound for negative advantages (> 1), None = off.
                Reference 10.
            loss_agg_mode: "token-mean" (DAPO), "seq-mean-token-mean" (GRPO),
                "seq-mean-token-sum", "seq-mean-token-sum-norm" (Dr. GRPO).
            kl_coef: Weight of a KL penalty to the initial policy. DAPO: 0 (no reference
                model is kept).
            kl_penalty: KL estimator, "low_var_kl" (k3), "kl", "abs" or "mse".
            overlong_filtering: Mask the loss of truncated responses (DAPO §2.4).
            overlong_buffer_len: L_cache of the soft overlong punishment; 0 turns it off.
                Reference 4096.
            overlong_penalty_factor: Scale of the soft overlong punishment. Reference 1.0.
            lr_warmup_steps: Linear warmup length in training steps, constant after.
                Reference script 10 (paper 20).
            weight_decay: AdamW weight decay. Reference 0.1.
        """
        self._set_provided(locals())
        super().training(**kwargs)
        return self

    def evaluation(
        self,
        *,
        eval_dataset: str | None = NotProvided,
        eval_num_samples: int = NotProvided,
        eval_max_problems: int | None = NotProvided,
        eval_temperature: float = NotProvided,
        eval_top_p: float = NotProvided,
        val_before_train: bool = NotProvided,
        **kwargs,
    ) -> "DAPOConfig":
        """RLlib's evaluation settings (evaluation_interval: every how many training iterations),
        plus how DAPO validates: n samples per problem, reported per data source as avg@n,
        pass@k, maj@n, response length and truncation ratio (see `dapo_rllib.eval_metrics`).

        Args:
            eval_dataset: The validation problems: a .parquet/.jsonl file in the env's row format
                (e.g. the AIME 2024 file) or a built-in set ("arithmetic" for the math env,
                "generated" for the code env; their held-out test split). It replaces the
                problem source of the env config ("dataset", "split", "num_problems"); the
                env's other settings (scorer, scoring timeout) carry over. None: the env of
                `evaluation_config`, by default the training env's "test" split.
            eval_num_samples: n, samples per problem (avg@n). Reference 32.
            eval_max_problems: Validate on the first this-many problems only (None: all).
            eval_temperature, eval_top_p: Validation sampling. Reference 1.0, 0.7.
            val_before_train: Validate once before the first training step (reported as
                `evaluation_before_training` in the first result, at step 0 in TensorBoard).
                Skipped when resuming from a checkpoint.
        """
        self._set_provided(locals())
        super().evaluation(**kwargs)
        return self

    def _set_provided(self, arguments: dict) -> None:
        """Set the keyword arguments of a settings method that the caller provided."""
        for name, value in arguments.items():
            if name not in ("self", "kwargs", "__class__") and value is not NotProvided:
                setattr(self, name, value)

    def evaluation_env_config(self) -> dict:
        """The env config the validation environment is built with."""
        base = self if self.in_evaluation else self.get_evaluation_config_object()
        env_config = dict(base.env_config)
        if self.eval_dataset is not None:
            # "split" matters to the arithmetic generator only: its held-out half.
            env_config = {k: v for k, v in env_config.items() if k not in PROBLEM_SOURCE_KEYS} | {"dataset": self.eval_dataset, "split": "test"}
        return env_config

    def reporting(self, *, tensorboard_dir: str | None = NotProvided, **kwargs) -> "DAPOConfig":
        """RLlib's reporting settings, plus where DAPO writes its TensorBoard event files.

        Args:
            tensorboard_dir: Directory for DAPO's TensorBoard event files when the algorithm
                runs in process (see `dapo_rllib.tensorboard`). None: none written; under Ray
                Tune, `dapo_rllib.tensorboard.TensorBoardCallback` writes them instead.
        """
        super().reporting(**kwargs)
        if tensorboard_dir is not NotProvided:
            self.tensorboard_dir = tensorboard_dir
        return self

    # ----- RLlib hooks ---------------------------------------------------------------------
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from dapo_rllib.rl_module import CausalLMRLModule

        return RLModuleSpec(
            module_class=CausalLMRLModule,
            model_config={"model_path": self.model_path, "dtype": self.model_dtype, "temperature": self.temperature, "gradient_checkpointing": self.gradient_checkpointing},
        )

    def get_default_learner_class(self):
        if self.deepspeed_config is not None:
            from dapo_rllib.deepspeed_learner import DAPODeepSpeedLearner

            return DAPODeepSpeedLearner
        from dapo_rllib.learner import DAPOTorchLearner

        return DAPOTorchLearner

    def build_learner_group(self, *, env=None, spaces=None, rl_module_spec=None, placement_group=None):
        """RLlib's LearnerGroup; under DeepSpeed one that reads state from all learners at once."""
        if self.deepspeed_config is None:
            return super().build_learner_group(env=env, spaces=spaces, rl_module_spec=rl_module_spec, placement_group=placement_group)
        from dapo_rllib.deepspeed_learner import DeepSpeedLearnerGroup

        return DeepSpeedLearnerGroup(
            config=self.copy(),
            module_spec=rl_module_spec or self.get_multi_rl_module_spec(env=env, spaces=spaces),
            placement_group=placement_group,
        )


    def build_learner_connector(self, input_observation_space, input_action_space, device=None):
        from transformers import AutoConfig

        pipeline = super().build_learner_connector(input_observation_space, input_action_space, device=device)
        model_config = AutoConfig.from_pretrained(self.model_path)
        pad_token_id = getattr(model_config, "pad_token_id", None)
        pipeline.append(PadTokenBatch(pad_token_id=0 if pad_token_id is None else pad_token_id, overlong_filtering=self.overlong_filtering))
        pipeline.append(GroupAdvantages(estimator=self.adv_estimator))
        pipeline.append(NumpyToTensor(as_learner_connector=True, device=device))
        if self.recomputes_old_logp:
            pipeline.append(RecomputeOldLogProbs(max_tokens=self.micro_batch_token_budget))
        return pipeline

    @property
    def minibatch_size_sequences(self) -> int:
        return self.minibatch_size_prompts * self.group_size

    @property
    def micro_batch_token_budget(self) -> int:
        """`max_tokens_per_micro_batch`, or its default."""
        if self.max_tokens_per_micro_batch is not None:
            return self.max_tokens_per_micro_batch
        return max(16384, 2 * (self.max_prompt_length + self.max_response_length))

    @property
    def weight_sync_bucket_bytes(self) -> int:
        return int(self.weight_sync_bucket_mb * 2**20)

    @property
    def recomputes_old_logp(self) -> bool:
        """False when every batch gets exactly one optimizer step: the old log-probs are then the
        current ones, and the learner takes them from its own forward pass (ratio 1)."""
        return self.num_epochs > 1 or self.minibatch_size_prompts < self.train_batch_size_prompts

    def validate(self) -> None:
        super().validate()
        from dapo_rllib.tiny_model import ensure_tiny_model

        if self.model_path is None:
            # The documented default: the built-in tiny model (built once, then cached).
            self.model_path = str(ensure_tiny_model())
        self._validate_dapo_settings()
        # A vLLM engine per process is expensive: with remote env runners, the driver needs none.
        if self.num_env_runners > 0:
            self.create_local_env_runner = False

    def _validate_dapo_settings(self) -> None:
        from pathlib import Path

        def need(ok: bool, message: str) -> None:
            # AlgorithmConfig's private `_value_error`, as RLlib's own configs use it: it honours
            # `experimental(_validate_config=False)`, which a plain raise would not.
            if not ok:
                self._value_error(message)

        need((Path(self.model_path) / "config.json").is_file(), f"model_path={self.model_path!r} is not a Hugging Face model directory (no config.json)")
        for setting, lookup in (("policy_loss", core_algos.policy_loss_fn), ("adv_estimator", core_algos.adv_estimator_fn)):
            try:
                lookup(getattr(self, setting))
            except (ValueError, ImportError, AttributeError) as error:
                self._value_error(f"{setting}={getattr(self, setting)!r}: {error}")
        need(self.loss_agg_mode in core_algos.LOSS_AGG_MODES, f"loss_agg_mode={self.loss_agg_mode!r}; expected one of {core_algos.LOSS_AGG_MODES}")
        need(0 <= self.clip_eps_low < 1, f"clip_eps_low={self.clip_eps_low} must be in [0, 1)")
        need(self.clip_eps_high >= 0, f"clip_eps_high={self.clip_eps_high} must be >= 0")
        need(self.clip_ratio_c is None or self.clip_ratio_c > 1, f"clip_ratio_c={self.clip_ratio_c} must be > 1 (or None to turn dual clip off)")
        need(self.group_size >= 2, f"group_size={self.group_size} must be >= 2: a group of one has zero advantage")
        for name in ("train_batch_size_prompts", "gen_batch_size_prompts", "max_num_gen_batches", "minibatch_size_prompts", "max_prompt_length", "max_response_length", "eval_num_samples"):
            need(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, f"{name}={getattr(self, name)!r} must be a positive integer")
        need(self.train_batch_size_prompts % self.minibatch_size_prompts == 0, f"train_batch_size_prompts={self.train_batch_size_prompts} must be a multiple of minibatch_size_prompts={self.minibatch_size_prompts}")
        need(self.filter_metric in FILTER_METRICS, f"filter_metric={self.filter_metric!r}; expected one of {sorted(FILTER_METRICS)}")
        need(0 <= self.overlong_buffer_len <= self.max_response_length, f"overlong_buffer_len={self.overlong_buffer_len} must be in [0, max_response_length={self.max_response_length}]")
        need(self.overlong_penalty_factor >= 0, f"overlong_penalty_factor={self.overlong_penalty_factor} must be >= 0")
        need(self.kl_coef >= 0, f"kl_coef={self.kl_coef} must be >= 0")
        need(self.kl_penalty in core_algos.KL_PENALTY_KINDS, f"kl_penalty={self.kl_penalty!r}; expected one of {core_algos.KL_PENALTY_KINDS}")
        need(self.temperature > 0, f"temperature={self.temperature} must be > 0 (log-probs are of softmax(logits / temperature))")
        need(self.eval_max_problems is None or (isinstance(self.eval_max_problems, int) and self.eval_max_problems >= 1), f"eval_max_problems={self.eval_max_problems!r} must be a positive integer or None (all problems)")
        need(
            self.eval_dataset is None or Path(self.eval_dataset).suffix not in DATA_FILE_SUFFIXES or Path(self.eval_dataset).is_file(),
            f"eval_dataset={self.eval_dataset!r}: no such file",
        )
        need(self.eval_temperature >= 0, f"eval_temperature={self.eval_temperature} must be >= 0")
        need(0 < self.top_p <= 1 and 0 < self.eval_top_p <= 1, f"top_p={self.top_p} and eval_top_p={self.eval_top_p} must be in (0, 1]")
        need(self.lr_warmup_steps >= 0 and self.weight_decay >= 0, f"lr_warmup_steps={self.lr_warmup_steps} and weight_decay={self.weight_decay} must be >= 0")
        need(self.model_dtype in ("float32", "bfloat16", "float16"), f"model_dtype={self.model_dtype!r}; expected float32, bfloat16 or float16")
        need(
            self.max_tokens_per_micro_batch is None or (isinstance(self.max_tokens_per_micro_batch, int) and self.max_tokens_per_micro_batch >= self.max_prompt_length + self.max_response_length),
            f"max_tokens_per_micro_batch={self.max_tokens_per_micro_batch!r} must hold the longest possible sequence: at least max_prompt_length + max_response_length = {self.max_prompt_length + self.max_response_length} (or None for the default)",
        )
        need(
            self.num_learners <= 1 or self.minibatch_size_prompts % self.num_learners == 0,
            f"num_learners={self.num_learners}: every learner takes whole groups, so minibatch_size_prompts={self.minibatch_size_prompts} (groups per optimizer step) must be a multiple of num_learners",
        )
        if self.deepspeed_config is not None:
            from dapo_rllib.deepspeed_learner import engine_config, load_deepspeed_config

            try:
                engine_config(load_deepspeed_config(self.deepspeed_config), grad_clip=self.grad_clip, model_dtype=self.model_dtype)
            except (ValueError, OSError) as error:
                self._value_error(f"deepspeed_config={self.deepspeed_config!r}: {error}")
            need(self.grad_clip_by == "global_norm", f"grad_clip_by={self.grad_clip_by!r}: under DeepSpeed gradients are clipped by their global norm only")
        need(self.env_runner_cls is not None and hasattr(self.env_runner_cls, "evaluate"), f"env_runner_cls={self.env_runner_cls} must be a VLLMEnvRunner (subclass)")
        need(isinstance(self.weight_sync_bucket_mb, (int, float)) and self.weight_sync_bucket_mb > 0, f"weight_sync_bucket_mb={self.weight_sync_bucket_mb!r} must be a positive number of MB")
        need(self.rollout_correction in core_algos.ROLLOUT_CORRECTIONS, f"rollout_correction={self.rollout_correction!r}; expected one of {core_algos.ROLLOUT_CORRECTIONS}")
        need(isinstance(self.rollout_is_cap, (int, float)) and self.rollout_is_cap >= 1, f"rollout_is_cap={self.rollout_is_cap!r} must be >= 1 (an importance weight cap)")
        need(
            # (An evaluation config has the evaluation runner count there; it does not train.)
            not self.async_rollout or self.in_evaluation or self.num_env_runners >= 1,
            "async_rollout=True generates in env runner actors while the learner updates in this process: set num_env_runners >= 1 (with 0 the engine would share the driver with the learner and nothing would overlap)",
        )


class DAPO(Algorithm):
    @classmethod
    def get_default_config(cls) -> DAPOConfig:
        return DAPOConfig()

    @classmethod
    def _should_create_evaluation_env_runners(cls, eval_config) -> bool:
        # Without dedicated evaluation runners (evaluation_num_env_runners=0) DAPO evaluates on
        # the training runners' engines instead of starting another vLLM engine in the driver.
        return eval_config.evaluation_num_env_runners > 0

    def setup(self, config) -> None:
        super().setup(config)
        self._tensorboard: TensorBoardWriter | None = None
        self._evaluated_before_training = False
        self.num_evaluations = 0  # calls of the evaluation function so far
        self._pending_groups = None  # async_rollout: the batch generated during the last update
        self._generator = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dapo-rollout") if config.async_rollout else None
        # Held while the learners update or send weights: async_rollout's generation thread may
        # have to bring a restarted env runner up to date in the middle of an update.
        self._learner_lock = threading.Lock()
        # The training data's position lives here, not in the env runners, so that a replaced
        # runner neither restarts nor repeats the epoch: the order starts as the env's own.
        group = self.env_runner_group
        initial = on_env_runners(group, lambda runner: runner.env.get_state(), list(group.healthy_worker_ids())[:1])[0]
        self._draw_order = DrawOrder.from_state(initial)
        self._next_group_id = 0
        # RLlib's EnvRunnerGroup.sync_weights (run by evaluate() and for restarted env runners)
        # copies the whole state through the driver; DAPO's engines take the streamed sync.
        for group in (self.env_runner_group, self.eval_env_runner_group):
            if group is not None:
                group.sync_weights = partial(self._sync_weights_for_rllib, group)

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

    def training_step(self) -> None:
        cfg = self.config
        if cfg.val_before_train and self.iteration == 0 and not self._evaluated_before_training:
            self._evaluate_before_training()
        # RLlib's timers, per step (window 1) rather than smoothed: DAPO's steps differ a lot.
        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER), reduce="mean", window=1):
            if not cfg.async_rollout:
                groups = self._collect_groups(self.metrics)
            elif self._pending_groups is not None:
                groups, self._pending_groups = self._pending_groups, None
            else:  # the first step of an async run
                groups, stats = self._collect_groups_apart()
                self.metrics.aggregate([stats])
        if cfg.async_rollout:
            # The next batch, sampled during the update with the weights the runners hold now.
            next_batch = self._generator.submit(self._collect_groups_apart)

        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER), reduce="mean", window=1), self._learner_lock:
            results = self.learner_group.update(
                **learner_data(groups, 1 if self.learner_group.is_local else len(self.learner_group), cfg),
                timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0)},
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
        results = heldout_results(self, self.eval_env_runner_group or self.env_runner_group)
        self.metrics.aggregate([_as_stats(results)], key=EVAL_BEFORE_TRAINING)
        self._evaluated_before_training = True

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
        state = self.learner_group.get_state(components=component)[COMPONENT_LEARNER][COMPONENT_RL_MODULE][DEFAULT_MODULE_ID]
        return str(export_hf_model(state, self.config.model_path, out_dir, self.config.model_dtype))

    def sync_weights_to_env_runners(self, env_runner_ids: list[int] | None = None) -> int:
        """Stream the learner's weights into every vLLM engine (or those of the training env
        runners `env_runner_ids`) and return once all hold them: DAPO is on-policy, the next
        generation round must use the new weights.

        Bucket by bucket (`dapo_rllib.weight_sync`): learner rank 0 sends one (all learners
        gather it under ZeRO-3) while the engines load the one before, so at most two buckets
        are in flight; a bucket is freed as soon as every engine has it. Returns the number of buckets.
        """
        with self._learner_lock:
            return self._sync_weights(env_runner_ids)

    def _sync_weights(self, env_runner_ids: list[int] | None) -> int:
        bucket_bytes = self.config.weight_sync_bucket_bytes
        plan, seq_no = self._on_learners(lambda learner: learner.weight_sync_plan(bucket_bytes))[0]
        if env_runner_ids is None:
            targets = [(group, None) for group in (self.env_runner_group, self.eval_env_runner_group) if group is not None]
        else:
            targets = [(self.env_runner_group, env_runner_ids)]
        for group, ids in targets:
            on_env_runners(group, lambda runner: runner.begin_weight_update(), ids)

        def load_everywhere(handle) -> None:
            for group, ids in targets:
                on_env_runners(group, lambda runner: runner.load_weight_bucket(handle, WEIGHT_TRANSPORT), ids)

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dapo-weight-load") as loader:
            loading = None
            for bucket in plan:
                (handle,) = [h for h in self._on_learners(lambda learner, b=bucket: learner.send_weight_bucket(b, WEIGHT_TRANSPORT)) if h is not None]
                if loading is not None:
                    loading.result()
                # The bucket leaves the object store once the engines have it (nothing else holds it).
                loading, handle = loader.submit(load_everywhere, handle), None
            if loading is not None:
                loading.result()
        for group, ids in targets:
            on_env_runners(group, lambda runner: runner.finish_weight_update(seq_no), ids)
        return len(plan)

    def _sync_weights_for_rllib(self, group, *args, to_worker_indices=None, **kwargs) -> None:
        """Stands in for `group.sync_weights` (see setup). DAPO syncs after every update and
        every restore, so only env runners named by RLlib (restarted ones) need weights."""
        if to_worker_indices and group is self.env_runner_group:
            self.sync_weights_to_env_runners(list(to_worker_indices))

    def _on_learners(self, func) -> list:
        """`func(learner)` on every learner (in this process or remote), in learner order."""
        return self.learner_group._get_results(self.learner_group.foreach_learner(func))

    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        state[DRAW_ORDER] = {"order": self._draw_order.get_state(), "next_group_id": self._next_group_id}
        if self._pending_groups is not None:
            # async_rollout: sampled with the previous weights, which a resumed run no longer has.
            state[PENDING_GROUPS] = self._pending_groups
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._pending_groups = state.get(PENDING_GROUPS)
        if DRAW_ORDER in state:
            order = DrawOrder.from_state(state[DRAW_ORDER]["order"])
            if order.num_problems != self._draw_order.num_problems:
                raise ValueError(
                    f"the checkpoint's training data has {order.num_problems} problems, this run's env has "
                    f"{self._draw_order.num_problems}: resume with the dataset it was trained on"
                )
            self._draw_order, self._next_group_id = order, state[DRAW_ORDER]["next_group_id"]
        if COMPONENT_LEARNER_GROUP in state:
            self.sync_weights_to_env_runners()

    def restore_from_path(self, path, *args, **kwargs) -> None:
        super().restore_from_path(path, *args, **kwargs)
        self.sync_weights_to_env_runners()

    # ----- fault tolerance -----------------------------------------------------------------
    def restore_env_runners(self, env_runner_group) -> list[int]:
        """RLlib's hook before each training step: bring restarted env runners back into
        service, with the learner's current weights streamed in before they sample. (RLlib's own
        would copy the whole state through the driver; the draw order needs no restoring.)"""
        if env_runner_group is not self.env_runner_group:
            return super().restore_env_runners(env_runner_group)
        restored = env_runner_group.probe_unhealthy_env_runners()
        if restored:
            self._counters["total_num_restored_workers"] += len(restored)
            self.sync_weights_to_env_runners(restored)
            print(f"[DAPO] env runner(s) {sorted(restored)} restarted and given the current weights", flush=True)
        return restored

    def _healthy_env_runner_ids(self) -> list[int]:
        """The remote env runners in service; when none is, waits for RLlib to restart one
        (up to `env_runner_restore_timeout_s`)."""
        group = self.env_runner_group
        deadline = time.monotonic() + self.config.env_runner_restore_timeout_s
        while not (ids := list(group.healthy_worker_ids())):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no env runner came back within env_runner_restore_timeout_s={self.config.env_runner_restore_timeout_s}")
            print("[DAPO] waiting for a restarted env runner ...", flush=True)
            self.restore_env_runners(group)
        return ids

    # ----- dynamic sampling ----------------------------------------------------------------
    def _sample_round(self, num_prompts: int, metrics: MetricsLogger) -> list:
        """One generation round: the next `num_prompts` problems of the draw order, spread
        over the env runners in service."""
        group = self.env_runner_group
        first = self._next_group_id
        self._next_group_id += num_prompts
        requests = list(zip(self._draw_order.take(num_prompts), range(first, first + num_prompts)))
        if group.num_remote_env_runners() == 0:
            out = group.foreach_env_runner(partial(_sample_and_report, requests=requests), local_env_runner=True)
        else:
            out = self._sample_remote(requests, metrics)
        metrics.aggregate([m for _, m, _ in out], key=ENV_RUNNER_RESULTS)
        # Runners generate in parallel: a round takes as long as its slowest runner.
        for key in (Metrics.GENERATION_S, Metrics.SCORING_S):
            metrics.log_value((TIMERS, key), max(timing[key] for _, _, timing in out), reduce="sum")
        metrics.log_value((Metrics.ROLLOUT, Metrics.GENERATED_TOKENS), sum(timing[Metrics.GENERATED_TOKENS] for _, _, timing in out), reduce="sum")
        return [ep for episodes, _, _ in out for ep in episodes]

    def _sample_remote(self, requests: list[tuple[int, int]], metrics: MetricsLogger) -> list:
        """`(episodes, metrics, timing)` of the remote env runners for `requests`, each request
        answered exactly once.

        A runner that dies mid-round takes nothing with it: its share (the same problems and
        group ids, so the same seeds) is sampled again on the runners in service, and a dead
        runner rejoins only through `restore_env_runners`, with the current weights. Without
        `restart_failed_env_runners` a dead runner stops the run, named."""
        group = self.env_runner_group
        out, attempts = [], 0
        while True:
            attempts += 1
            ids = self._healthy_env_runner_ids()
            shares = [share for share in np.array_split(np.arange(len(requests)), len(ids)) if len(share)]
            shares = [[requests[i] for i in share] for share in shares]
            ids = ids[: len(shares)]
            answers, missing = _answers(group, [partial(_sample_and_report, requests=share) for share in shares], ids)
            out += [answers[i] for i in ids if i in answers]
            if not missing:
                return out
            if not self.config.restart_failed_env_runners or attempts == SAMPLE_ATTEMPTS:
                raise _lost_env_runners_error(missing)
            requests = [request for i, share in zip(ids, shares) if i in missing for request in share]
            metrics.log_value((Metrics.ROLLOUT, Metrics.ENV_RUNNERS_LOST), len(missing), reduce="sum")
            print(f"[DAPO] env runner(s) {missing} lost while sampling; their {len(requests)} prompts go to the env runners in service", flush=True)

    def _collect_groups_apart(self) -> tuple[list[list], dict]:
        """`_collect_groups` with a logger of its own, returned reduced, to be merged into the
        algorithm's with `aggregate` by the main thread: safe
        in async_rollout's generation thread (RLlib's MetricsLogger is not thread-safe), and
        used for every collection of an async run, since a key cannot be both logged and
        merged into. Its rollout metrics are of the batch generated, trained the step after."""
        metrics = MetricsLogger(root=True)
        groups = self._collect_groups(metrics)
        return groups, metrics.reduce()

    def _collect_groups(self, metrics: MetricsLogger) -> list[list]:
        """Generation rounds until `train_batch_size_prompts` informative groups (DAPO §2.2);
        their metrics go to `metrics`."""
        cfg = self.config
        kept: list[list] = []
        generated: list[list] = []
        rounds = 0
        metrics.log_value((Metrics.ROLLOUT, Metrics.ENV_RUNNERS_LOST), 0, reduce="sum")
        num_prompts = cfg.gen_batch_size_prompts if cfg.dynamic_sampling else cfg.train_batch_size_prompts
        while len(kept) < cfg.train_batch_size_prompts and rounds < cfg.max_num_gen_batches:
            rounds += 1
            groups = group_episodes(self._sample_round(num_prompts, metrics))
            generated.extend(groups)
            kept.extend(informative_groups(groups, FILTER_METRICS[cfg.filter_metric]) if cfg.dynamic_sampling else groups)
            if not cfg.dynamic_sampling:
                break
            scored = sum(len(g) for g in groups)
            print(f"[DAPO] generation round {rounds}: {scored} samples scored, {len(kept)} informative groups (need {cfg.train_batch_size_prompts})", flush=True)

        generation_s = metrics.peek((TIMERS, Metrics.GENERATION_S))
        tokens_per_s = metrics.peek((Metrics.ROLLOUT, Metrics.GENERATED_TOKENS)) / max(generation_s, 1e-9)
        metrics.log_value((TIMERS, Metrics.GENERATION_TOKENS_PER_S), tokens_per_s, window=1)
        informative = len(kept)
        if informative < cfg.train_batch_size_prompts:
            kept = self._partial_batch_or_raise(kept, generated, rounds)
        kept = kept[: cfg.train_batch_size_prompts]
        self._log_rollout_metrics(generated, informative, len(kept), rounds, metrics)
        return kept

    def _partial_batch_or_raise(self, kept: list, generated: list, rounds: int) -> list:
        cfg = self.config
        fraction = len(kept) / max(len(generated), 1)
        whole = (len(kept) // cfg.minibatch_size_prompts) * cfg.minibatch_size_prompts or len(kept) - len(kept) % max(cfg.num_learners, 1)
        if not cfg.train_on_partial_batch or not whole:
            raise RuntimeError(
                f"Dynamic sampling collected {len(kept)} of train_batch_size_prompts="
                f"{cfg.train_batch_size_prompts} informative groups in max_num_gen_batches="
                f"{cfg.max_num_gen_batches} generation rounds: only {fraction:.1%} of the "
                f"{len(generated)} generated groups had a varying '{cfg.filter_metric}'. The data "
                "may be too easy or too hard for the model. Raise max_num_gen_batches or "
                "gen_batch_size_prompts, or set train_on_partial_batch=True to train on what was "
                "collected."
            )
        print(f"[DAPO] round cap reached: training on a partial batch of {whole} groups ({fraction:.1%} kept)", flush=True)
        return kept[:whole]

    def _log_rollout_metrics(self, generated: list[list], informative: int, trained: int, rounds: int, metrics: MetricsLogger) -> None:
        episodes = [ep for g in generated for ep in g]
        lengths = np.array([len(ep.get_actions(0)) for ep in episodes])
        accs = [np.array([episode_value(ep, Extras.ACC) for ep in g]) for g in generated]
        values = {
            Metrics.GENERATION_ROUNDS: rounds,
            Metrics.GROUPS_GENERATED: len(generated),
            Metrics.GROUPS_KEPT: trained,
            Metrics.GROUPS_KEPT_FRACTION: informative / max(len(generated), 1),
            Metrics.PARTIAL_BATCH: int(trained < self.config.train_batch_size_prompts),
            Metrics.GROUPS_ALL_CORRECT_FRACTION: float(np.mean([a.min() == 1 for a in accs])),
            Metrics.GROUPS_ALL_WRONG_FRACTION: float(np.mean([a.max() == 0 for a in accs])),
            Metrics.TRUNCATION_RATIO: float(np.mean([bool(episode_value(ep, Extras.TRUNCATED)) for ep in episodes])),
            Metrics.SCORING_TIMEOUTS: sum(bool(episode_value(ep, Extras.SCORE_TIMED_OUT)) for ep in episodes),
            Metrics.RESPONSE_LENGTH_MEAN: float(lengths.mean()),
            Metrics.RESPONSE_LENGTH_MAX: int(lengths.max()),
            Metrics.REWARD_MEAN: float(np.mean([ep.get_return() for ep in episodes])),
            Metrics.SCORE_MEAN: float(np.mean([episode_value(ep, Extras.SCORE) for ep in episodes])),
            Metrics.ACC_MEAN: float(np.mean([episode_value(ep, Extras.ACC) for ep in episodes])),
        }
        for key, value in values.items():
            metrics.log_value((Metrics.ROLLOUT, key), value, window=1)


def on_env_runners(group, func, env_runner_ids: list[int] | None = None) -> list:
    """`func(runner)` (or, for a list, `func[i]` on runner i) on the group's env runners (those
    of `env_runner_ids`, or all; the local one if there are no remote ones).

    Raises when one did not answer: RLlib marks a dead runner unhealthy and leaves it out of
    the results, which would silently shrink a generation round or skip a weight update.
    """
    if group.num_remote_env_runners() == 0:
        return group.foreach_env_runner(func, local_env_runner=True)
    wanted = list(group.healthy_worker_ids()) if env_runner_ids is None else list(env_runner_ids)
    answers, missing = _answers(group, func, wanted)
    if missing:
        raise _lost_env_runners_error(missing)
    return [answers[index] for index in wanted]


def _answers(group, func, env_runner_ids: list[int]) -> tuple[dict[int, Any], list[int]]:
    """({env runner id: answer}, ids of those that did not answer) of `func` on remote env runners."""
    calls = [partial(_with_index, f) for f in func] if isinstance(func, list) else partial(_with_index, func)
    try:
        answers = dict(group.foreach_env_runner(calls, local_env_runner=False, remote_worker_ids=env_runner_ids))
    except ray.exceptions.RayActorError as error:
        # Without fault tolerance RLlib raises at the first dead runner, after marking it unhealthy.
        dead = sorted(set(env_runner_ids) - set(group.healthy_worker_ids()))
        if not dead:
            raise
        raise _lost_env_runners_error(dead) from error
    return answers, sorted(set(env_runner_ids) - set(answers))


def _lost_env_runners_error(missing: list[int]) -> RuntimeError:
    return RuntimeError(
        f"env runner(s) {missing} did not answer (died or raised: see the error "
        "logged above). DAPO does not go on with fewer runners than it asked; "
        "`.fault_tolerance(restart_failed_env_runners=True)` replaces dead ones and samples their share again."
    )


def _with_index(func, env_runner):
    return env_runner.worker_index, func(env_runner)


def _sample_and_report(env_runner, requests: list[tuple[int, int]]):
    episodes = env_runner.sample(requests=requests)
    return episodes, env_runner.get_metrics(), env_runner.last_sample_timing


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
    shards = [[ep for group in groups[i * per_learner : (i + 1) * per_learner] for ep in group] for i in range(num_learners)]
    minibatch_prompts = min(cfg.minibatch_size_prompts, len(groups)) // num_learners
    return {
        "episodes_refs": [ray.put(shard) for shard in shards],
        "minibatch_size": minibatch_prompts * cfg.group_size,
        "num_total_minibatches": -(-per_learner // minibatch_prompts) * cfg.num_epochs,
    }


def group_episodes(episodes: list) -> list[list]:
    """Episodes grouped by prompt, in first-seen order."""
    groups: dict[int, list] = defaultdict(list)
    for ep in episodes:
        groups[int(episode_value(ep, Extras.GROUP_ID))].append(ep)
    return list(groups.values())


def informative_groups(groups: list[list], metric_key: str) -> list[list]:
    """Groups whose metric varies (or single-member groups), via core_algos.filter_groups."""
    if not groups:
        return []
    values = torch.tensor([float(episode_value(ep, metric_key)) for g in groups for ep in g], dtype=torch.float64)
    ids = torch.tensor([i for i, g in enumerate(groups) for _ in g])
    keep = core_algos.filter_groups(values, ids)
    first = np.cumsum([0] + [len(g) for g in groups[:-1]])
    return [g for g, start in zip(groups, first) if bool(keep[start])]


def evaluate_heldout(algorithm: DAPO, eval_env_runner_group) -> tuple[dict, int, int]:
    """Validation metrics per data source (RLlib's `custom_evaluation_function` hook).

    Runs on the evaluation env runners if there are any, else on the training ones (whose
    weights `Algorithm.evaluate` has just synced).
    """
    results = heldout_results(algorithm, eval_env_runner_group or algorithm.env_runner_group)
    algorithm.num_evaluations += 1
    # Evaluate() reads results back as merged stats, the way eval env runners report theirs.
    algorithm.metrics.aggregate([_as_stats(results)], key=EVALUATION_RESULTS)
    num_samples = results[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED]
    return results, num_samples, num_samples


def heldout_results(algorithm: DAPO, group) -> dict[str, Any]:
    """{data source: avg@n, pass@k, maj@n, ...} on the validation env, over `group`'s runners."""
    cfg = algorithm.config
    start = time.perf_counter()
    # Each runner holds a shard of the problems: one that does not answer must not shrink the set.
    shards = on_env_runners(group, lambda er: er.evaluate(num_samples=cfg.eval_num_samples, max_problems=cfg.eval_max_problems))
    problems = sorted((record for shard in shards for record in shard), key=lambda r: r["problem_index"])
    results: dict[str, Any] = eval_metrics.summarize([eval_metrics.ProblemSamples.from_record(r) for r in problems])
    elapsed = time.perf_counter() - start
    num_samples = sum(m["num_samples"] for m in results.values())
    results[ENV_RUNNER_RESULTS] = {
        NUM_ENV_STEPS_SAMPLED: num_samples,
        NUM_EPISODES: num_samples,
        Metrics.EVAL_TIME_S: elapsed,
        Metrics.PROMPTS_TRUNCATED: sum(r["prompt_truncated"] for r in problems),
    }
    print(f"[DAPO] validation ({elapsed:.1f} s): {eval_metrics.headline(results)}", flush=True)
    return results


def _as_stats(results: dict[str, Any]) -> dict:
    """(Nested) `results` as reduced MetricsLogger stats, ready for `MetricsLogger.aggregate`."""
    logger = MetricsLogger(root=False)
    for key, value in flatten_dict(results, delimiter="\0").items():
        logger.log_value(tuple(key.split("\0")), value, window=1)
    return logger.reduce()
