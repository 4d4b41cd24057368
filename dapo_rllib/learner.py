"""DAPOTorchLearner: the DAPO loss, AdamW, warmup schedule and gradient safety on RLlib's TorchLearner.

One `update()` call is one DAPO training step; RLlib's mini-batch iterator runs one optimizer
step per mini-batch of `minibatch_size_prompts * group_size` sequences. The loss is computed by
`core_algos.compute_policy_loss`; this class only feeds it and logs.
"""

from __future__ import annotations

import copy
import logging
import math

import torch
from ray.rllib.core.learner.torch.torch_learner import TorchLearner

from dapo_rllib import core_algos
from dapo_rllib.columns import Columns, Metrics
from dapo_rllib.rl_module import response_logprobs

logger = logging.getLogger(__name__)

TRAINING_STEPS = "num_training_steps"


class DAPOTorchLearner(TorchLearner):
    def build(self) -> None:
        super().build()
        self._num_training_steps = 0
        self._skip_step = False
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

    # ----- loss ----------------------------------------------------------------------------
    def _global_count(self, count: torch.Tensor) -> torch.Tensor:
        """A count over the whole mini-batch, divided by the learner count.

        With several data-parallel learners DDP averages their gradients; dividing each
        learner's sum by (global count / world size) makes that average the exact global
        token mean (DAPO §2.3), never a mean of per-learner means.
        """
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            count = count.clone()
            torch.distributed.all_reduce(count)
            return count / torch.distributed.get_world_size()
        return count

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        mask = batch[Columns.LOSS_MASK]
        logp = fwd_out[Columns.LOGP]
        loss, metrics = core_algos.policy_loss_fn(config.policy_loss)(
            logp,
            batch[Columns.OLD_LOGP],
            batch[Columns.ADVANTAGES],
            mask,
            clip_eps_low=config.clip_eps_low,
            clip_eps_high=config.clip_eps_high,
            clip_ratio_c=config.clip_ratio_c,
            loss_agg_mode=config.loss_agg_mode,
            num_tokens=self._global_count(mask.sum()),
            num_seqs=self._global_count((mask.sum(-1) > 0).sum().float()),
            loss_scale_factor=config.max_response_length,
        )
        metrics[Metrics.POLICY_LOSS] = loss.detach()
        if config.kl_coef > 0:
            with torch.no_grad():
                ref_logp = response_logprobs(self._ref_models[module_id], batch, config.temperature)[Columns.LOGP]
            kl = core_algos.kl_penalty(logp, ref_logp, kind=config.kl_penalty)
            kl_loss = core_algos.agg_loss(kl, mask, config.loss_agg_mode, loss_scale_factor=config.max_response_length)
            loss = loss + config.kl_coef * kl_loss
            metrics[Metrics.KL_LOSS] = kl_loss.detach()
        metrics[Metrics.ENTROPY] = core_algos.masked_mean(fwd_out[Columns.ENTROPY].detach(), mask)
        metrics[Metrics.MEAN_TOKEN_PROB] = core_algos.masked_mean(logp.detach().exp(), mask)
        for key, value in metrics.items():
            self.metrics.log_value((module_id, key), value.item(), reduce="mean")
        return loss

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

    # ----- state ---------------------------------------------------------------------------
    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        state[TRAINING_STEPS] = self._num_training_steps
        return state

    def set_state(self, state) -> None:
        super().set_state(state)
        if TRAINING_STEPS in state:
            self._num_training_steps = state[TRAINING_STEPS]
