"""Clip-Cov and KL-Cov (arXiv 2505.22617): token covariance, the token selection, and their policy losses."""

from __future__ import annotations

import dataclasses
import math

import torch

from dapo_rllib.algorithm.core_algos.common import (
    _check_clip_range,
    _check_same_shape,
    masked_mean,
)
from dapo_rllib.algorithm.core_algos.policy_losses import _aggregate, _clip_metrics, _log_ratio, clipped_surrogate
from dapo_rllib.algorithm.core_algos.registry import register_policy_loss
from dapo_rllib.columns import Metrics

# --------------------------------------------------------------------------
# The entropy mechanism's losses: Clip-Cov and KL-Cov (covariance-selected tokens)
# --------------------------------------------------------------------------


def token_covariance(advantages: torch.Tensor, log_probs: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Per token, ``(A_t - mean A) * (log pi_t - mean log pi)`` with both means over the masked
    tokens (0 elsewhere): each token's term of the covariance between its log-prob and its
    advantage, which drives the policy's entropy down when positive (Cui et al., 2025, "The
    Entropy Mechanism of Reinforcement Learning for Reasoning Language Models", arXiv 2505.22617)."""
    _check_same_shape(advantages=advantages, log_probs=log_probs, response_mask=response_mask)
    keep = response_mask.bool()
    centred_a = advantages - masked_mean(advantages, keep)
    centred_logp = log_probs - masked_mean(log_probs, keep)
    return (centred_a * centred_logp).masked_fill(~keep, 0)


@dataclasses.dataclass(frozen=True)
class CovarianceSelection:
    """Which tokens Clip-Cov / KL-Cov treat apart: a ``ratio`` of the loss tokens, drawn from the
    covariance ``band`` (Clip-Cov) or, with no band, those of largest covariance (KL-Cov)."""

    ratio: float
    band: tuple[float, float] | None = None

    def select(
        self,
        advantages: torch.Tensor,
        log_probs: torch.Tensor,
        response_mask: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """`covariance_token_selection` with these settings."""
        return covariance_token_selection(
            advantages, log_probs, response_mask, ratio=self.ratio, band=self.band, generator=generator
        )


def covariance_token_selection(
    advantages: torch.Tensor,
    log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    ratio: float,
    band: tuple[float, float] | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """The tokens Clip-Cov and KL-Cov treat apart: a bool mask of ``k = max(1, int(ratio * N))``
    of the ``N`` masked tokens (none when ``N = 0``), by their ``token_covariance``.

    - ``band=None`` (KL-Cov): the ``k`` tokens of largest covariance.
    - ``band=(lb, ub)`` (Clip-Cov): ``k`` tokens drawn uniformly (with ``generator``) among those
      with ``lb < cov < ub``; all of them when there are fewer.

    Computed over whatever the call is given: the learner passes a whole mini-batch (all
    learners' tokens), so the selection does not depend on how the mini-batch is cut up.
    """
    if not 0 < ratio <= 1:
        raise ValueError(f"the covariance selection ratio must be in (0, 1], got {ratio}")
    if band is not None and not band[0] < band[1]:
        raise ValueError(f"the covariance band (lb, ub) must have lb < ub, got {tuple(band)}")
    keep = response_mask.bool()
    covariance = token_covariance(advantages, log_probs, keep)
    selected = torch.zeros_like(keep)
    num_valid = int(keep.sum())
    if num_valid == 0:
        return selected
    k = max(1, int(ratio * num_valid))
    flat_selected = selected.view(-1)
    if band is None:
        flat_selected[covariance.masked_fill(~keep, -math.inf).view(-1).topk(k).indices] = True
        return selected
    candidates = (keep & (covariance > band[0]) & (covariance < band[1])).view(-1).nonzero().squeeze(-1)
    chosen = torch.randperm(len(candidates), generator=generator, device=candidates.device)[:k]
    flat_selected[candidates[chosen]] = True
    return selected


@register_policy_loss("clip_cov", dual_clip=False, clip_eps_low_may_be_1=True, covariance_selection="band")
def clip_cov_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    selected: torch.Tensor,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.28,
    loss_agg_mode: str = "token-mean",
    **settings,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clip-Cov (arXiv 2505.22617): the policy loss ``"clip_cov"``. PPO's clipped loss, except
    that the ``selected`` tokens (``covariance_token_selection`` with a band: a few tokens of
    high covariance, drawn at random) contribute 0 and no gradient; they still count in the
    aggregation's denominators. The authors run it with clip bounds of 1 and 1 (the ratio's
    clip then binds above 2 only), ratio 2e-4 and band (1, 5). No dual clip.

    verl excludes tokens PPO has already clipped from the draw; here the draw happens before
    the forward pass (over the whole mini-batch), so a drawn token may also be clipped (its
    gradient was 0 either way): with the authors' ratio and bounds both are rare.
    """
    _check_same_shape(
        log_probs=log_probs,
        old_log_probs=old_log_probs,
        advantages=advantages,
        response_mask=response_mask,
        selected=selected,
    )
    _check_clip_range(clip_eps_low, clip_eps_high, low_may_be_one=True)
    log_ratio = _log_ratio(log_probs, old_log_probs)
    ratio = torch.exp(log_ratio)
    low, high = 1 - clip_eps_low, 1 + clip_eps_high
    token_loss = clipped_surrogate(ratio, advantages, low, high)
    loss = _aggregate(token_loss.masked_fill(selected.bool(), 0), response_mask, loss_agg_mode, settings)
    with torch.no_grad():
        metrics = _clip_metrics(ratio, advantages, response_mask, log_ratio, low, high)
        metrics[Metrics.COV_SELECTED_FRACTION] = masked_mean(selected.to(ratio.dtype), response_mask)
    return loss, metrics


@register_policy_loss("kl_cov", dual_clip=False, covariance_selection="top")
def kl_cov_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    selected: torch.Tensor,
    kl_cov_coef: float = 1.0,
    loss_agg_mode: str = "token-mean",
    **settings,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """KL-Cov (arXiv 2505.22617): the policy loss ``"kl_cov"``. The unclipped surrogate
    ``-A r`` at every token, plus ``kl_cov_coef * |log pi - log pi_old|`` at the ``selected``
    tokens (``covariance_token_selection`` without a band: the largest covariances), which
    holds those tokens near the old policy. No clip at all (clip_eps_low / clip_eps_high are
    not used); the authors' settings: ratio 2e-3 (7B) or 2e-4 (32B), coefficient 1. On the
    first mini-batch of a step the two policies are equal: ``|log r|`` is 0 and has no
    gradient there, the penalty acts from the second optimizer step on.
    """
    _check_same_shape(
        log_probs=log_probs,
        old_log_probs=old_log_probs,
        advantages=advantages,
        response_mask=response_mask,
        selected=selected,
    )
    if kl_cov_coef < 0:
        raise ValueError(f"kl_cov_coef must be >= 0, got {kl_cov_coef}")
    log_ratio = _log_ratio(log_probs, old_log_probs)
    ratio = torch.exp(log_ratio)
    token_loss = -advantages * ratio + kl_cov_coef * log_ratio.abs() * selected.to(ratio.dtype)
    loss = _aggregate(token_loss, response_mask, loss_agg_mode, settings)
    with torch.no_grad():
        metrics = _clip_metrics(ratio, advantages, response_mask, log_ratio, -math.inf, math.inf)
        metrics[Metrics.COV_SELECTED_FRACTION] = masked_mean(selected.to(ratio.dtype), response_mask)
    return loss, metrics
