"""Policy losses: PPO's clip with Clip-Higher and the dual clip (DAPO, GRPO), GSPO, GSPO-token and CISPO."""

from __future__ import annotations

import torch

from dapo_rllib.algorithm.core_algos.aggregation import agg_loss
from dapo_rllib.algorithm.core_algos.common import (
    _MAX_LOG_RATIO,
    Count,
    _check_clip_range,
    _check_same_shape,
    masked_mean,
)
from dapo_rllib.algorithm.core_algos.registry import register_policy_loss
from dapo_rllib.columns import Metrics

# --------------------------------------------------------------------------
# Policy loss: PPO's clip with Clip-Higher (§2.1)
# --------------------------------------------------------------------------


def clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """PPO's per-token loss ``max(-A r, -A clip(r, low, high))``: the max of the two losses is the
    min of the two objectives, the pessimistic bound (shared by ppo_clip, gspo_token, clip_cov)."""
    return torch.maximum(-advantages * ratio, -advantages * ratio.clamp(low, high))


@register_policy_loss("ppo_clip")
def compute_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.28,
    clip_ratio_c: float | None = None,
    loss_agg_mode: str = "token-mean",
    num_tokens: Count | None = None,
    num_seqs: Count | None = None,
    loss_scale_factor: Count | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate loss with decoupled clip bounds (Clip-Higher): the policy loss ``"ppo_clip"``.

    Per token, with ``r = exp(log_probs - old_log_probs)``::

        l = max(-A * r, -A * clip(r, 1 - clip_eps_low, 1 + clip_eps_high))

    the negative of the paper's ``min(r A, clip(r, ...) A)`` (PPO, Schulman et al., 2017,
    arXiv 1707.06347; naive GRPO is ``clip_eps_high = clip_eps_low`` without the dual clip).
    With ``clip_eps_high > clip_eps_low`` a token with ``A > 0`` may raise its probability
    further before its gradient is cut, which keeps rare "exploration" tokens alive and prevents
    entropy collapse. If ``clip_ratio_c`` is set, tokens with ``A < 0`` are also bounded by the
    dual clip ``l = min(l, -A * c)``: without it a negative-advantage token whose ratio has
    exploded contributes an unbounded loss.

    Args:
        log_probs: [batch, time] log pi_theta of the sampled tokens (carries the gradient).
        old_log_probs: [batch, time] log pi_old of the same tokens.
        advantages: [batch, time] per-token advantage (the sequence's ``A_i`` repeated over its tokens).
        response_mask: [batch, time] 0/1, 1 on response tokens that count.
        clip_eps_low, clip_eps_high: the clip range is ``[1 - clip_eps_low, 1 + clip_eps_high]``;
            DAPO uses 0.2 and 0.28.
        clip_ratio_c: dual-clip constant ``c > 1`` (DAPO scripts: 10), or None for no dual clip.
        loss_agg_mode, num_tokens, num_seqs, loss_scale_factor: passed to ``agg_loss``.

    Returns:
        ``(loss, metrics)``: ``loss`` is a 0-dim tensor; ``metrics`` maps names to detached
        0-dim tensors, each a mean over unmasked tokens:

        - ``pg_clipfrac_low``: fraction with ``A < 0`` and ``r < 1 - eps_low``.
        - ``pg_clipfrac_high``: fraction with ``A > 0`` and ``r > 1 + eps_high``.
        - ``pg_clipfrac_dual``: fraction with ``A < 0`` and ``r > c`` (where the dual clip binds;
          0 when it is off).
        - ``approx_kl``: mean of ``old_log_probs - log_probs``.
        - ``ratio_mean``: mean of ``r``.
    """
    _check_same_shape(
        log_probs=log_probs, old_log_probs=old_log_probs, advantages=advantages, response_mask=response_mask
    )
    _check_clip_range(clip_eps_low, clip_eps_high)
    if clip_ratio_c is not None and clip_ratio_c <= 1:
        raise ValueError(f"clip_ratio_c must be > 1, got {clip_ratio_c}")

    log_ratio = log_probs - old_log_probs
    ratio = torch.exp(log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    low, high = 1 - clip_eps_low, 1 + clip_eps_high
    token_loss = clipped_surrogate(ratio, advantages, low, high)
    if clip_ratio_c is not None:
        token_loss = torch.where(advantages < 0, torch.minimum(token_loss, -advantages * clip_ratio_c), token_loss)
    loss = agg_loss(
        token_loss,
        response_mask,
        loss_agg_mode,
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        loss_scale_factor=loss_scale_factor,
    )
    with torch.no_grad():
        metrics = _clip_metrics(ratio, advantages, response_mask, log_ratio, low, high)
        if clip_ratio_c is not None:
            metrics[Metrics.PG_CLIPFRAC_DUAL] = _dual_clip_fraction(ratio, advantages, response_mask, clip_ratio_c)
    return loss, metrics


def _clip_metrics(ratio, advantages, response_mask, log_ratio, low, high, *, by_sign=True) -> dict[str, torch.Tensor]:
    """Means over the masked tokens: the fractions clipped below ``low`` and above ``high`` (with
    ``by_sign``, as PPO's clip binds: low only where A < 0, high only where A > 0), ``approx_kl``
    and ``ratio_mean``; no dual clip."""
    ratio = ratio.detach()
    below, above = ratio < low, ratio > high
    if by_sign:
        below, above = below & (advantages < 0), above & (advantages > 0)
    return {
        Metrics.PG_CLIPFRAC_LOW: masked_mean(below.to(ratio.dtype), response_mask),
        Metrics.PG_CLIPFRAC_HIGH: masked_mean(above.to(ratio.dtype), response_mask),
        Metrics.PG_CLIPFRAC_DUAL: ratio.new_zeros(()),
        Metrics.APPROX_KL: masked_mean(-log_ratio.detach(), response_mask),
        Metrics.RATIO_MEAN: masked_mean(ratio, response_mask),
    }


def _dual_clip_fraction(ratio, advantages, response_mask, clip_ratio_c: float) -> torch.Tensor:
    """The fraction of masked tokens where the dual clip binds: for A < 0, ``-A c < l`` exactly
    when ``r > c`` (``c > 1 > 1 - eps_low``, so the lower clip never binds there)."""
    ratio = ratio.detach()
    return masked_mean(((advantages < 0) & (ratio > clip_ratio_c)).to(ratio.dtype), response_mask)


# --------------------------------------------------------------------------
# Policy losses of DAPO's neighbours: GSPO (sequence ratio), CISPO (clipped weight)
# --------------------------------------------------------------------------


def _log_ratio(log_probs: torch.Tensor, old_log_probs: torch.Tensor) -> torch.Tensor:
    return (log_probs - old_log_probs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)


def _aggregate(token_loss, response_mask, loss_agg_mode: str, settings: dict) -> torch.Tensor:
    """``agg_loss`` with the denominators among a policy loss's ``settings`` (the others, such as
    ``clip_ratio_c``, are a variant's to ignore)."""
    denominators = {k: settings.get(k) for k in ("num_tokens", "num_seqs", "loss_scale_factor")}
    return agg_loss(token_loss, response_mask, loss_agg_mode, **denominators)


def sequence_log_ratio(
    log_probs: torch.Tensor, old_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """[batch] ``(1 / |o_i|) sum_t log r_{i,t}`` over each sequence's masked tokens: the log of
    GSPO's sequence ratio, the geometric mean of the token ratios (0 for a sequence without tokens)."""
    return masked_mean(_log_ratio(log_probs, old_log_probs), response_mask, dim=-1)


@register_policy_loss("gspo_token", dual_clip=False)
def gspo_token_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_eps_low: float = 3e-4,
    clip_eps_high: float = 4e-4,
    loss_agg_mode: str = "seq-mean-token-mean",
    **settings,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO-token (Zheng et al., 2025, "Group Sequence Policy Optimization", arXiv 2507.18071):
    the policy loss ``"gspo_token"``, PPO's clip on the sequence ratio with per-token advantages.

    Per token, with ``s_i = exp((1/|o_i|) sum_t log r_{i,t})`` (``sequence_log_ratio``)::

        s_{i,t} = sg[s_i] * pi(o_{i,t}) / sg[pi(o_{i,t})]
        l = max(-A_{i,t} s_{i,t}, -A_{i,t} clip(s_{i,t}, 1 - clip_eps_low, 1 + clip_eps_high))

    ``s_{i,t}`` has the value ``s_i`` at every token of ``o_i``; its gradient is that of
    ``log pi(o_{i,t})`` times ``s_i``, so with ``A_{i,t} = A_i`` and ``"seq-mean-token-mean"``
    the loss and its gradient are GSPO's (``"gspo"``). The paper's clip range is 3e-4 / 4e-4:
    the sequence ratio is a geometric mean, far closer to 1 than token ratios. No dual clip.
    Clip fractions count tokens; ``ratio_mean`` is the mean of ``s_{i,t}`` over tokens.
    """
    _check_same_shape(
        log_probs=log_probs, old_log_probs=old_log_probs, advantages=advantages, response_mask=response_mask
    )
    _check_clip_range(clip_eps_low, clip_eps_high)
    seq_log_ratio = sequence_log_ratio(log_probs, old_log_probs, response_mask)
    token_log_ratio = seq_log_ratio.detach().unsqueeze(-1) + log_probs - log_probs.detach()
    ratio = torch.exp(token_log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    low, high = 1 - clip_eps_low, 1 + clip_eps_high
    token_loss = clipped_surrogate(ratio, advantages, low, high)
    loss = _aggregate(token_loss, response_mask, loss_agg_mode, settings)
    with torch.no_grad():
        metrics = _clip_metrics(ratio, advantages, response_mask, _log_ratio(log_probs, old_log_probs), low, high)
    return loss, metrics


@register_policy_loss("gspo", loss_agg_modes=("seq-mean-token-mean",), dual_clip=False)
def gspo_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    **settings,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO (arXiv 2507.18071): the policy loss ``"gspo"``. Per sequence, with its sequence
    ratio ``s_i`` and its advantage ``A_i`` (the mean of its tokens' advantages)::

        l_i = max(-A_i s_i, -A_i clip(s_i, 1 - clip_eps_low, 1 + clip_eps_high))

    averaged over sequences. Computed as ``gspo_token_policy_loss`` with ``A_i`` at every token
    and ``"seq-mean-token-mean"``, the one aggregation the sequence ratio defines (a token mean
    would weigh each sequence's ``l_i`` by its length)."""
    if settings.get("loss_agg_mode", "seq-mean-token-mean") != "seq-mean-token-mean":
        raise ValueError(
            f"policy_loss='gspo' defines one loss per sequence: loss_agg_mode must be "
            f"'seq-mean-token-mean', got {settings['loss_agg_mode']!r} (policy_loss='gspo_token' takes any mode)"
        )
    _check_same_shape(advantages=advantages, response_mask=response_mask)
    sequence_advantage = masked_mean(advantages, response_mask, dim=-1).unsqueeze(-1).expand_as(advantages)
    return gspo_token_policy_loss(
        log_probs,
        old_log_probs,
        sequence_advantage,
        response_mask,
        **settings | {"loss_agg_mode": "seq-mean-token-mean"},
    )


@register_policy_loss("cispo", dual_clip=False, clip_eps_low_may_be_1=True)
def cispo_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_eps_low: float = 1.0,
    clip_eps_high: float = 4.0,
    loss_agg_mode: str = "token-mean",
    **settings,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO (MiniMax, 2025, "MiniMax-M1", arXiv 2506.13585): the policy loss ``"cispo"``.

    Per token, a REINFORCE term weighted by the clipped importance ratio without its gradient::

        l = -sg[clip(r, 1 - clip_eps_low, 1 + clip_eps_high)] * A * log pi(o_t)

    PPO's clip drops the gradient of a token whose ratio left the range; here every token keeps
    ``-w A grad log pi``, only its weight is bounded. ``clip_eps_low = 1`` leaves the weight
    without a lower bound (the paper tunes the upper one only). The loss's value is not a
    surrogate objective (it is ``log pi`` weighted), its gradient is. Clip fractions: tokens
    whose weight was cut below or above its range, whatever the sign of ``A``.
    """
    _check_same_shape(
        log_probs=log_probs, old_log_probs=old_log_probs, advantages=advantages, response_mask=response_mask
    )
    _check_clip_range(clip_eps_low, clip_eps_high, low_may_be_one=True)
    log_ratio = _log_ratio(log_probs, old_log_probs)
    ratio = torch.exp(log_ratio).detach()
    low, high = 1 - clip_eps_low, 1 + clip_eps_high
    token_loss = -ratio.clamp(low, high) * advantages * log_probs
    loss = _aggregate(token_loss, response_mask, loss_agg_mode, settings)
    with torch.no_grad():
        # The weight is cut whatever the advantage's sign.
        metrics = _clip_metrics(ratio, advantages, response_mask, log_ratio, low, high, by_sign=False)
    return loss, metrics
