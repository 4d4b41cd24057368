"""DAPOConfig: DAPO's settings, their defaults (the reference Qwen2.5-32B run) and their checks.

Every setting is set in `__init__`, documented in the settings method that takes it
(`.training(...)`, `.evaluation(...)`, `.reporting(...)`), and checked by `validate()`, which
changes nothing and names the bad setting. The algorithm itself is `dapo_rllib.dapo.DAPO`.
"""

from __future__ import annotations

from pathlib import Path

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.connectors.common.numpy_to_tensor import NumpyToTensor
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.annotations import override

from dapo_rllib import core_algos
from dapo_rllib.connectors import GroupAdvantages, PadTokenBatch, RecomputeOldLogProbs
from dapo_rllib.dynamic_sampling import FILTER_METRICS
from dapo_rllib.ray_private import value_error
from dapo_rllib.registry import MATH_ENV
from dapo_rllib.tools import load_tool_call_parser
from dapo_rllib.validation import evaluate_heldout

PROBLEM_SOURCE_KEYS = ("dataset", "split", "num_problems")  # env config keys that eval_dataset replaces
DATA_FILE_SUFFIXES = (".parquet", ".jsonl", ".gz")  # an eval_dataset with these names a file; others a built-in set


# Default token budgets of a learner micro-batch (`DAPOConfig.micro_batch_token_budget`). GPUs
# want long matmuls: verl's tuning guide advises at least two full sequences. On CPUs a micro-batch
# whose activations stay in cache is faster: a bare forward + backward + AdamW step over the same
# 128 sequences of the 25M workload took 26.4 s in 2,048-token micro-batches, 32.4 s in 4,096,
# 41.6 s in 16,384 and 59.1 s in 32,768 (`bench/scale.py --workload 25m
# --sweep-micro-batch-tokens ...`, README "Against TRL's GRPOTrainer").
GPU_MICRO_BATCH_TOKENS = 16384
CPU_MICRO_BATCH_TOKENS = 2048
# The learner's attention kernel (`DAPOConfig.learner_attn_implementation`). On CPUs PyTorch's
# fused SDPA kernel has a slow bfloat16 backward for short sequences: the bare bfloat16 step of
# the 25M workload took 17.9 s with eager attention against 20.5 s with SDPA for sequences of up
# to 384 tokens, 12.7 against 14.1 s up to 542, but 23.5 against 15.9 s up to 1,054 (and 45
# against 24 s up to 3,030): the crossover lies near 660 tokens. In float32 SDPA is the faster
# one already at 384 tokens (31.1 against 32.8 s).
CPU_EAGER_ATTENTION_MAX_TOKENS = 640
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


class DAPOConfig(AlgorithmConfig):
    """Configuration of DAPO. Defaults are the reference Qwen2.5-32B run (docs/algorithm.md §5).

    Example:
        config = (
            DAPOConfig()
            .environment("dapo_math", env_config={"dataset": "data/dapo-math-17k.parquet"})
            .training(model_path="/models/Qwen2.5-32B", group_size=16)
        )
        algo = config.build_algo()
    """

    def __init__(self, algo_class=None):
        from dapo_rllib.dapo import DAPO

        super().__init__(algo_class=algo_class or DAPO)
        from dapo_rllib.env_runner import VLLMEnvRunner

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

        # Model and sampler.
        self.model_path = None
        self.model_dtype = "float32"
        self.vllm_engine_kwargs = {}
        self.max_prompt_length = 2048
        self.max_response_length = 20480
        self.temperature = 1.0
        self.top_p = 1.0
        # Episodes over turns, and tools.
        self.max_turns = 8
        self.tool_call_format = "hermes"
        self.max_tool_response_tokens = 256
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
        self.filter_band = None
        self.filter_min_std = 0.0
        self.train_on_partial_batch = False
        self.minibatch_size_prompts = 32
        self.max_tokens_per_micro_batch = None
        self.gradient_checkpointing = False
        self.attn_implementation = None
        # LoRA adapters (PEFT) instead of every weight; None: full fine-tuning.
        self.lora_rank = None
        self.lora_alpha = None
        self.lora_dropout = 0.0
        self.lora_target_modules = "all-linear"
        self.lora_sync = "auto"
        self.deepspeed_config = None
        # Rollout side: weight sync, mismatch correction, overlap.
        self.weight_sync_bucket_mb = 1024
        self.rollout_correction = None
        self.rollout_is_cap = 2.0
        self.rollout_mask_band = None
        self.async_rollout = False
        # Loss (names in core_algos' registries).
        self.policy_loss = "ppo_clip"
        self.adv_estimator = "grpo"
        self.clip_eps_low = 0.2
        self.clip_eps_high = 0.28
        self.clip_ratio_c = 10.0
        self.loss_agg_mode = "token-mean"
        # Clip-Cov's and KL-Cov's token selection (policy_loss "clip_cov" / "kl_cov"); verl's names.
        self.clip_cov_ratio = 2e-4
        self.clip_cov_lb = 1.0
        self.clip_cov_ub = 5.0
        self.kl_cov_ratio = 2e-4
        self.kl_cov_coef = 1.0
        self.kl_coef = 0.0
        self.kl_penalty = "low_var_kl"
        # Overlong reward shaping.
        self.overlong_filtering = False
        self.overlong_buffer_len = 4096
        self.overlong_penalty_factor = 1.0
        # Optimizer.
        self.lr_warmup_steps = 10
        self.weight_decay = 0.1

    @override(AlgorithmConfig)
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
        max_turns: int = NotProvided,
        tool_call_format: str = NotProvided,
        max_tool_response_tokens: int = NotProvided,
        group_size: int = NotProvided,
        train_batch_size_prompts: int = NotProvided,
        gen_batch_size_prompts: int = NotProvided,
        max_num_gen_batches: int = NotProvided,
        dynamic_sampling: bool = NotProvided,
        filter_metric: str = NotProvided,
        filter_band: tuple[float, float] | None = NotProvided,
        filter_min_std: float = NotProvided,
        train_on_partial_batch: bool = NotProvided,
        minibatch_size_prompts: int = NotProvided,
        max_tokens_per_micro_batch: int | None = NotProvided,
        gradient_checkpointing: bool = NotProvided,
        attn_implementation: str | None = NotProvided,
        lora_rank: int | None = NotProvided,
        lora_alpha: float | None = NotProvided,
        lora_dropout: float = NotProvided,
        lora_target_modules: str | list[str] = NotProvided,
        lora_sync: str = NotProvided,
        deepspeed_config: dict | str | None = NotProvided,
        weight_sync_bucket_mb: float = NotProvided,
        rollout_correction: str | None = NotProvided,
        rollout_is_cap: float = NotProvided,
        rollout_mask_band: tuple[float, float] | None = NotProvided,
        async_rollout: bool = NotProvided,
        policy_loss: str = NotProvided,
        adv_estimator: str = NotProvided,
        clip_eps_low: float = NotProvided,
        clip_eps_high: float = NotProvided,
        clip_ratio_c: float | None = NotProvided,
        loss_agg_mode: str = NotProvided,
        clip_cov_ratio: float = NotProvided,
        clip_cov_lb: float = NotProvided,
        clip_cov_ub: float = NotProvided,
        kl_cov_ratio: float = NotProvided,
        kl_cov_coef: float = NotProvided,
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
                the built-in tiny arithmetic model, built when the algorithm starts if it is not
                built yet (`policy_model_path`).
            model_dtype: "float32", "bfloat16" or "float16", for the learner and vLLM.
            vllm_engine_kwargs: Extra `vllm.LLM(...)` arguments (tensor_parallel_size,
                gpu_memory_utilization, ...); they override the runner's defaults.
            max_prompt_length: Prompt tokens; longer prompts are left-truncated and counted
                (`prompts_left_truncated`). Reference 2048.
            max_response_length: L_max, the token budget of an episode after its prompt: every token
                the model samples and, in episodes of several turns, every token the environment adds
                (tool results, feedback), as verl counts it. Reference 20480.
            temperature, top_p: Rollout sampling. Reference 1.0, 1.0.
            max_turns: Model turns an episode may take; at the last, the episode ends and its last
                turn is rated as the answer (`ProblemEnv.finish`). One-turn tasks end after one
                anyway. Default 8.
            tool_call_format: How tool calls are read from a model turn: "hermes" (Qwen2.5's
                `<tool_call>{json}</tool_call>`) or "package.module:Class" (`dapo_rllib.tools`).
            max_tool_response_tokens: A tool's output is cut to this many tokens before the model
                sees it. Default 256.
            group_size: G, completions sampled per prompt. Reference 16.
            train_batch_size_prompts: Prompts (groups) per training step. Reference 512.
            gen_batch_size_prompts: Prompts per generation round. Reference 1536.
            max_num_gen_batches: Generation rounds allowed per step before dynamic sampling
                gives up. Reference 10.
            dynamic_sampling: Keep only groups whose `filter_metric` varies (docs/algorithm.md §2.2).
                Off: one round of `train_batch_size_prompts` prompts, every group kept.
            filter_metric: "acc" (correctness, reference) or "score" (the verifier's reward, before length shaping).
            filter_band: (low, high): dynamic sampling also drops groups whose mean `filter_metric`
                is not strictly inside it (e.g. (0.1, 0.9): nearly solved or nearly failed
                prompts). None (default): no band.
            filter_min_std: Dynamic sampling also drops groups whose `filter_metric` has a
                population std below this. Default 0.0: any spread.
            train_on_partial_batch: When the round cap is hit, train on the groups collected
                (trimmed to whole mini-batches) instead of raising.
            minibatch_size_prompts: Prompts per optimizer step. Reference 32 (16 optimizer
                steps per training step at 512 prompts).
            max_tokens_per_micro_batch: Token budget of one forward pass of the learner
                (prompt + response tokens, padding included). Each mini-batch is sorted by
                length and cut into micro-batches within it; gradients accumulate to one
                optimizer step per mini-batch, and the loss is exactly that of the mini-batch
                in one piece. No effect on results, only on speed and memory. None: for GPU
                learners (num_gpus_per_learner > 0) 16,384 or two of the longest possible
                sequences (max_prompt_length + max_response_length), whichever is larger; for
                CPU learners 2,048 or one longest sequence (`CPU_MICRO_BATCH_TOKENS`). The old
                log-prob recomputation uses the same budget.
            gradient_checkpointing: Recompute each decoder layer's activations in the
                backward pass instead of keeping them (Hugging Face gradient checkpointing):
                less memory, about a third more learner compute.
            attn_implementation: The learner model's attention kernel, as transformers names it
                ("eager", "sdpa", "flash_attention_2", ...). None: on CPU learners computing in
                bfloat16 or float16, "eager" for sequences of up to 640 tokens
                (max_prompt_length + max_response_length), where it beats PyTorch's SDPA by
                10-13%, and "sdpa" beyond (`CPU_EAGER_ATTENTION_MAX_TOKENS`); "sdpa" in float32
                and on GPU learners. Results agree to float rounding; vLLM's engines use their
                own kernels either way.
            lora_rank: Train LoRA adapters of this rank (PEFT) on a frozen base model instead of
                every weight; AdamW then holds state for the adapters only, and after each step
                only the adapters travel to the vLLM engines, which serve the base model with
                them (`dapo_rllib.lora`). None (default): full fine-tuning. At most 512 (vLLM's
                largest adapter rank).
            lora_alpha: LoRA scaling numerator (the update is scaled by alpha / rank). None: twice
                the rank.
            lora_dropout: Dropout on the adapters' input in training. Default 0: the learner's
                log-probs then match the engine's, which applies none.
            lora_target_modules: The linear layers that get adapters: "all-linear" (default:
                every linear layer of the decoder, not the output head) or a list of module
                names (PEFT's matching: "q_proj", "v_proj", ...).
            lora_sync: How the adapters reach the vLLM engines after each step: "adapter" (only
                the adapters travel; the engines serve the base model with them), "merged" (the
                weights with the adapters merged in travel, as in full fine-tuning, to engines
                without LoRA) or "auto" (default: "adapter" where vLLM can serve every adapter,
                which it can on the decoder's linear layers, else "merged"). The run logs the path.
            deepspeed_config: Run the learner under DeepSpeed ZeRO (stage 2 or 3, optional
                optimizer offload): a DeepSpeed config dict or the path of a JSON file. Batch
                sizes, clipping and the optimizer stay DAPO's settings and must not be set
                there. None: plain PyTorch (DDP with several learners).
            weight_sync_bucket_mb: Size of the buckets in which the learner's weights stream
                to the vLLM engines after each step (`dapo_rllib.weight_sync`): memory the
                sync adds is about one bucket on each side. A parameter larger than a bucket
                travels in row slices and is joined on arrival (vLLM loads parameters whole).
                Default 1024: the 0.5B shape's embedding (545 MB in float32) then travels
                whole, and its sync took 2.9-3.2 s in steps against 4.0 s with 512 MB buckets.
            rollout_correction: Weight each token's policy-gradient term by the importance
                ratio rho = pi_old / pi_rollout of the learner's old log-prob to vLLM's
                (docs/scaling.md §5; `core_algos.rollout_correction_weights`): "tis" min(rho,
                rollout_is_cap) per token, "seq_tis" the same of the sequence's product of
                ratios; or drop what leaves `rollout_mask_band`: "token_mask" tokens,
                "seq_mask" sequences by their product of ratios, "geo_mask" sequences by its
                geometric mean. Corrects the rollout/learner mismatch and, with async_rollout,
                the one step of staleness. None (default): off. Either way
                `rollout_logp_abs_diff` (mean and max) is reported.
            rollout_is_cap: C of the truncating corrections (>= 1). Default 2.0.
            rollout_mask_band: (low, high), 0 < low < high, of the masking corrections. None:
                (0.5, 2.0) for "token_mask" and "seq_mask", (0.999, 1.001) for "geo_mask".
            async_rollout: Generate the next batch with the current weights while the
                learner updates on this one (one-step off-policy, as verl's recipe): each
                batch is one update stale; a step takes about max(generation, update) instead
                of their sum. Needs env runner actors (num_env_runners >= 1).
            policy_loss: Policy loss, by name in `core_algos`' registry: "ppo_clip" (PPO's
                clipped ratio with the decoupled bounds below; DAPO, GRPO), "gspo" (the
                sequence ratio; needs loss_agg_mode "seq-mean-token-mean"), "gspo_token"
                (GSPO with per-token advantages), "cispo" (a clipped weight on a REINFORCE
                term), "clip_cov" / "kl_cov" (the entropy-mechanism paper's: PPO's clip with a
                few high-covariance tokens left out, or the unclipped surrogate with a KL term
                on the highest-covariance ones), a name registered with
                `core_algos.register_policy_loss`, or "module:function".
            adv_estimator: Advantage estimator, by name in `core_algos`' registry: "grpo"
                (group-normalised: GRPO, DAPO), "dr_grpo" (group-centred only: Dr. GRPO),
                "rloo" (leave-one-out baseline), "reinforce_plus_plus" (batch-normalised),
                "reinforce_plus_plus_baseline" (group-centred, then batch-normalised), "opo"
                (length-weighted group baseline), a name registered with
                `core_algos.register_adv_estimator`, or "module:function".
            clip_eps_low, clip_eps_high: Decoupled clip range [1 - low, 1 + high] (Clip-Higher).
                Reference 0.2 and 0.28. With "cispo" the range of the weight, and low may be 1
                (no lower bound).
            clip_ratio_c: Dual-clip bound for negative advantages (> 1), None = off.
                Reference 10. Only "ppo_clip" has a dual clip: with another policy loss it
                must be None.
            loss_agg_mode: "token-mean" (DAPO), "seq-mean-token-mean" (GRPO),
                "seq-mean-token-sum", "seq-mean-token-sum-norm" (Dr. GRPO).
            clip_cov_ratio, clip_cov_lb, clip_cov_ub: "clip_cov": the fraction of loss tokens
                left out, drawn among those whose covariance lies in (lb, ub). The authors'
                2e-4, 1 and 5 (with clip_eps_low = clip_eps_high = 1).
            kl_cov_ratio, kl_cov_coef: "kl_cov": the fraction of loss tokens (largest
                covariance) that get the KL term, and its weight (verl's ppo_kl_coef). The
                authors' 2e-3 for 7B models, 2e-4 for 32B, and 1. Both selections are made over
                the whole mini-batch before it is cut into micro-batches (verl's per
                micro-batch), from the old policy's log-probs where they are recomputed and the
                sampler's otherwise; Clip-Cov's draw is seeded by the config's seed.
            kl_coef: Weight of a KL penalty to the initial policy. DAPO: 0 (no reference
                model is kept).
            kl_penalty: KL estimator, "low_var_kl" (k3), "kl", "abs" or "mse".
            overlong_filtering: Mask the loss of truncated responses (docs/algorithm.md §2.4).
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

    @override(AlgorithmConfig)
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
            env_config = {k: v for k, v in env_config.items() if k not in PROBLEM_SOURCE_KEYS} | {
                "dataset": self.eval_dataset,
                "split": "test",
            }
        return env_config

    @override(AlgorithmConfig)
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

    @override(AlgorithmConfig)
    def env_runners(self, *, create_local_env_runner: bool = NotProvided, **kwargs) -> "DAPOConfig":
        """RLlib's env runner settings. Unless `create_local_env_runner` is given, the driver gets
        an env runner (and with it a vLLM engine, which is expensive) only when there are no
        remote ones."""
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

    @property
    def policy_model_path(self) -> str:
        """The policy's model directory: `model_path`, or the built-in tiny model's when it is None
        (`DAPO.setup` builds that one before any learner or env runner starts)."""
        from dapo_rllib.models.tiny import default_tiny_model_path

        return str(default_tiny_model_path() if self.model_path is None else self.model_path)

    @property
    def lora_settings(self) -> dict | None:
        """The LoRA adapter settings (`dapo_rllib.lora.LoraSettings` fields), or None for full fine-tuning."""
        if self.lora_rank is None:
            return None
        return {
            "rank": self.lora_rank,
            "alpha": 2 * self.lora_rank if self.lora_alpha is None else self.lora_alpha,
            "dropout": self.lora_dropout,
            "target_modules": self.lora_target_modules,
            "seed": self.seed or 0,  # of the adapters' initial A matrices
        }

    @property
    def lora_sync_path(self) -> str | None:
        """How the policy reaches the engines with LoRA: "adapter" or "merged" (`lora_sync`, resolved
        against the model's layers by `dapo_rllib.lora.lora_sync_path`); None for full fine-tuning."""
        if self.lora_settings is None:
            return None
        from dapo_rllib.lora import lora_sync_path

        return lora_sync_path(self.policy_model_path, self.lora_settings, self.lora_sync)

    # ----- RLlib hooks ---------------------------------------------------------------------
    @override(AlgorithmConfig)
    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from dapo_rllib.rl_module import CausalLMRLModule

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
        if self.deepspeed_config is not None:
            from dapo_rllib.deepspeed_learner import DAPODeepSpeedLearner

            return DAPODeepSpeedLearner
        from dapo_rllib.learner import DAPOTorchLearner

        return DAPOTorchLearner

    @override(AlgorithmConfig)
    def build_learner_group(self, *, env=None, spaces=None, rl_module_spec=None, placement_group=None):
        """RLlib's LearnerGroup; under DeepSpeed one that reads state from all learners at once."""
        if self.deepspeed_config is None:
            return super().build_learner_group(
                env=env, spaces=spaces, rl_module_spec=rl_module_spec, placement_group=placement_group
            )
        from dapo_rllib.deepspeed_learner import DeepSpeedLearnerGroup

        return DeepSpeedLearnerGroup(
            config=self.copy(),
            module_spec=rl_module_spec or self.get_multi_rl_module_spec(env=env, spaces=spaces),
            placement_group=placement_group,
        )

    @override(AlgorithmConfig)
    def build_learner_connector(self, input_observation_space, input_action_space, device=None):
        from transformers import AutoConfig

        pipeline = super().build_learner_connector(input_observation_space, input_action_space, device=device)
        model_config = AutoConfig.from_pretrained(self.policy_model_path)
        pad_token_id = getattr(model_config, "pad_token_id", None)
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

    @property
    def minibatch_size_sequences(self) -> int:
        return self.minibatch_size_prompts * self.group_size

    @property
    def micro_batch_token_budget(self) -> int:
        """`max_tokens_per_micro_batch`, or its default for the learners' device."""
        if self.max_tokens_per_micro_batch is not None:
            return self.max_tokens_per_micro_batch
        longest = self.max_prompt_length + self.max_response_length
        if self.num_gpus_per_learner > 0:
            return max(GPU_MICRO_BATCH_TOKENS, 2 * longest)
        return max(CPU_MICRO_BATCH_TOKENS, longest)

    @property
    def covariance_selection(self) -> dict | None:
        """The arguments of `core_algos.covariance_token_selection` for a policy loss that takes
        covariance-selected tokens (Clip-Cov's band and ratio, KL-Cov's ratio), else None."""
        kind = core_algos.policy_loss_traits(self.policy_loss).get("covariance_selection")
        if kind == "band":
            return {"ratio": self.clip_cov_ratio, "band": (self.clip_cov_lb, self.clip_cov_ub)}
        return {"ratio": self.kl_cov_ratio} if kind == "top" else None

    @property
    def learner_attn_implementation(self) -> str:
        """`attn_implementation`, or its default for the learners' device and sequence length."""
        if self.attn_implementation is not None:
            return self.attn_implementation
        longest = self.max_prompt_length + self.max_response_length
        half_precision = self.model_dtype != "float32"
        if self.num_gpus_per_learner == 0 and half_precision and longest <= CPU_EAGER_ATTENTION_MAX_TOKENS:
            return "eager"
        return "sdpa"

    @property
    def weight_sync_bucket_bytes(self) -> int:
        return int(self.weight_sync_bucket_mb * 2**20)

    @property
    def recomputes_old_logp(self) -> bool:
        """False when every batch gets exactly one optimizer step: the old log-probs are then the
        current ones, and the learner takes them from its own forward pass (ratio 1)."""
        return self.num_epochs > 1 or self.minibatch_size_prompts < self.train_batch_size_prompts

    def _validate_policy_loss_settings(self, need) -> None:
        """The clip settings, checked against the policy loss's registered traits."""
        traits = core_algos.policy_loss_traits(self.policy_loss) if isinstance(self.policy_loss, str) else {}
        agg_modes = traits.get("loss_agg_modes", core_algos.LOSS_AGG_MODES)
        need(
            self.loss_agg_mode in agg_modes,
            f"loss_agg_mode={self.loss_agg_mode!r} is not defined for policy_loss={self.policy_loss!r}; "
            f"expected one of {agg_modes}",
        )
        if traits.get("clip_eps_low_may_be_1", False):  # the clip bounds a weight, which may reach 0
            need(0 <= self.clip_eps_low <= 1, f"clip_eps_low={self.clip_eps_low} must be in [0, 1] (1: no lower bound)")
        else:
            need(0 <= self.clip_eps_low < 1, f"clip_eps_low={self.clip_eps_low} must be in [0, 1)")
        need(self.clip_eps_high >= 0, f"clip_eps_high={self.clip_eps_high} must be >= 0")
        need(
            self.clip_ratio_c is None or self.clip_ratio_c > 1,
            f"clip_ratio_c={self.clip_ratio_c} must be > 1 (or None to turn dual clip off)",
        )
        need(
            self.clip_ratio_c is None or traits.get("dual_clip", True),
            f"clip_ratio_c={self.clip_ratio_c}: policy_loss={self.policy_loss!r} has no dual clip; set clip_ratio_c=None",
        )
        for name in ("clip_cov_ratio", "kl_cov_ratio"):
            need(
                0 < getattr(self, name) <= 1,
                f"{name}={getattr(self, name)} must be in (0, 1]: a fraction of the loss tokens",
            )
        need(
            self.clip_cov_lb < self.clip_cov_ub,
            f"clip_cov_lb={self.clip_cov_lb} must be < clip_cov_ub={self.clip_cov_ub}: the covariance band is (lb, ub)",
        )
        need(self.kl_cov_coef >= 0, f"kl_cov_coef={self.kl_cov_coef} must be >= 0")

    @override(AlgorithmConfig)
    def validate(self) -> None:
        """RLlib's checks, then DAPO's: each bad setting raises naming it. Changes nothing."""
        super().validate()

        def need(ok: bool, message: str) -> None:
            if not ok:
                value_error(self, message)

        need(
            self.model_path is None or (Path(self.model_path) / "config.json").is_file(),
            f"model_path={self.model_path!r} is not a Hugging Face model directory (no config.json)",
        )
        for setting, lookup in (
            ("policy_loss", core_algos.policy_loss_fn),
            ("adv_estimator", core_algos.adv_estimator_fn),
            ("tool_call_format", load_tool_call_parser),
        ):
            try:
                lookup(getattr(self, setting))
            except (ValueError, ImportError, AttributeError) as error:
                value_error(self, f"{setting}={getattr(self, setting)!r}: {error}")
        need(
            self.loss_agg_mode in core_algos.LOSS_AGG_MODES,
            f"loss_agg_mode={self.loss_agg_mode!r}; expected one of {core_algos.LOSS_AGG_MODES}",
        )
        self._validate_policy_loss_settings(need)
        need(self.group_size >= 2, f"group_size={self.group_size} must be >= 2: a group of one has zero advantage")
        for name in (
            "train_batch_size_prompts",
            "gen_batch_size_prompts",
            "max_num_gen_batches",
            "minibatch_size_prompts",
            "max_prompt_length",
            "max_response_length",
            "eval_num_samples",
            "max_turns",
            "max_tool_response_tokens",
        ):
            need(
                isinstance(getattr(self, name), int) and getattr(self, name) >= 1,
                f"{name}={getattr(self, name)!r} must be a positive integer",
            )
        need(
            self.train_batch_size_prompts % self.minibatch_size_prompts == 0,
            f"train_batch_size_prompts={self.train_batch_size_prompts} must be a multiple of minibatch_size_prompts={self.minibatch_size_prompts}",
        )
        need(
            self.filter_metric in FILTER_METRICS,
            f"filter_metric={self.filter_metric!r}; expected one of {sorted(FILTER_METRICS)}",
        )
        need(
            self.filter_band is None or (len(self.filter_band) == 2 and self.filter_band[0] < self.filter_band[1]),
            f"filter_band={self.filter_band!r} must be (low, high) with low < high, or None",
        )
        need(
            isinstance(self.filter_min_std, (int, float)) and self.filter_min_std >= 0,
            f"filter_min_std={self.filter_min_std!r} must be >= 0",
        )
        need(
            0 <= self.overlong_buffer_len <= self.max_response_length,
            f"overlong_buffer_len={self.overlong_buffer_len} must be in [0, max_response_length={self.max_response_length}]",
        )
        need(self.overlong_penalty_factor >= 0, f"overlong_penalty_factor={self.overlong_penalty_factor} must be >= 0")
        need(self.kl_coef >= 0, f"kl_coef={self.kl_coef} must be >= 0")
        need(
            self.kl_penalty in core_algos.KL_PENALTY_KINDS,
            f"kl_penalty={self.kl_penalty!r}; expected one of {core_algos.KL_PENALTY_KINDS}",
        )
        need(
            self.temperature > 0,
            f"temperature={self.temperature} must be > 0 (log-probs are of softmax(logits / temperature))",
        )
        need(
            self.eval_max_problems is None or (isinstance(self.eval_max_problems, int) and self.eval_max_problems >= 1),
            f"eval_max_problems={self.eval_max_problems!r} must be a positive integer or None (all problems)",
        )
        need(
            self.eval_dataset is None
            or Path(self.eval_dataset).suffix not in DATA_FILE_SUFFIXES
            or Path(self.eval_dataset).is_file(),
            f"eval_dataset={self.eval_dataset!r}: no such file",
        )
        need(self.eval_temperature >= 0, f"eval_temperature={self.eval_temperature} must be >= 0")
        need(
            0 < self.top_p <= 1 and 0 < self.eval_top_p <= 1,
            f"top_p={self.top_p} and eval_top_p={self.eval_top_p} must be in (0, 1]",
        )
        need(
            self.lr_warmup_steps >= 0 and self.weight_decay >= 0,
            f"lr_warmup_steps={self.lr_warmup_steps} and weight_decay={self.weight_decay} must be >= 0",
        )
        need(
            self.model_dtype in ("float32", "bfloat16", "float16"),
            f"model_dtype={self.model_dtype!r}; expected float32, bfloat16 or float16",
        )
        need(
            self.attn_implementation is None or self.attn_implementation in ATTN_IMPLEMENTATIONS,
            f"attn_implementation={self.attn_implementation!r}; expected None (the device's default) or one of {ATTN_IMPLEMENTATIONS}",
        )
        need(
            self.max_tokens_per_micro_batch is None
            or (
                isinstance(self.max_tokens_per_micro_batch, int)
                and self.max_tokens_per_micro_batch >= self.max_prompt_length + self.max_response_length
            ),
            f"max_tokens_per_micro_batch={self.max_tokens_per_micro_batch!r} must hold the longest possible sequence: at least max_prompt_length + max_response_length = {self.max_prompt_length + self.max_response_length} (or None for the default)",
        )
        need(
            self.num_learners <= 1 or self.minibatch_size_prompts % self.num_learners == 0,
            f"num_learners={self.num_learners}: every learner takes whole groups, so minibatch_size_prompts={self.minibatch_size_prompts} (groups per optimizer step) must be a multiple of num_learners",
        )
        if self.deepspeed_config is not None:
            from dapo_rllib.deepspeed_learner import engine_config, load_deepspeed_config

            try:
                engine_config(
                    load_deepspeed_config(self.deepspeed_config), grad_clip=self.grad_clip, model_dtype=self.model_dtype
                )
            except (ValueError, OSError) as error:
                value_error(self, f"deepspeed_config={self.deepspeed_config!r}: {error}")
            need(
                self.grad_clip_by == "global_norm",
                f"grad_clip_by={self.grad_clip_by!r}: under DeepSpeed gradients are clipped by their global norm only",
            )
        if self.lora_rank is not None:
            from dapo_rllib.lora import LORA_SYNC_MODES, MAX_RANK

            need(
                isinstance(self.lora_rank, int)
                and not isinstance(self.lora_rank, bool)
                and 0 < self.lora_rank <= MAX_RANK,
                f"lora_rank={self.lora_rank!r} must be a whole number in 1..{MAX_RANK} (vLLM's largest adapter rank), or None for full fine-tuning",
            )
            need(
                self.lora_alpha is None or (isinstance(self.lora_alpha, (int, float)) and self.lora_alpha > 0),
                f"lora_alpha={self.lora_alpha!r} must be a positive number (or None: twice the rank)",
            )
            need(
                isinstance(self.lora_dropout, (int, float)) and 0 <= self.lora_dropout < 1,
                f"lora_dropout={self.lora_dropout!r} must be in [0, 1)",
            )
            need(
                self.lora_target_modules == "all-linear"
                or (
                    isinstance(self.lora_target_modules, (list, tuple))
                    and self.lora_target_modules
                    and all(isinstance(name, str) and name for name in self.lora_target_modules)
                ),
                f"lora_target_modules={self.lora_target_modules!r} must be 'all-linear' or a non-empty list of module names",
            )
            need(
                self.lora_sync in LORA_SYNC_MODES,
                f"lora_sync={self.lora_sync!r}; expected one of {LORA_SYNC_MODES}",
            )
        need(
            self.env_runner_cls is not None and hasattr(self.env_runner_cls, "evaluate"),
            f"env_runner_cls={self.env_runner_cls} must be a VLLMEnvRunner (subclass)",
        )
        need(
            isinstance(self.weight_sync_bucket_mb, (int, float)) and self.weight_sync_bucket_mb > 0,
            f"weight_sync_bucket_mb={self.weight_sync_bucket_mb!r} must be a positive number of MB",
        )
        need(
            self.rollout_correction in core_algos.ROLLOUT_CORRECTIONS,
            f"rollout_correction={self.rollout_correction!r}; expected one of {core_algos.ROLLOUT_CORRECTIONS}",
        )
        need(
            isinstance(self.rollout_is_cap, (int, float)) and self.rollout_is_cap >= 1,
            f"rollout_is_cap={self.rollout_is_cap!r} must be >= 1 (an importance weight cap)",
        )
        need(
            self.rollout_mask_band is None
            or (len(self.rollout_mask_band) == 2 and 0 < self.rollout_mask_band[0] < self.rollout_mask_band[1]),
            f"rollout_mask_band={self.rollout_mask_band!r} must be (low, high) with 0 < low < high, or None",
        )
        need(
            # (An evaluation config has the evaluation runner count there; it does not train.)
            not self.async_rollout or self.in_evaluation or self.num_env_runners >= 1,
            "async_rollout=True generates in env runner actors while the learner updates in this process: set num_env_runners >= 1 (with 0 the engine would share the driver with the learner and nothing would overlap)",
        )
