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
import logging
import math
from collections import defaultdict

import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.torch.torch_learner import TorchLearner

from dapo_rllib import core_algos
from dapo_rllib.columns import Columns, Metrics
from dapo_rllib.micro_batching import padding_fraction, plan_for_batch, take
from dapo_rllib.rl_module import response_logprobs
from dapo_rllib.weight_sync import TRANSPORTS, Piece, bucket_tensors, plan_buckets

logger = logging.getLogger(__name__)

TRAINING_STEPS = "num_training_steps"
LOSS_TERMS = (Metrics.POLICY_LOSS, Metrics.KL_LOSS)  # summed over micro-batches; other metrics are token means
MAX_TERMS = (Metrics.ROLLOUT_LOGP_ABS_DIFF_MAX,)  # the largest over micro-batches and learners
LOSS_TOKENS = "_loss_tokens"  # the weight of those means


class DAPOTorchLearner(TorchLearner):
    def build(self) -> None:
        super().build()
        self._num_training_steps = 0
        self._skip_step = False
        self._mini_batch_counts = None  # (loss tokens, sequences) of the mini-batch being run
        self._piece_metrics = {}  # metrics of the last micro-batch's loss
        self._ref_models = {}
        if self.config.kl_coef > 0:
            # A frozen copy of the initial policy for the KL term.
            for mid in self.module.keys():
                ref = copy.deepcopy(self.module[mid].unwrapped().model).eval()
                ref.requires_grad_(False)
                self._ref_models[mid] = ref

    # ----- optimizer and schedule ----------------------------------------------------------
    def configure_optimizers_for_module(self, module_id, config=None):
        params = [p for p in self.get_parameters(self.module[module_id]) if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay, betas=(0.9, 0.999))
        self.register_optimizer(module_id=module_id, optimizer=optimizer, params=params, lr_or_lr_schedule=None)

    def scheduled_lr(self, config) -> float:
        """Linear warmup over `lr_warmup_steps` training steps, then constant.

        Step k (0-based) uses lr * (k + 1) / warmup, so the very first step already learns.
        """
        if config.lr_warmup_steps <= 0:
            return config.lr
        return config.lr * min(1.0, (self._num_training_steps + 1) / config.lr_warmup_steps)

    def before_gradient_based_update(self, *, timesteps):
        super().before_gradient_based_update(timesteps=timesteps)
        for module_id in self.module.keys():
            lr = self.scheduled_lr(self.config.get_config_for_module(module_id))
            for _, optimizer in self.get_optimizers_for_module(module_id):
                for group in optimizer.param_groups:
                    group["lr"] = lr

    def after_gradient_based_update(self, *, timesteps):
        super().after_gradient_based_update(timesteps=timesteps)
        self._num_training_steps += 1

    # ----- one optimizer step: micro-batches and gradient accumulation ---------------------
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
        losses = {module_id: self._accumulate_gradients(module_id, module_batch) for module_id, module_batch in batch.items()}
        self.optimizer_step(list(batch))
        return {}, losses, {}

    def _accumulate_gradients(self, module_id, batch: dict) -> torch.Tensor:
        """Forward and backward of every micro-batch; returns the mini-batch's (global) loss."""
        config = self.config.get_config_for_module(module_id)
        module = self.module[module_id].unwrapped()
        mask = batch[Columns.LOSS_MASK]
        # The denominators of the whole mini-batch (DAPO §2.3: a token mean, not a mean of means).
        self._mini_batch_counts = (self.all_reduce_sum(mask.sum()).clamp_min(1), self.all_reduce_sum((mask.sum(-1) > 0).sum().float()).clamp_min(1))
        plan = plan_for_batch(batch, config.micro_batch_token_budget)
        sums: dict[str, torch.Tensor] = defaultdict(lambda: torch.zeros((), dtype=torch.float64))
        maxima: dict[str, torch.Tensor] = defaultdict(lambda: torch.zeros((), dtype=torch.float64))
        passes = self.num_forward_passes(len(plan))
        try:
            for i in range(passes):
                # Passes past this learner's own micro-batches repeat its last one with no weight.
                piece = take(batch, plan[min(i, len(plan) - 1)])
                loss = self.compute_loss_for_module(module_id=module_id, config=config, batch=piece, fwd_out=module.forward_train(piece))
                if i >= len(plan):
                    self.backward(module_id, loss * 0.0, last=i == passes - 1)
                    continue
                self.backward(module_id, loss, last=i == passes - 1)
                weight = piece[Columns.LOSS_MASK].sum().double()
                for key, value in self._piece_metrics.items():
                    if key in MAX_TERMS:
                        maxima[key] = torch.maximum(maxima[key], value.double())
                    else:
                        sums[key] += value.double() if key in LOSS_TERMS else value.double() * weight
                sums[LOSS_TOKENS] += weight
        finally:
            self._mini_batch_counts = None
        totals = dict(zip(sums, self.all_reduce_sum(torch.stack(list(sums.values()))).tolist()))
        totals |= dict(zip(maxima, self.all_reduce_max(torch.stack(list(maxima.values()))).tolist())) if maxima else {}
        for key, value in totals.items():
            if key != LOSS_TOKENS:
                self.metrics.log_value((module_id, key), value if key in LOSS_TERMS + MAX_TERMS else value / max(totals[LOSS_TOKENS], 1.0), reduce="mean")
        self.metrics.log_value((module_id, Metrics.PADDING_FRACTION), padding_fraction(plan, batch), reduce="mean")
        self.metrics.log_value((module_id, Metrics.MICRO_BATCHES), float(len(plan)), reduce="mean")
        return torch.tensor(totals[Metrics.POLICY_LOSS] + config.kl_coef * totals.get(Metrics.KL_LOSS, 0.0))

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        """The loss of one micro-batch, divided by its mini-batch's counts (so the pieces sum up
        to the mini-batch's loss). Its metrics go to `_piece_metrics`: loss terms as they are,
        the rest as means over the piece's loss tokens."""
        mask = batch[Columns.LOSS_MASK]
        # Called on its own (not from `_accumulate_gradients`), `batch` is the whole mini-batch.
        num_tokens, num_seqs = self._mini_batch_counts or (None, None)
        logp = fwd_out[Columns.LOGP]
        # One optimizer step per batch: the old policy is the current one (ratio 1), no recompute.
        old_logp = batch[Columns.OLD_LOGP] if config.recomputes_old_logp else logp.detach()
        rollout_logp = batch.get(Columns.ROLLOUT_LOGP)
        if rollout_logp is None and config.rollout_correction is not None:
            raise ValueError(f"rollout_correction={config.rollout_correction!r} needs the sampler's log-probs: the batch has no {Columns.ROLLOUT_LOGP!r} column")
        # A batch built elsewhere (not by VLLMEnvRunner) may carry no sampler log-probs.
        rollout_metrics = {} if rollout_logp is None else core_algos.rollout_mismatch(old_logp, rollout_logp, mask)
        weights, correction_metrics = core_algos.rollout_correction_weights(old_logp, rollout_logp, mask, mode=config.rollout_correction, cap=config.rollout_is_cap) if rollout_logp is not None else (None, {})
        advantages = batch[Columns.ADVANTAGES] if weights is None else batch[Columns.ADVANTAGES] * weights
        loss, metrics = core_algos.policy_loss_fn(config.policy_loss)(
            logp,
            old_logp,
            advantages,
            mask,
            clip_eps_low=config.clip_eps_low,
            clip_eps_high=config.clip_eps_high,
            clip_ratio_c=config.clip_ratio_c,
            loss_agg_mode=config.loss_agg_mode,
            num_tokens=num_tokens,
            num_seqs=num_seqs,
            loss_scale_factor=config.max_response_length,
        )
        metrics |= rollout_metrics | correction_metrics
        metrics[Metrics.POLICY_LOSS] = loss.detach()
        if config.kl_coef > 0:
            with torch.no_grad():
                ref_logp = response_logprobs(self._ref_models[module_id], batch, config.temperature)[Columns.LOGP]
            kl = core_algos.kl_penalty(logp, ref_logp, kind=config.kl_penalty)
            kl_loss = core_algos.agg_loss(kl, mask, config.loss_agg_mode, num_tokens=num_tokens, num_seqs=num_seqs, loss_scale_factor=config.max_response_length)
            loss = loss + config.kl_coef * kl_loss
            metrics[Metrics.KL_LOSS] = kl_loss.detach()
        metrics[Metrics.ENTROPY] = core_algos.masked_mean(fwd_out[Columns.ENTROPY].detach(), mask)
        metrics[Metrics.MEAN_TOKEN_PROB] = core_algos.masked_mean(logp.detach().exp(), mask)
        self._piece_metrics = metrics
        return loss

    # ----- distributed pieces (overridden by the DeepSpeed learner) ------------------------
    @staticmethod
    def world_size() -> int:
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        return torch.distributed.get_world_size() if distributed else 1

    def all_reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        """`value` summed over all data-parallel learners."""
        if self.world_size() == 1:
            return value
        value = value.clone()
        torch.distributed.all_reduce(value)
        return value

    def all_reduce_max(self, value: torch.Tensor) -> torch.Tensor:
        """`value`'s maximum over all data-parallel learners."""
        if self.world_size() == 1:
            return value
        value = value.clone()
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
        return value

    def num_forward_passes(self, num_micro_batches: int) -> int:
        """Forward/backward passes this learner runs for its `num_micro_batches`. Plain torch
        needs no collective inside a pass, so every learner runs its own count."""
        return num_micro_batches

    def backward(self, module_id, loss: torch.Tensor, *, last: bool) -> None:
        loss.backward()

    def optimizer_step(self, module_ids: list) -> None:
        """Sum the learners' gradients, then RLlib's postprocessing (clipping) and step."""
        self.reduce_gradients()
        gradients = {self.get_param_ref(p): p.grad for module_id in module_ids for p in self.get_parameters(self.module[module_id])}
        self.apply_gradients(self.postprocess_gradients(gradients))

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

    # ----- gradients -----------------------------------------------------------------------
    def postprocess_gradients_for_module(self, *, module_id, config=None, module_gradients_dict):
        """RLlib's clipping (`grad_clip`, `grad_clip_by`), after a check of DAPO's own: a
        non-finite gradient norm skips the optimizer step (RLlib would zero the bad entries, or
        skip per optimizer without counting it)."""
        grads = [g for g in module_gradients_dict.values() if g is not None]
        norm = torch.nn.utils.get_total_norm(grads).item() if grads else 0.0
        self._skip_step = not math.isfinite(norm)
        self.metrics.log_value((module_id, Metrics.GRAD_NORM), norm if not self._skip_step else float("nan"), reduce="mean")
        self.metrics.log_value((module_id, Metrics.GRAD_STEPS_SKIPPED), float(self._skip_step), reduce="sum")
        if self._skip_step:
            logger.warning("non-finite gradient norm (%s): skipping this optimizer step", norm)
            return module_gradients_dict
        return super().postprocess_gradients_for_module(module_id=module_id, config=config, module_gradients_dict=module_gradients_dict)

    def apply_gradients(self, gradients_dict) -> None:
        # TorchLearner.compute_gradients zeroes the gradients before the next backward pass.
        if not self._skip_step:
            super().apply_gradients(gradients_dict)

    # ----- weight sync (see dapo_rllib.weight_sync) -----------------------------------------
    def weight_sync_plan(self, bucket_bytes: int) -> tuple[list[list[Piece]], int]:
        """(buckets of the policy's Hugging Face parameters, weights sequence number). The
        buckets are the same on every learner: shapes are the full ones, also under ZeRO-3."""
        params = self._hf_parameters()
        plan = plan_buckets(((name, self.full_shape(p), p.element_size()) for name, p in params.items()), bucket_bytes)
        return plan, self._weights_seq_no

    def send_weight_bucket(self, bucket: list[Piece], transport: str):
        """Learner rank 0 sends `bucket` and returns the transport's handle; the others return
        None (under ZeRO-3 they take part in gathering the bucket's parameters)."""
        params = self._hf_parameters()
        with self.gathered([params[name] for name in dict.fromkeys(piece.name for piece in bucket)]):
            if self.world_size() > 1 and torch.distributed.get_rank() != 0:
                return None
            return TRANSPORTS[transport]().send(bucket_tensors(bucket, params))

    def _hf_parameters(self) -> dict[str, torch.Tensor]:
        # Tied parameters (a tied lm_head) appear once, as vLLM expects.
        return dict(self.module[DEFAULT_MODULE_ID].unwrapped().model.named_parameters())

    @staticmethod
    def full_shape(param: torch.Tensor) -> tuple[int, ...]:
        """A parameter's shape (overridden where parameters are sharded)."""
        return tuple(param.shape)

    def gathered(self, params: list, modify: bool = False):
        """A context in which `params` are whole (overridden where they are sharded)."""
        return contextlib.nullcontext()

    # ----- state ---------------------------------------------------------------------------
    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        state[TRAINING_STEPS] = self._num_training_steps
        return state

    def set_state(self, state) -> None:
        super().set_state(state)
        if TRAINING_STEPS in state:
            self._num_training_steps = state[TRAINING_STEPS]
