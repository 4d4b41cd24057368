"""DAPOTorchLearner: the DAPO loss, AdamW, warmup schedule and gradient safety on RLlib's TorchLearner.

One `update()` call is one DAPO training step; RLlib's mini-batch iterator runs one optimizer
step per mini-batch of `minibatch_size_prompts * group_size` sequences, which this learner runs
in micro-batches of at most `max_tokens_per_micro_batch` tokens (`micro_batching`), accumulating
gradients. With several learners each holds whole groups and the gradients are summed once per
step. The loss is computed by `core_algos`; this class only feeds it and logs.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
from collections import defaultdict
from collections.abc import Mapping

import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override
from torch.distributed import ReduceOp

from dapo_rllib.algorithm import core_algos
from dapo_rllib.algorithm.loss import LossDenominators, LossSettings, RolloutCorrectionSettings
from dapo_rllib.algorithm.micro_batching import padding_fraction, plan_for_batch, take
from dapo_rllib.columns import Columns, Metrics
from dapo_rllib.models.lora import LoraSettings, MergedWeights, adapter_tensors
from dapo_rllib.models.rl_module import response_logprobs
from dapo_rllib.ray_private import learner_weights_seq_no
from dapo_rllib.rollout.weight_sync import TRANSPORTS, Piece, bucket_tensors, plan_buckets
from dapo_rllib.settings import FeatureSettings, is_positive_int, require

logger = logging.getLogger(__name__)

TRAINING_STEPS = "num_training_steps"
LOSS_TERMS = (Metrics.POLICY_LOSS, Metrics.KL_LOSS)  # summed over micro-batches; other metrics are token means
MAX_TERMS = (Metrics.ROLLOUT_LOGP_ABS_DIFF_MAX,)  # the largest over micro-batches and learners
MEAN_WEIGHT = "_mean_weight"  # the weight of those means: the loss tokens they were taken over


# Default token budgets of a learner micro-batch (`LearnerSettings.max_tokens_per_micro_batch`). GPUs
# want long matmuls (verl's tuning guide: at least two full sequences); on CPUs a micro-batch whose
# activations stay in cache is faster (bench/results/scale_*.json, `bench/scale.py --sweep-micro-batch-tokens`).
GPU_MICRO_BATCH_TOKENS = 16384
CPU_MICRO_BATCH_TOKENS = 2048
# Up to this many tokens per sequence, CPU learners computing in bfloat16/float16 use eager attention:
# PyTorch's fused SDPA kernel has a slow half-precision backward on short sequences (docs: scaling, learner).
CPU_EAGER_ATTENTION_MAX_TOKENS = 640
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


@dataclasses.dataclass(frozen=True)
class LearnerSettings(FeatureSettings):
    """Mini-batches, micro-batches and the optimizer of the learner (`DAPOConfig.training`).

    Attributes:
        minibatch_size_prompts: Prompts per optimizer step. Reference 32 (16 optimizer steps per
            training step at 512 prompts).
        max_tokens_per_micro_batch: Token budget of one forward pass of the learner (prompt + response
            tokens, padding included). Each mini-batch is sorted by length and cut into micro-batches
            within it; gradients accumulate to one optimizer step per mini-batch, and the loss is exactly
            that of the mini-batch in one piece. No effect on results, only on speed and memory. None:
            for GPU learners 16,384 or two of the longest possible sequences, whichever is larger; for
            CPU learners 2,048 or one longest sequence. The old log-prob recomputation uses the same budget.
        gradient_checkpointing: Recompute each decoder layer's activations in the backward pass instead
            of keeping them: less memory, about a third more learner compute.
        attn_implementation: The learner model's attention kernel, as transformers names it ("eager",
            "sdpa", "flash_attention_2", ...). None: on CPU learners computing in bfloat16 or float16,
            "eager" for sequences of up to 640 tokens (max_prompt_length + max_response_length), where it
            beats PyTorch's SDPA, and "sdpa" beyond; "sdpa" in float32 and on GPU learners. Results agree
            to float rounding; vLLM's engines use their own kernels either way.
        lr_warmup_steps: Linear warmup length in training steps, constant after. Reference script 10
            (paper 20).
        weight_decay: AdamW weight decay. Reference 0.1.
    """

    minibatch_size_prompts: int = 32
    max_tokens_per_micro_batch: int | None = None
    gradient_checkpointing: bool = False
    attn_implementation: str | None = None
    lr_warmup_steps: int = 10
    weight_decay: float = 0.1

    def micro_batch_token_budget(self, longest_sequence: int, on_gpu: bool) -> int:
        """`max_tokens_per_micro_batch`, or its default for the learners' device."""
        if self.max_tokens_per_micro_batch is not None:
            return self.max_tokens_per_micro_batch
        if on_gpu:
            return max(GPU_MICRO_BATCH_TOKENS, 2 * longest_sequence)
        return max(CPU_MICRO_BATCH_TOKENS, longest_sequence)

    def attention_kernel(self, longest_sequence: int, on_gpu: bool, model_dtype: str) -> str:
        """`attn_implementation`, or its default for the learners' device and sequence length."""
        if self.attn_implementation is not None:
            return self.attn_implementation
        if not on_gpu and model_dtype != "float32" and longest_sequence <= CPU_EAGER_ATTENTION_MAX_TOKENS:
            return "eager"
        return "sdpa"

    def validate(self) -> None:
        require(
            is_positive_int(self.minibatch_size_prompts),
            f"minibatch_size_prompts={self.minibatch_size_prompts!r} must be a positive integer",
        )
        require(
            self.attn_implementation is None or self.attn_implementation in ATTN_IMPLEMENTATIONS,
            f"attn_implementation={self.attn_implementation!r}; expected None (the device's default) or one of {ATTN_IMPLEMENTATIONS}",
        )
        require(
            self.lr_warmup_steps >= 0 and self.weight_decay >= 0,
            f"lr_warmup_steps={self.lr_warmup_steps} and weight_decay={self.weight_decay} must be >= 0",
        )


@dataclasses.dataclass(frozen=True)
class UpdateSettings:
    """What the learner reads of the algorithm's config for one module's updates, built once from the config
    RLlib hands it for the module (`from_config`, the one place that maps `DAPOConfig` to them), so that a
    setting renamed there breaks the mapping, not the learner.

    Attributes:
        lr: RLlib's `lr`, the rate after the warmup.
        learner: The optimizer's warmup and weight decay.
        loss, correction: The policy loss, and the rollout correction of its advantages.
        micro_batch_tokens: A micro-batch's token budget (`DAPOConfig.micro_batch_token_budget`).
        recomputes_old_logp: Whether the batch carries the old policy's log-probs (`DAPOConfig.recomputes_old_logp`).
        max_response_length: The loss's scale factor (the token-sum aggregations divide by it).
        temperature: The rollout temperature the KL term's reference log-probs are taken at.
        seed: RLlib's `seed`, of Clip-Cov's and KL-Cov's draws.
        lora, lora_sync_path: The adapters' settings and what the weight sync sends (`DAPOConfig.lora_sync_path`);
            both None for full fine-tuning.
    """

    lr: float
    learner: LearnerSettings
    loss: LossSettings
    correction: RolloutCorrectionSettings
    micro_batch_tokens: int
    recomputes_old_logp: bool
    max_response_length: int
    temperature: float
    seed: int
    lora: LoraSettings | None
    lora_sync_path: str | None

    @classmethod
    def from_config(cls, config) -> UpdateSettings:
        return cls(
            lr=config.lr,
            learner=config.learner_settings,
            loss=config.loss_settings,
            correction=config.rollout_correction_settings,
            micro_batch_tokens=config.micro_batch_token_budget,
            recomputes_old_logp=config.recomputes_old_logp,
            max_response_length=config.max_response_length,
            temperature=config.temperature,
            seed=config.seed or 0,
            lora=config.lora_settings,
            lora_sync_path=config.lora_sync_path,
        )


class DAPOTorchLearner(TorchLearner):
    @override(TorchLearner)
    def build(self) -> None:
        self._update_settings: dict = {}  # {module id: UpdateSettings}; the optimizers RLlib builds next read them
        super().build()
        self._num_training_steps = 0
        self._minibatch_index = 0
        self._ref_models = {}
        for mid in self.module.keys():
            settings = self.update_settings(mid)
            if settings.loss.kl_coef > 0 and settings.lora is None:
                # A frozen copy of the initial policy for the KL term (with LoRA the base model is
                # that policy: the adapters are switched off instead, see `reference_logprobs`).
                ref = copy.deepcopy(self.module[mid].unwrapped().model).eval()
                ref.requires_grad_(False)
                self._ref_models[mid] = ref

    def update_settings(self, module_id) -> UpdateSettings:
        """The settings of `module_id`'s updates, built from its config (RLlib's, with any per-module
        overrides) the first time they are asked for."""
        if module_id not in self._update_settings:
            self._update_settings[module_id] = UpdateSettings.from_config(self.config.get_config_for_module(module_id))
        return self._update_settings[module_id]

    # ----- optimizer and schedule ----------------------------------------------------------
    @override(TorchLearner)
    def configure_optimizers_for_module(self, module_id, config=None):
        params = [p for p in self.get_parameters(self.module[module_id]) if p.requires_grad]
        settings = self.update_settings(module_id)
        optimizer = torch.optim.AdamW(
            params, lr=settings.lr, weight_decay=settings.learner.weight_decay, betas=(0.9, 0.999)
        )
        self.register_optimizer(module_id=module_id, optimizer=optimizer, params=params, lr_or_lr_schedule=None)

    def scheduled_lr(self, settings: UpdateSettings) -> float:
        """Linear warmup over `lr_warmup_steps` training steps, then constant.

        Step k (0-based) uses lr * (k + 1) / warmup, so the very first step already learns.
        """
        warmup = settings.learner.lr_warmup_steps
        if warmup <= 0:
            return settings.lr
        return settings.lr * min(1.0, (self._num_training_steps + 1) / warmup)

    @override(TorchLearner)
    def before_gradient_based_update(self, *, timesteps):
        super().before_gradient_based_update(timesteps=timesteps)
        self._minibatch_index = 0  # of this training step's optimizer steps (seeds Clip-Cov's draw)
        for module_id in self.module.keys():
            lr = self.scheduled_lr(self.update_settings(module_id))
            for _, optimizer in self.get_optimizers_for_module(module_id):
                for group in optimizer.param_groups:
                    group["lr"] = lr

    @override(TorchLearner)
    def after_gradient_based_update(self, *, timesteps):
        super().after_gradient_based_update(timesteps=timesteps)
        self._num_training_steps += 1

    # ----- one optimizer step: micro-batches and gradient accumulation ---------------------
    @override(TorchLearner)
    def _uncompiled_update(self, batch: dict, **kwargs):
        """One optimizer step on one mini-batch, run in token-budget micro-batches.

        RLlib's TorchLearner runs a mini-batch as one forward and one backward pass and has no
        gradient accumulation; this (its update-sequencing hook) is the one place to add it.
        Every micro-batch's loss is divided by the whole mini-batch's counts over all learners,
        so the accumulated (and, with several learners, summed) gradient is that of the
        mini-batch in one piece, and the reported loss and grad norm are the global step's.
        """
        for module_id in batch:
            for _, optimizer in self.get_optimizers_for_module(module_id):
                optimizer.zero_grad(set_to_none=True)
        losses = {
            module_id: self._accumulate_gradients(module_id, module_batch) for module_id, module_batch in batch.items()
        }
        self.optimizer_step(list(batch))
        self._minibatch_index += 1
        return {}, losses, {}

    def _accumulate_gradients(self, module_id, batch: dict) -> torch.Tensor:
        """Forward and backward of every micro-batch; returns the mini-batch's (global) loss."""
        settings = self.update_settings(module_id)
        module = self.module[module_id].unwrapped()
        mask = batch[Columns.LOSS_MASK]
        denominators = LossDenominators(
            num_tokens=self.all_reduce(mask.sum()).clamp_min(1),
            num_seqs=self.all_reduce((mask.sum(-1) > 0).sum().float()).clamp_min(1),
        )
        loss_settings = settings.loss
        if loss_settings.covariance_selection is not None:  # before the cut: a selection of the whole mini-batch
            batch = batch | {Columns.COV_SELECTED: self.covariance_selection(settings, batch)}
        plan = plan_for_batch(batch, settings.micro_batch_tokens)
        sums: dict[str, torch.Tensor] = defaultdict(lambda: torch.zeros((), dtype=torch.float64))
        maxima: dict[str, torch.Tensor] = defaultdict(lambda: torch.zeros((), dtype=torch.float64))
        passes = self.num_forward_passes(len(plan))
        for i in range(passes):
            # Passes past this learner's own micro-batches repeat its last one with no weight.
            piece = take(batch, plan[min(i, len(plan) - 1)])
            loss, metrics = self.micro_batch_loss(module_id, settings, piece, module.forward_train(piece), denominators)
            self.backward(module_id, loss if i < len(plan) else loss * 0.0, last=i == passes - 1)
            if i >= len(plan):
                continue
            weight = piece[Columns.LOSS_MASK].sum().double()
            for key, value in metrics.items():
                if key in MAX_TERMS:
                    maxima[key] = torch.maximum(maxima[key], value.double())
                else:
                    sums[key] += value.double() if key in LOSS_TERMS else value.double() * weight
            sums[MEAN_WEIGHT] += weight
        totals = dict(zip(sums, self.all_reduce(torch.stack(list(sums.values()))).tolist()))
        if maxima:
            totals |= dict(zip(maxima, self.all_reduce(torch.stack(list(maxima.values())), ReduceOp.MAX).tolist()))
        tokens = max(totals.pop(MEAN_WEIGHT), 1.0)
        for key, value in totals.items():
            mean = value if key in LOSS_TERMS + MAX_TERMS else value / tokens
            self.metrics.log_value((module_id, key), mean, reduce="mean")
        self.metrics.log_value((module_id, Metrics.PADDING_FRACTION), padding_fraction(plan, batch), reduce="mean")
        self.metrics.log_value((module_id, Metrics.MICRO_BATCHES), float(len(plan)), reduce="mean")
        return torch.tensor(totals[Metrics.POLICY_LOSS] + loss_settings.kl_coef * totals.get(Metrics.KL_LOSS, 0.0))

    @torch.no_grad()
    def reference_logprobs(self, module_id, batch, temperature: float) -> torch.Tensor:
        """The initial policy's log-probs of the batch's responses (the KL term's reference)."""
        module = self.module[module_id].unwrapped()
        if module_id in self._ref_models:
            with module.autocast(batch):
                return response_logprobs(self._ref_models[module_id], batch, temperature)[Columns.LOGP]
        with module.model.disable_adapter():  # LoRA: the base model
            return module.forward_train(batch)[Columns.LOGP]

    def micro_batch_loss(
        self, module_id, settings: UpdateSettings, batch, fwd_out, denominators: LossDenominators | None
    ) -> tuple[torch.Tensor, dict]:
        """The loss of `batch` and its metrics: loss terms as they are, the rest as means over
        `batch`'s loss tokens. The loss divides by `denominators`, or by `batch`'s own counts when
        None (a mini-batch in one piece)."""
        mask = batch[Columns.LOSS_MASK]
        loss_settings, correction = settings.loss, settings.correction
        num_tokens, num_seqs = (
            (denominators.num_tokens, denominators.num_seqs) if denominators is not None else (None, None)
        )
        logp = fwd_out[Columns.LOGP]
        # One optimizer step per batch: the old policy is the current one (ratio 1), no recompute.
        old_logp = batch[Columns.OLD_LOGP] if settings.recomputes_old_logp else logp.detach()
        rollout_logp = batch.get(Columns.ROLLOUT_LOGP)
        if rollout_logp is None and correction.correction is not None:
            raise ValueError(
                f"rollout_correction={correction.correction!r} needs the sampler's log-probs: the batch has no {Columns.ROLLOUT_LOGP!r} column"
            )
        # A batch built elsewhere (not by VLLMEnvRunner) may carry no sampler log-probs.
        rollout_metrics = {} if rollout_logp is None else core_algos.rollout_mismatch(old_logp, rollout_logp, mask)
        weights, correction_metrics = (
            core_algos.rollout_correction_weights(
                old_logp,
                rollout_logp,
                mask,
                mode=correction.correction,
                cap=correction.is_cap,
                band=correction.mask_band,
            )
            if rollout_logp is not None
            else (None, {})
        )
        advantages = batch[Columns.ADVANTAGES] if weights is None else batch[Columns.ADVANTAGES] * weights
        extras = {}
        if loss_settings.covariance_selection is not None:  # Clip-Cov / KL-Cov
            selected = batch.get(Columns.COV_SELECTED)
            if selected is None:  # a mini-batch in one piece (RLlib's compute_loss_for_module)
                selected = self.covariance_selection(settings, batch)
            extras = {"selected": selected, "kl_cov_coef": loss_settings.kl_cov_coef}
        loss, metrics = core_algos.policy_loss_fn(loss_settings.policy_loss)(
            logp,
            old_logp,
            advantages,
            mask,
            clip_eps_low=loss_settings.clip_eps_low,
            clip_eps_high=loss_settings.clip_eps_high,
            clip_ratio_c=loss_settings.clip_ratio_c,
            loss_agg_mode=loss_settings.loss_agg_mode,
            num_tokens=num_tokens,
            num_seqs=num_seqs,
            loss_scale_factor=settings.max_response_length,
            **extras,
        )
        metrics |= rollout_metrics | correction_metrics
        metrics[Metrics.POLICY_LOSS] = loss.detach()
        if loss_settings.kl_coef > 0:
            ref_logp = self.reference_logprobs(module_id, batch, settings.temperature)
            kl = core_algos.kl_penalty(logp, ref_logp, kind=loss_settings.kl_penalty)
            kl_loss = core_algos.agg_loss(
                kl,
                mask,
                loss_settings.loss_agg_mode,
                num_tokens=num_tokens,
                num_seqs=num_seqs,
                loss_scale_factor=settings.max_response_length,
            )
            loss = loss + loss_settings.kl_coef * kl_loss
            metrics[Metrics.KL_LOSS] = kl_loss.detach()
        metrics[Metrics.ENTROPY] = core_algos.masked_mean(fwd_out[Columns.ENTROPY].detach(), mask)
        metrics[Metrics.MEAN_TOKEN_PROB] = core_algos.masked_mean(logp.detach().exp(), mask)
        return loss, metrics

    def covariance_selection(self, settings: UpdateSettings, batch: dict) -> torch.Tensor:
        """Clip-Cov's / KL-Cov's tokens (`core_algos.covariance_token_selection`) of the mini-batch
        `batch` is this learner's share of: the covariance's means, the top-k and the random draw
        run over every learner's loss tokens (gathered in rank order), so the selection is the
        same in micro-batches and on any number of learners. The log-probs are the old policy's
        where recomputed, else the sampler's (one optimizer step per batch: the old policy is the
        sampling one, up to the rollout mismatch). The draw is seeded by the config's seed, the
        training step and the mini-batch, so a resumed run draws the same tokens."""
        mask = batch[Columns.LOSS_MASK].bool()
        column = Columns.OLD_LOGP if settings.recomputes_old_logp else Columns.ROLLOUT_LOGP
        if column not in batch:
            raise ValueError(
                f"policy_loss={settings.loss.policy_loss!r} selects tokens by the covariance of their advantages and "
                f"log-probs before the forward pass: the batch has no {column!r} column"
            )
        advantages, offset = self.all_gather_tokens(batch[Columns.ADVANTAGES][mask].float())
        log_probs, _ = self.all_gather_tokens(batch[column][mask].float())
        seed = hash((settings.seed, self._num_training_steps, self._minibatch_index)) % 2**63
        chosen = settings.loss.covariance_selection.select(
            advantages,
            log_probs,
            torch.ones_like(advantages, dtype=torch.bool),
            generator=torch.Generator(device=advantages.device).manual_seed(seed),
        )
        selected = torch.zeros_like(mask)
        selected[mask] = chosen[offset : offset + int(mask.sum())]
        return selected

    @override(TorchLearner)
    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        """RLlib's hook: the loss of `batch` in one piece (DAPO's update calls `micro_batch_loss`), by the
        module's settings (`config` is the module's config they were built from)."""
        return self.micro_batch_loss(module_id, self.update_settings(module_id), batch, fwd_out, None)[0]

    # ----- distributed pieces (overridden by the DeepSpeed learner) ------------------------
    @staticmethod
    def world_size() -> int:
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        return torch.distributed.get_world_size() if distributed else 1

    def all_reduce(self, value: torch.Tensor, op=ReduceOp.SUM) -> torch.Tensor:
        """`value` summed (or reduced by `op`) over all data-parallel learners."""
        if self.world_size() == 1:
            return value
        value = value.clone()
        torch.distributed.all_reduce(value, op=op)
        return value

    def all_gather_tokens(self, values: torch.Tensor) -> tuple[torch.Tensor, int]:
        """The 1-D `values` of every data-parallel learner, concatenated in rank order (their
        lengths may differ), and where this learner's start."""
        if self.world_size() == 1:
            return values, 0
        lengths = [torch.zeros((), dtype=torch.long) for _ in range(self.world_size())]
        torch.distributed.all_gather(lengths, torch.tensor(len(values)))
        longest = int(max(lengths))
        padded = [values.new_zeros(longest) for _ in lengths]
        torch.distributed.all_gather(padded, torch.cat([values, values.new_zeros(longest - len(values))]))
        rank = torch.distributed.get_rank()
        return torch.cat([p[: int(n)] for p, n in zip(padded, lengths)]), int(sum(lengths[:rank]))

    def num_forward_passes(self, num_micro_batches: int) -> int:
        """Forward/backward passes this learner runs for its `num_micro_batches`. Plain torch
        needs no collective inside a pass, so every learner runs its own count."""
        return num_micro_batches

    def backward(self, module_id, loss: torch.Tensor, *, last: bool) -> None:
        loss.backward()

    def optimizer_step(self, module_ids: list) -> None:
        """Sum the learners' gradients, check their norm, then RLlib's postprocessing (clipping) and step."""
        self.reduce_gradients()
        grads = {m: {self.get_param_ref(p): p.grad for p in self.get_parameters(self.module[m])} for m in module_ids}
        norms = {m: torch.nn.utils.get_total_norm([g for g in d.values() if g is not None]) for m, d in grads.items()}
        if all([self.check_grad_norm(m, norm) for m, norm in norms.items()]):  # a list: logs every module's
            self.apply_gradients(self.postprocess_gradients({ref: g for d in grads.values() for ref, g in d.items()}))

    def reduce_gradients(self) -> None:
        """Sum the learners' accumulated gradients (each is its share of the global mean).

        Done once per optimizer step rather than by DDP's hooks in every backward pass: the
        learners may run different numbers of micro-batches.
        """
        if self.world_size() == 1:
            return
        for module_id in self.module.keys():
            for param in self.get_parameters(self.module[module_id]):
                if param.grad is None:
                    param.grad = torch.zeros_like(param)
                torch.distributed.all_reduce(param.grad)

    def check_grad_norm(self, module_id, norm) -> bool:
        """DAPO's gradient check, the plain and the DeepSpeed learner's: logs a step's gradient
        norm (before clipping) and whether the step is skipped, as it is (with a warning) when the
        norm is not finite. RLlib would zero the bad entries, or skip per optimizer uncounted."""
        finite = math.isfinite(norm := float(norm))
        self.metrics.log_value((module_id, Metrics.GRAD_NORM), norm if finite else float("nan"), reduce="mean")
        self.metrics.log_value((module_id, Metrics.GRAD_STEPS_SKIPPED), float(not finite), reduce="sum")
        if not finite:
            logger.warning("non-finite gradient norm (%s): skipping this optimizer step", norm)
        return finite

    # ----- weight sync (see dapo_rllib.rollout.weight_sync) -----------------------------------------
    def weight_sync_plan(self, bucket_bytes: int) -> tuple[list[list[Piece]], int]:
        """(buckets of the policy's Hugging Face parameters, weights sequence number). The
        buckets are the same on every learner: shapes are the full ones, also under ZeRO-3."""
        weights = self._synced_weights()
        # A weight's shape and dtype are its first source's (the base parameter of a merged weight).
        first = {name: _sources(weights, name)[0] for name in weights}
        plan = plan_buckets(((name, self.full_shape(p), p.element_size()) for name, p in first.items()), bucket_bytes)
        return plan, learner_weights_seq_no(self)

    def send_weight_bucket(self, bucket: list[Piece], transport: str):
        """Learner rank 0 sends `bucket` and returns the transport's handle; the others return
        None (under ZeRO-3 they take part in gathering the bucket's parameters)."""
        weights = self._synced_weights()
        names = dict.fromkeys(piece.name for piece in bucket)
        with self.gathered([p for name in names for p in _sources(weights, name)]):
            if self.world_size() > 1 and torch.distributed.get_rank() != 0:
                return None
            return TRANSPORTS[transport]().send(bucket_tensors(bucket, weights))

    def _synced_weights(self) -> Mapping[str, torch.Tensor]:
        """What the weight sync sends: every parameter; with LoRA the adapters only, or the weights with
        the adapters merged in (`UpdateSettings.lora_sync_path`, `dapo_rllib.models.lora`)."""
        model = self.module[DEFAULT_MODULE_ID].unwrapped().model
        path = self.update_settings(DEFAULT_MODULE_ID).lora_sync_path
        if path == "adapter":
            return adapter_tensors(model)
        if path == "merged":
            return MergedWeights(model)
        # Tied parameters (a tied lm_head) appear once, as vLLM expects.
        return dict(model.named_parameters())

    @staticmethod
    def full_shape(param: torch.Tensor) -> tuple[int, ...]:
        """A parameter's shape (overridden where parameters are sharded)."""
        return tuple(param.shape)

    def gathered(self, params: list, modify: bool = False):
        """A context in which `params` are whole (overridden where they are sharded)."""
        return contextlib.nullcontext()

    # ----- state ---------------------------------------------------------------------------
    @override(TorchLearner)
    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        state[TRAINING_STEPS] = self._num_training_steps
        return state

    @override(TorchLearner)
    def set_state(self, state) -> None:
        super().set_state(state)
        if TRAINING_STEPS in state:
            self._num_training_steps = state[TRAINING_STEPS]


def _sources(weights: Mapping[str, torch.Tensor], name: str) -> list[torch.Tensor]:
    """The parameters the synced weight ``name`` is read from, the one that gives its shape first."""
    return weights.sources(name) if isinstance(weights, MergedWeights) else [weights[name]]
