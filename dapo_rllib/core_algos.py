"""The DAPO math as pure functions: tensors in, tensors out.

Nothing here knows about Ray, vLLM or trainer state, so every function can be
checked against the paper (Yu et al., 2025, "DAPO: An Open-Source LLM
Reinforcement Learning System at Scale", arXiv 2503.14476) and tested on small
hand-made tensors. The paper's techniques are named by its section titles;
``§`` numbers point to the project's design notes, ``docs/algorithm.md``.

Notation: ``G`` responses ``o_1..o_G`` per prompt, reward ``R_i`` per response,
``r_{i,t} = pi_theta(o_{i,t} | ...) / pi_old(o_{i,t} | ...)`` per token.

=================================  ==============================================
function                           paper
=================================  ==============================================
``compute_group_advantages``       GRPO advantage (§1), used unchanged by DAPO:
                                   ``A_i = (R_i - mean_g R) / (std_g R + eps)``,
                                   the same for every token of ``o_i``.
                                   Advantage estimator ``"grpo"``;
                                   ``"dr_grpo"`` drops the std.
``compute_policy_loss``            per-token term of the DAPO objective with
                                   Clip-Higher (§2.1):
                                   ``-min(r A, clip(r, 1-eps_low, 1+eps_high) A)``
                                   plus verl's dual clip for ``A < 0``.
                                   Policy loss ``"ppo_clip"``.
``agg_loss``                       Token-Level Policy Gradient Loss (§2.3):
                                   ``sum_{i,t} l_{i,t} / sum_i |o_i|``
                                   ("token-mean"), and the GRPO / Dr. GRPO
                                   alternatives for ablations.
``filter_groups``                  Dynamic Sampling (§2.2): keep a prompt only if
                                   ``0 < |{o_i correct}| < G``, i.e. its group's
                                   metric has a non-zero spread.
``overlong_penalty``               Soft Overlong Punishment, part of Overlong
                                   Reward Shaping (§2.4): ``R_length``.
``rollout_correction_weights``,    not in the paper: truncated importance weights
``rollout_mismatch``               ``min(pi_old / pi_rollout, C)`` for sampling
                                   from vLLM rather than the learner, and the
                                   mismatch they correct (docs/scaling.md §5).
``kl_penalty``                     the KL term DAPO removes (beta = 0, §1); kept
                                   for GRPO baselines.
``masked_mean``,                   helpers for the learner's metrics (entropy is
``entropy_from_logits``            the quantity whose collapse Clip-Higher
                                   prevents).
=================================  ==============================================

Policy losses and advantage estimators are looked up by name, so that naive
GRPO, DAPO, Dr. GRPO or a user's variant is a matter of config values (as in
verl): ``register_policy_loss(name)`` / ``register_adv_estimator(name)``
decorate a new one, ``policy_loss_fn(name)`` / ``adv_estimator_fn(name)`` find
one, ``policy_losses()`` / ``adv_estimators()`` list the names registered so
far.

Masks are 0/1 (bool or any numeric dtype) with the shape of the values they
mask. Masked positions are dropped with ``masked_fill`` rather than multiplied
by zero, so a non-finite value at a padding position (``0 * inf = nan``) can
never leak into a loss or a metric.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Hashable, Sequence

import numpy as np
import torch

from dapo_rllib.columns import Metrics

__all__ = [
    "KL_PENALTY_KINDS",
    "LOSS_AGG_MODES",
    "ROLLOUT_CORRECTIONS",
    "adv_estimator_fn",
    "adv_estimators",
    "agg_loss",
    "cispo_policy_loss",
    "clip_cov_policy_loss",
    "compute_advantages",
    "compute_group_advantages",
    "compute_policy_loss",
    "covariance_token_selection",
    "dr_grpo_advantages",
    "entropy_from_logits",
    "filter_groups",
    "gspo_policy_loss",
    "gspo_token_policy_loss",
    "kl_cov_policy_loss",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "opo_advantages",
    "overlong_penalty",
    "policy_loss_fn",
    "policy_loss_traits",
    "policy_losses",
    "register_adv_estimator",
    "register_policy_loss",
    "reinforce_plus_plus_advantages",
    "reinforce_plus_plus_baseline_advantages",
    "rloo_advantages",
    "rollout_correction_weights",
    "rollout_mismatch",
    "sequence_log_ratio",
    "token_covariance",
]

# A count or normaliser: a Python number, or a 0-dim tensor (for instance a
# token count all-reduced across learners).
Count = int | float | torch.Tensor
GroupIds = torch.Tensor | np.ndarray | Sequence[Hashable]

# Log-ratios are clamped to [-20, 20] before exp: unclamped, exp overflows
# float32 to inf from ~88 on, and inf times a zero advantage (or a zero
# upstream gradient) is nan. exp(20) ~ 4.9e8 is far past any clip bound, so the
# clamp only reaches tokens the clip (for A < 0: the dual clip) has already cut
# off; without the dual clip such a token's loss stops growing at |A| * e^20.
_MAX_LOG_RATIO = 20.0


def _check_positive(name: str, value: Count | None) -> None:
    """Reject a non-positive Python number; tensors pass unchecked so that
    validating them does not force a host-device sync."""
    if value is not None and not isinstance(value, torch.Tensor) and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")


def _choice(table: dict, key: str, setting: str, plural: str):
    """``table[key]``, or a ValueError naming the unknown ``setting`` and the valid ones."""
    try:
        return table[key]
    except KeyError:
        raise ValueError(f"unknown {setting} {key!r}; valid {plural}: {', '.join(table)}") from None


def _check_clip_range(clip_eps_low: float, clip_eps_high: float, *, low_may_be_one: bool = False) -> None:
    """The clip range ``[1 - clip_eps_low, 1 + clip_eps_high]`` must hold 1 and have a lower
    bound >= 0 (> 0 unless ``low_may_be_one``: a weight's range may start at 0, a ratio's may not)."""
    if not (0 <= clip_eps_low <= 1 if low_may_be_one else 0 <= clip_eps_low < 1):
        raise ValueError(f"clip_eps_low must be in [0, {'1]' if low_may_be_one else '1)'}, got {clip_eps_low}")
    if clip_eps_high < 0:
        raise ValueError(f"clip_eps_high must be >= 0, got {clip_eps_high}")


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        described = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(f"shapes must match, got {described}")


# --------------------------------------------------------------------------
# Registries: the policy loss and the advantage estimator are config values.
# --------------------------------------------------------------------------


class _Registry:
    """Functions by the name a config gives them; ``register(name)`` is a decorator."""

    def __init__(self, setting: str, plural: str):
        self.setting, self.plural = setting, plural
        self.table: dict[str, Callable] = {}
        self._traits: dict[str, dict] = {}

    def register(self, name: str, **traits) -> Callable[[Callable], Callable]:
        """Register the decorated function as ``name``; ``traits`` are what a config checks
        its other settings against (e.g. a policy loss's ``loss_agg_modes``)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.setting} name must be a non-empty string, got {name!r}")

        def decorator(fn: Callable) -> Callable:
            if name in self.table:
                raise ValueError(f"{self.setting} {name!r} is already registered; choose another name")
            self.table[name] = fn
            self._traits[name] = traits
            return fn

        return decorator

    def traits(self, name: str) -> dict:
        """The traits ``name`` was registered with ({} for an import path)."""
        return self._traits.get(name, {})

    def lookup(self, name: str) -> Callable:
        """The function registered as ``name``, or at import path ``"package.module:function"``."""
        # An import path reaches learners and Tune trials, which run in other processes than
        # the driver and so miss what its script registered.
        if isinstance(name, str) and ":" in name and name not in self.table:
            module, function = name.split(":", 1)
            return getattr(importlib.import_module(module), function)
        return _choice(self.table, name, self.setting, self.plural)

    def names(self) -> tuple[str, ...]:
        """Names registered so far, built-ins first."""
        return tuple(self.table)


# A policy loss is called as
#     fn(log_probs, old_log_probs, advantages, response_mask, *, clip_eps_low, clip_eps_high,
#        clip_ratio_c, loss_agg_mode, num_tokens=None, num_seqs=None, loss_scale_factor=None)
#     -> (0-dim loss, {metric name: detached 0-dim tensor})
# with the tensors and settings of `compute_policy_loss`; a variant takes **kwargs for the
# settings it does not use. Its traits: `loss_agg_modes` (the modes it defines; default all),
# `dual_clip` (whether it takes clip_ratio_c; default True) and `clip_eps_low_may_be_1` (its
# clip bounds a weight, whose range may start at 0; default False) and `covariance_selection`
# ("band": it takes `selected`, Clip-Cov's draw from a covariance band; "top": KL-Cov's largest
# covariances, and `kl_cov_coef`; see `covariance_token_selection`; default None).
#
# An advantage estimator is `fn(scores [n], group_ids [n]) -> [n]` (one advantage per
# response), or takes `response_mask` [n, T] as a keyword (the tokens in the loss: response
# lengths, token-level normalisation) and may return [n, T]; `compute_advantages` calls either.
_POLICY_LOSSES = _Registry("policy_loss", "policy losses")
_ADV_ESTIMATORS = _Registry("adv_estimator", "advantage estimators")
register_policy_loss, policy_loss_fn, policy_losses, policy_loss_traits = (
    _POLICY_LOSSES.register,
    _POLICY_LOSSES.lookup,
    _POLICY_LOSSES.names,
    _POLICY_LOSSES.traits,
)
register_adv_estimator, adv_estimator_fn, adv_estimators = (
    _ADV_ESTIMATORS.register,
    _ADV_ESTIMATORS.lookup,
    _ADV_ESTIMATORS.names,
)


# --------------------------------------------------------------------------
# Masked reductions
# --------------------------------------------------------------------------


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over the positions where ``mask`` is 1.

    Args:
        x: any shape.
        mask: 0/1, same shape as ``x``.
        dim: reduce over this dimension only; ``None`` reduces over all.

    Returns:
        0-dim tensor when ``dim`` is None, else ``x`` with ``dim`` removed.
        A slice with no unmasked position gives 0, not nan.
    """
    keep = mask.bool()
    total = x.masked_fill(~keep, 0).sum(dim=dim)
    count = keep.sum(dim=dim)
    return total / count.clamp_min(1)


# --------------------------------------------------------------------------
# Loss aggregation (§2.3, Token-Level Policy Gradient Loss).
# One registry; `agg_loss` is the only entry point.
# --------------------------------------------------------------------------


def _mean_over_sequences(per_seq: torch.Tensor, tokens_per_seq: torch.Tensor, num_seqs: Count | None) -> torch.Tensor:
    """``sum(per_seq) / num_seqs``; ``num_seqs`` defaults to the number of
    sequences with at least one unmasked token (the others hold 0 in
    ``per_seq``)."""
    if num_seqs is None:
        num_seqs = (tokens_per_seq > 0).sum().clamp_min(1)
    return per_seq.sum() / num_seqs


def _token_mean(masked_loss, keep, *, num_tokens, num_seqs, loss_scale_factor):
    # DAPO: every token of every response weighs the same, whatever the
    # length of the response it belongs to.
    if num_tokens is None:
        num_tokens = keep.sum().clamp_min(1)
    return masked_loss.sum() / num_tokens


def _seq_mean_token_mean(masked_loss, keep, *, num_tokens, num_seqs, loss_scale_factor):
    # GRPO: 1/G sum_i 1/|o_i| sum_t, so a long response's tokens weigh less.
    tokens_per_seq = keep.sum(dim=-1)
    per_seq = masked_loss.sum(dim=-1) / tokens_per_seq.clamp_min(1)
    return _mean_over_sequences(per_seq, tokens_per_seq, num_seqs)


def _seq_mean_token_sum(masked_loss, keep, *, num_tokens, num_seqs, loss_scale_factor):
    tokens_per_seq = keep.sum(dim=-1)
    return _mean_over_sequences(masked_loss.sum(dim=-1), tokens_per_seq, num_seqs)


def _seq_mean_token_sum_norm(masked_loss, keep, *, num_tokens, num_seqs, loss_scale_factor):
    # Dr. GRPO: replace 1/|o_i| by one constant (the maximum response length)
    # so that no response is re-weighted by its own length. verl sums (rather
    # than averages) the sequences here; that differs by the constant number of
    # sequences, i.e. only in the learning-rate scale.
    if loss_scale_factor is None:
        loss_scale_factor = keep.shape[-1]
    tokens_per_seq = keep.sum(dim=-1)
    per_seq = masked_loss.sum(dim=-1) / loss_scale_factor
    return _mean_over_sequences(per_seq, tokens_per_seq, num_seqs)


_AGG_FNS: dict[str, Callable[..., torch.Tensor]] = {
    "token-mean": _token_mean,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
    "seq-mean-token-sum-norm": _seq_mean_token_sum_norm,
}
LOSS_AGG_MODES: tuple[str, ...] = tuple(_AGG_FNS)


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    *,
    num_tokens: Count | None = None,
    num_seqs: Count | None = None,
    loss_scale_factor: Count | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar.

    Modes (verl's names):

    - ``"token-mean"`` (DAPO): ``sum(loss * mask) / num_tokens``.
    - ``"seq-mean-token-mean"`` (GRPO): mean over sequences of each
      sequence's token mean.
    - ``"seq-mean-token-sum"``: mean over sequences of each sequence's token
      sum.
    - ``"seq-mean-token-sum-norm"`` (Dr. GRPO): mean over sequences of
      ``token sum / loss_scale_factor``.

    The denominators default to what this call sees: ``num_tokens`` to the
    number of unmasked tokens, ``num_seqs`` to the number of sequences with at
    least one unmasked token, ``loss_scale_factor`` to ``loss_mask.shape[-1]``
    (pass the maximum response length so it stays constant over training).
    When one mini-batch is split into pieces (gradient accumulation,
    data-parallel learners), pass the whole mini-batch's ``num_tokens`` /
    ``num_seqs`` to every piece and sum the pieces' losses (or gradients): the
    result is then exactly the mini-batch's loss, never a mean of per-piece
    means (docs/algorithm.md §8). Where gradients are averaged across learners (as
    DistributedDataParallel does), scale each learner's loss by the number of
    learners to turn that average back into the sum. Overrides a mode does not
    use are ignored.

    Args:
        loss_mat: [batch, time] per-token loss.
        loss_mask: [batch, time], 0/1; count it *after* any masking (e.g. of
            truncated responses), since that is what the loss sums over.
        loss_agg_mode: one of ``LOSS_AGG_MODES``.
        num_tokens, num_seqs, loss_scale_factor: > 0; see above.

    Returns:
        0-dim tensor. Sequences whose mask is all 0 contribute nothing.
    """
    agg_fn = _choice(_AGG_FNS, loss_agg_mode, "loss_agg_mode", "modes")
    _check_same_shape(loss_mat=loss_mat, loss_mask=loss_mask)
    _check_positive("num_tokens", num_tokens)
    _check_positive("num_seqs", num_seqs)
    _check_positive("loss_scale_factor", loss_scale_factor)
    keep = loss_mask.bool()
    return agg_fn(
        loss_mat.masked_fill(~keep, 0),
        keep,
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        loss_scale_factor=loss_scale_factor,
    )


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
    """Clipped surrogate loss with decoupled clip bounds (Clip-Higher):
    the policy loss ``"ppo_clip"``.

    Per token, with ``r = exp(log_probs - old_log_probs)``::

        l = max(-A * r, -A * clip(r, 1 - clip_eps_low, 1 + clip_eps_high))

    which is the negative of the paper's ``min(r A, clip(r, ...) A)`` (PPO,
    Schulman et al., 2017, arXiv 1707.06347; naive GRPO is
    ``clip_eps_high = clip_eps_low`` without the dual clip). With
    ``clip_eps_high > clip_eps_low`` a token with ``A > 0`` may raise its
    probability further before its gradient is cut, which keeps rare
    "exploration" tokens alive and prevents entropy collapse. If
    ``clip_ratio_c`` is set, tokens with ``A < 0`` are also bounded by the dual
    clip ``l = min(l, -A * c)``: without it a negative-advantage token whose
    ratio has exploded contributes an unbounded loss.

    Args:
        log_probs: [batch, time] log pi_theta of the sampled tokens (carries
            the gradient).
        old_log_probs: [batch, time] log pi_old of the same tokens.
        advantages: [batch, time] per-token advantage (the sequence's ``A_i``
            repeated over its tokens).
        response_mask: [batch, time] 0/1, 1 on response tokens that count.
        clip_eps_low, clip_eps_high: the clip range is
            ``[1 - clip_eps_low, 1 + clip_eps_high]``; DAPO uses 0.2 and 0.28.
        clip_ratio_c: dual-clip constant ``c > 1`` (DAPO scripts: 10), or
            None for no dual clip.
        loss_agg_mode, num_tokens, num_seqs, loss_scale_factor: passed to
            ``agg_loss``.

    Returns:
        ``(loss, metrics)``: ``loss`` is a 0-dim tensor; ``metrics`` maps
        names to detached 0-dim tensors, each a mean over unmasked tokens:

        - ``pg_clipfrac_low``: fraction with ``A < 0`` and ``r < 1 - eps_low``.
        - ``pg_clipfrac_high``: fraction with ``A > 0`` and ``r > 1 + eps_high``.
        - ``pg_clipfrac_dual``: fraction with ``A < 0`` and ``r > c`` (where the
          dual clip binds; 0 when it is off).
        - ``approx_kl``: mean of ``old_log_probs - log_probs``.
        - ``ratio_mean``: mean of ``r``.
    """
    _check_same_shape(
        log_probs=log_probs,
        old_log_probs=old_log_probs,
        advantages=advantages,
        response_mask=response_mask,
    )
    _check_clip_range(clip_eps_low, clip_eps_high)
    if clip_ratio_c is not None and clip_ratio_c <= 1:
        raise ValueError(f"clip_ratio_c must be > 1, got {clip_ratio_c}")

    log_ratio = log_probs - old_log_probs
    ratio = torch.exp(log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    token_loss = clipped_surrogate(ratio, advantages, 1 - clip_eps_low, 1 + clip_eps_high)
    negative = advantages < 0
    if clip_ratio_c is not None:
        token_loss = torch.where(negative, torch.minimum(token_loss, -advantages * clip_ratio_c), token_loss)

    loss = agg_loss(
        token_loss,
        response_mask,
        loss_agg_mode,
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        loss_scale_factor=loss_scale_factor,
    )

    with torch.no_grad():
        ratio = ratio.detach()
        clipped_low = negative & (ratio < 1 - clip_eps_low)
        clipped_high = (advantages > 0) & (ratio > 1 + clip_eps_high)
        # For A < 0, -A*c < l exactly when r > c: c > 1 > 1 - eps_low, so the
        # lower clip can never be the binding term there.
        if clip_ratio_c is None:
            clipped_dual = torch.zeros_like(clipped_low)
        else:
            clipped_dual = negative & (ratio > clip_ratio_c)
        metrics = {
            Metrics.PG_CLIPFRAC_LOW: masked_mean(clipped_low.to(ratio.dtype), response_mask),
            Metrics.PG_CLIPFRAC_HIGH: masked_mean(clipped_high.to(ratio.dtype), response_mask),
            Metrics.PG_CLIPFRAC_DUAL: masked_mean(clipped_dual.to(ratio.dtype), response_mask),
            Metrics.APPROX_KL: masked_mean(-log_ratio.detach(), response_mask),
            Metrics.RATIO_MEAN: masked_mean(ratio, response_mask),
        }
    return loss, metrics


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


# --------------------------------------------------------------------------
# Groups: advantages (§1) and the Dynamic Sampling filter (§2.2)
# --------------------------------------------------------------------------


def _group_index(group_ids: GroupIds, values: torch.Tensor, values_name: str) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids to ``0..num_groups-1``.

    Returns ``(inverse, num_groups)``: ``inverse`` is a [n] long tensor on the
    device of ``values`` with ``inverse[k]`` the group of element ``k``.
    """
    if isinstance(group_ids, torch.Tensor):
        ids_shape = tuple(group_ids.shape)
    elif isinstance(group_ids, np.ndarray):
        ids_shape = group_ids.shape
    else:
        ids_shape = (len(group_ids),)
    if values.dim() != 1 or ids_shape != tuple(values.shape):
        raise ValueError(
            f"{values_name} has shape {tuple(values.shape)} and group_ids has "
            f"shape {ids_shape}; both must be 1-D of the same length"
        )
    if isinstance(group_ids, torch.Tensor):
        uniques, inverse = torch.unique(group_ids, return_inverse=True)
        return inverse.to(values.device), len(uniques)
    index_of: dict[Hashable, int] = {}
    inverse = [index_of.setdefault(g, len(index_of)) for g in group_ids]
    return torch.tensor(inverse, dtype=torch.long, device=values.device), len(index_of)


def _group_moments(
    values: torch.Tensor, inverse: torch.Tensor, num_groups: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per group: member count, mean and sum of squared deviations from the
    mean (two passes, so equal members give exactly 0, not a cancellation
    residue). All [num_groups]."""
    counts = torch.bincount(inverse, minlength=num_groups).to(values.dtype)
    sums = values.new_zeros(num_groups).index_add_(0, inverse, values)
    means = sums / counts
    deviations = values - means[inverse]
    sq_dev = values.new_zeros(num_groups).index_add_(0, inverse, deviations**2)
    return counts, means, sq_dev


@register_adv_estimator("grpo")
def compute_group_advantages(
    scores: torch.Tensor,
    group_ids: GroupIds,
    *,
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> torch.Tensor:
    """Group-relative advantage of each response (GRPO, kept by DAPO): the
    advantage estimator ``"grpo"``.

    ``A_i = (R_i - mean_g) / (std_g + eps)`` over the responses of the same
    prompt (Shao et al., 2024, "DeepSeekMath", arXiv 2402.03300), with the
    unbiased std (N - 1), as verl. A group of one member gets
    ``mean_g = 0, std_g = 1`` (verl's convention), i.e. ``A = R / (1 + eps)``.
    ``norm_by_std=False`` gives ``R_i - mean_g`` (Dr. GRPO), where a single
    member keeps ``A = R``. A group whose scores are all equal gets zeros.

    Args:
        scores: [n] float, one reward per response.
        group_ids: [n] group of each response: an integer tensor or any 1-D
            sequence / numpy array of hashable values. Groups need not be
            contiguous.
        eps: added to the std to keep the division finite.
        norm_by_std: divide by ``std_g + eps``.

    Returns:
        [n] advantages, dtype of ``scores`` (float32 for integer scores),
        one per response; broadcast them over the response's tokens.
    """
    inverse, num_groups = _group_index(group_ids, scores, "scores")
    out_dtype = scores.dtype if scores.is_floating_point() else torch.get_default_dtype()
    # float64 so that the deviations of near-equal float32 scores, divided by
    # eps = 1e-6, do not turn rounding residue into visible advantages.
    values = scores.to(torch.float64)
    counts, means, sq_dev = _group_moments(values, inverse, num_groups)
    single = counts == 1
    means = torch.where(single, 0.0, means)
    advantages = values - means[inverse]
    if norm_by_std:
        stds = torch.where(single, 1.0, (sq_dev / (counts - 1).clamp_min(1)).sqrt())
        advantages = advantages / (stds[inverse] + eps)
    return advantages.to(out_dtype)


@register_adv_estimator("dr_grpo")
def dr_grpo_advantages(scores: torch.Tensor, group_ids: GroupIds) -> torch.Tensor:
    """Dr. GRPO's advantage ``A_i = R_i - mean_g``, without GRPO's division by
    the group std (Liu et al., 2025, "Understanding R1-Zero-Like Training",
    arXiv 2503.20783): the advantage estimator ``"dr_grpo"``. Details as in
    ``compute_group_advantages(..., norm_by_std=False)``."""
    return compute_group_advantages(scores, group_ids, norm_by_std=False)


def _as_float64(scores: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
    """(scores in float64, the dtype to return advantages in: the scores', float32 for integers)."""
    return scores.to(torch.float64), scores.dtype if scores.is_floating_point() else torch.get_default_dtype()


@register_adv_estimator("rloo")
def rloo_advantages(scores: torch.Tensor, group_ids: GroupIds) -> torch.Tensor:
    """REINFORCE Leave-One-Out (Ahmadian et al., 2024, "Back to Basics", arXiv 2402.14740;
    Kool et al., 2019): the advantage estimator ``"rloo"``. The baseline of ``R_i`` is the mean
    of the other members of its group::

        A_i = R_i - (1 / (G - 1)) sum_{j != i} R_j = G / (G - 1) * (R_i - mean_g R)

    A group of one keeps ``A = R``. Returns [n], dtype of ``scores`` (float32 for integers).
    """
    inverse, num_groups = _group_index(group_ids, scores, "scores")
    values, out_dtype = _as_float64(scores)
    counts, means, _ = _group_moments(values, inverse, num_groups)
    g = counts[inverse]
    advantages = torch.where(g > 1, (values - means[inverse]) * g / (g - 1).clamp_min(1), values)
    return advantages.to(out_dtype)


@register_adv_estimator("opo")
def opo_advantages(scores: torch.Tensor, group_ids: GroupIds, *, response_mask: torch.Tensor) -> torch.Tensor:
    """On-Policy RL with Optimal reward baseline (Hao et al., 2025, arXiv 2505.23585): the
    advantage estimator ``"opo"``. The baseline is the group's length-weighted mean reward, the
    variance-optimal one when the squared gradient norm of a response grows with its length::

        A_i = R_i - sum_g L_j R_j / sum_g L_j,     L_j = |o_j| (tokens in the loss)

    No std division. A group of one, or one whose responses have no loss tokens, keeps
    ``A = R``. Returns [n].
    """
    inverse, num_groups = _group_index(group_ids, scores, "scores")
    values, out_dtype = _as_float64(scores)
    if response_mask.dim() != 2 or response_mask.shape[0] != values.shape[0]:
        raise ValueError(
            f"response_mask has shape {tuple(response_mask.shape)}; expected [{values.shape[0]}, T], one row per score"
        )
    lengths = response_mask.to(torch.float64).sum(-1)
    weighted = values.new_zeros(num_groups).index_add_(0, inverse, lengths * values)
    total = values.new_zeros(num_groups).index_add_(0, inverse, lengths)
    counts = torch.bincount(inverse, minlength=num_groups)
    has_baseline = ((counts > 1) & (total > 0))[inverse]
    baselines = (weighted / total.clamp_min(1))[inverse]
    return torch.where(has_baseline, values - baselines, values).to(out_dtype)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps)`` over the masked positions, with the unbiased variance
    (n - 1, as verl's ``masked_whiten``); masked-out positions get 0. One masked position: its
    value minus itself, 0."""
    keep = mask.bool()
    count = keep.sum()
    mean = masked_mean(values, keep)
    centred = (values - mean).masked_fill(~keep, 0)
    variance = centred.square().sum() / (count - 1).clamp_min(1)
    return centred * torch.rsqrt(variance + eps)


@register_adv_estimator("reinforce_plus_plus")
def reinforce_plus_plus_advantages(
    scores: torch.Tensor, group_ids: GroupIds, *, response_mask: torch.Tensor
) -> torch.Tensor:
    """REINFORCE++ (Hu, 2025, arXiv 2501.03262): the advantage estimator
    ``"reinforce_plus_plus"``. Each token's return (the outcome reward ``R_i``, undiscounted:
    the reward comes at the end and gamma = 1) normalised over every loss token of the batch::

        A_{i,t} = (R_i - mean_batch) / std_batch,    mean and std over all loss tokens

    No group baseline (``group_ids`` only checks the shapes): the batch is the baseline, so
    responses weigh by their token count. The paper's per-token KL in the reward is not built
    (set ``kl_coef`` for a KL loss term). Returns [n, T], 0 outside ``response_mask``.
    """
    _group_index(group_ids, scores, "scores")
    values, out_dtype = _as_float64(scores)
    returns = values.unsqueeze(-1).expand(response_mask.shape)
    return masked_whiten(returns, response_mask).to(out_dtype)


@register_adv_estimator("reinforce_plus_plus_baseline")
def reinforce_plus_plus_baseline_advantages(
    scores: torch.Tensor, group_ids: GroupIds, *, response_mask: torch.Tensor
) -> torch.Tensor:
    """REINFORCE++ with a group baseline (arXiv 2501.03262, for several samples per prompt):
    the advantage estimator ``"reinforce_plus_plus_baseline"``. The group mean is subtracted
    first (no per-group std), then every loss token of the batch is normalised as in
    ``"reinforce_plus_plus"``::

        A_{i,t} = whiten_batch(R_i - mean_g R)

    Returns [n, T], 0 outside ``response_mask``.
    """
    centred = compute_group_advantages(scores.to(torch.float64), group_ids, norm_by_std=False)
    _, out_dtype = _as_float64(scores)
    return masked_whiten(centred.unsqueeze(-1).expand(response_mask.shape), response_mask).to(out_dtype)


def compute_advantages(
    estimator: str, scores: torch.Tensor, group_ids: GroupIds, response_mask: torch.Tensor
) -> torch.Tensor:
    """[n, T] token advantages from the registered (or ``"module:function"``) ``estimator``: it gets
    ``response_mask`` (the loss tokens) if it takes that keyword; a per-response result [n] is
    broadcast over the tokens. Positions outside ``response_mask`` get 0."""
    fn = adv_estimator_fn(estimator)
    if "response_mask" in inspect.signature(fn).parameters:
        advantages = fn(scores, group_ids, response_mask=response_mask)
    else:
        advantages = fn(scores, group_ids)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    if advantages.shape[0] != response_mask.shape[0] or advantages.shape[1] not in (1, response_mask.shape[1]):
        raise ValueError(
            f"adv_estimator={estimator!r} returned advantages of shape {tuple(advantages.shape)}; "
            f"expected [{response_mask.shape[0]}] or {list(response_mask.shape)}"
        )
    return advantages.expand(response_mask.shape).masked_fill(~response_mask.bool(), 0)


def filter_groups(
    metric_values: torch.Tensor | Sequence[float] | np.ndarray,
    group_ids: GroupIds,
    *,
    tol: float = 1e-6,
    band: tuple[float, float] | None = None,
    min_std: float = 0.0,
) -> torch.Tensor:
    """Dynamic-sampling filter: which responses belong to informative groups.

    A group is kept when the population std (ddof=0, like ``np.std``) of its
    metric exceeds ``tol``, or when it has exactly one member (verl keeps
    those). With a 0/1 accuracy metric this is the paper's
    ``0 < |{correct}| < G``; all-correct and all-wrong groups have zero
    advantage and give no gradient. The spread, not the mean, is tested, and
    ``tol`` makes values that differ only by rounding (``0.1 + 0.2`` vs
    ``0.3``) count as equal. Two optional, stricter tests:

    - ``band = (low, high)``: the group's mean must lie strictly inside it
      (e.g. an accuracy band ``(0.1, 0.9)``: groups nearly solved or nearly
      failed carry little signal); applies to groups of one too.
    - ``min_std``: the population std must be at least this (OpenRLHF #1270);
      groups of one are exempt, as from ``tol``.

    Args:
        metric_values: [n] per-response metric ("acc", "score", ...).
        group_ids: [n], as in ``compute_group_advantages``.
        tol: spreads at or below this count as zero.
        band: None, or ``(low, high)`` with ``low < high``.
        min_std: >= 0.

    Returns:
        [n] bool tensor, True for responses of kept groups.
    """
    if band is not None and not band[0] < band[1]:
        raise ValueError(f"filter_band={tuple(band)} must have low < high")
    if min_std < 0:
        raise ValueError(f"filter_min_std must be >= 0, got {min_std}")
    values = torch.as_tensor(metric_values, dtype=torch.float64)
    inverse, num_groups = _group_index(group_ids, values, "metric_values")
    counts, means, sq_dev = _group_moments(values, inverse, num_groups)
    population_std = (sq_dev / counts).sqrt()
    single = counts == 1
    keep_group = ((population_std > tol) & (population_std >= min_std)) | single
    if band is not None:
        keep_group &= (means > band[0]) & (means < band[1])
    return keep_group[inverse]


# --------------------------------------------------------------------------
# Soft overlong punishment (§2.4)
# --------------------------------------------------------------------------


def overlong_penalty(
    response_lengths: torch.Tensor | Sequence[int] | np.ndarray,
    *,
    max_response_length: int,
    overlong_buffer_len: int,
    penalty_factor: float = 1.0,
) -> torch.Tensor:
    """Length penalty added to the correctness reward (``R_length``).

    With ``L_max = max_response_length`` and ``L_cache = overlong_buffer_len``::

        0                                    if |y| <= L_max - L_cache
        ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
        -1                                   if |y| > L_max

    times ``penalty_factor``. The penalty grows linearly over the last
    ``L_cache`` tokens, so a response is told it is getting too long before it
    is cut, instead of receiving a noisy correctness reward for a truncated
    answer. ``overlong_buffer_len = 0`` turns the punishment off (all zeros).

    Args:
        response_lengths: [n] response lengths in tokens.
        max_response_length: ``L_max`` > 0.
        overlong_buffer_len: ``L_cache`` in ``[0, L_max]``.
        penalty_factor: >= 0 scale (1.0 in DAPO).

    Returns:
        [n] float tensor (default dtype) of penalties in
        ``[-penalty_factor, 0]``.
    """
    if max_response_length <= 0:
        raise ValueError(f"max_response_length must be > 0, got {max_response_length}")
    if not 0 <= overlong_buffer_len <= max_response_length:
        raise ValueError(
            f"overlong_buffer_len must be in [0, max_response_length={max_response_length}], got {overlong_buffer_len}"
        )
    if penalty_factor < 0:
        raise ValueError(f"penalty_factor must be >= 0, got {penalty_factor}")
    lengths = torch.as_tensor(response_lengths).to(torch.get_default_dtype())
    if overlong_buffer_len == 0:
        return torch.zeros_like(lengths)
    # Tokens past the free budget, capped at L_cache so anything longer than
    # L_max gets exactly -1.
    excess = (lengths - (max_response_length - overlong_buffer_len)).clamp(0, overlong_buffer_len)
    return -excess / overlong_buffer_len * penalty_factor


# --------------------------------------------------------------------------
# Rollout / learner mismatch (docs/scaling.md §5)
# --------------------------------------------------------------------------

# Rollout corrections: None, or how each token's policy-gradient term is weighted by the
# importance ratio rho = pi_old / pi_rollout of the sampler's draw (the first three truncate it at
# a cap, the other three keep tokens or sequences whose ratio is inside a band and drop the rest).
TRUNCATED_CORRECTIONS = ("tis", "seq_tis")
MASKED_CORRECTIONS = ("token_mask", "seq_mask", "geo_mask")
ROLLOUT_CORRECTIONS = (None, *TRUNCATED_CORRECTIONS, *MASKED_CORRECTIONS)
# A band keeps what is inside [low, high]. Defaults as verl's presets: a sequence ratio (a product
# of token ratios) within a factor 2; a geometric mean within 0.1% of 1.
DEFAULT_MASK_BANDS = {"token_mask": (0.5, 2.0), "seq_mask": (0.5, 2.0), "geo_mask": (0.999, 1.001)}


def rollout_mismatch(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, torch.Tensor]:
    """How far the sampler's log-probs are from the learner's, over the masked tokens.

    ``rollout_logp_abs_diff`` is the mean of ``|old_log_probs - rollout_log_probs|``,
    ``rollout_logp_abs_diff_max`` its largest value (0 without masked tokens). Both are
    0 when vLLM and the learner compute the same distribution; kernels, precision and (with
    ``async_rollout``) one update of staleness make them differ.
    """
    _check_same_shape(old_log_probs=old_log_probs, rollout_log_probs=rollout_log_probs, response_mask=response_mask)
    diff = (old_log_probs - rollout_log_probs).abs().detach().masked_fill(~response_mask.bool(), 0)
    return {
        Metrics.ROLLOUT_LOGP_ABS_DIFF: masked_mean(diff, response_mask),
        Metrics.ROLLOUT_LOGP_ABS_DIFF_MAX: diff.max() if diff.numel() else diff.new_zeros(()),
    }


def rollout_correction_weights(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    mode: str | None = "tis",
    cap: float = 2.0,
    band: tuple[float, float] | None = None,
) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
    """Per-token importance weights that correct for sampling from the rollout engine.

    With ``log rho_t = old_log_probs - rollout_log_probs`` (the learner's policy over the
    sampler's, per token) and sums and means over each sequence's masked tokens:

    - ``"tis"`` (truncated importance sampling, Yao et al. 2025): ``w_t = min(rho_t, cap)``.
    - ``"seq_tis"``: ``w_i = min(prod_t rho_t, cap)`` on every token of sequence ``i``.
    - ``"token_mask"``: ``w_t = 1`` if ``low <= rho_t <= high``, else 0 (the token is dropped).
    - ``"seq_mask"``: ``w_i = 1`` if ``low <= prod_t rho_t <= high``, else 0 (the sequence is dropped).
    - ``"geo_mask"``: ``w_i = 1`` if ``low <= exp(mean_t log rho_t) <= high``, else 0 (the
      geometric mean: a band that does not widen with the length).

    ``band = (low, high)`` defaults to ``DEFAULT_MASK_BANDS[mode]``. Weights carry no gradient.
    The learner multiplies each token's advantage by its weight, which weights the policy-gradient
    term for any loss positively homogeneous in the advantage (PPO's clip and dual clip, GSPO,
    CISPO: ``w > 0`` keeps the advantage's sign); a dropped token still counts in the loss's
    denominator, as TRL's masks. ``mode=None``: no correction, returns ``(None, {})``.

    Returns ``(weights, metrics)`` over the masked tokens: ``rollout_is_weight_mean``, and
    ``rollout_is_capped_fraction`` (truncating modes: tokens whose weight hit the cap) or
    ``rollout_is_masked_fraction`` (masking modes: tokens dropped).
    """
    if mode not in ROLLOUT_CORRECTIONS:
        raise ValueError(f"rollout_correction={mode!r}; expected one of {ROLLOUT_CORRECTIONS}")
    if mode is None:
        return None, {}
    if mode in TRUNCATED_CORRECTIONS and not cap >= 1:
        raise ValueError(f"rollout_is_cap must be >= 1, got {cap}")
    low, high = band or DEFAULT_MASK_BANDS.get(mode, (0.0, math.inf))
    if mode in MASKED_CORRECTIONS and not 0 < low < high:
        raise ValueError(f"rollout_mask_band=({low}, {high}) must have 0 < low < high")
    _check_same_shape(old_log_probs=old_log_probs, rollout_log_probs=rollout_log_probs, response_mask=response_mask)
    with torch.no_grad():
        keep = response_mask.bool()
        log_rho = (old_log_probs - rollout_log_probs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO).masked_fill(~keep, 0)
        if mode in ("seq_tis", "seq_mask"):
            log_rho = log_rho.sum(-1, keepdim=True).expand_as(log_rho)
        elif mode == "geo_mask":
            log_rho = masked_mean(log_rho, keep, dim=-1).unsqueeze(-1).expand_as(log_rho)
        if mode in TRUNCATED_CORRECTIONS:
            capped = log_rho >= math.log(cap)
            weights = torch.exp(log_rho.clamp(max=math.log(cap)))
            fraction = (Metrics.ROLLOUT_IS_CAPPED_FRACTION, capped)
        else:
            inside = (log_rho >= math.log(low)) & (log_rho <= math.log(high))
            weights = inside.to(old_log_probs.dtype)
            fraction = (Metrics.ROLLOUT_IS_MASKED_FRACTION, ~inside)
        # Padding gets weight 1, so it stays as inert as before.
        weights = weights.masked_fill(~keep, 1)
        metrics = {
            Metrics.ROLLOUT_IS_WEIGHT_MEAN: masked_mean(weights, keep),
            fraction[0]: masked_mean(fraction[1].to(weights.dtype), keep),
        }
    return weights, metrics


# --------------------------------------------------------------------------
# Learner helpers
# --------------------------------------------------------------------------


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` at each position.

    ``H = -sum_v p_v log p_v = logsumexp(z) - sum_v p_v z_v``: this form never
    takes the log of a probability that underflowed to 0. Computed in the dtype
    of ``logits``; upcast bf16 logits first if the precision matters.

    Args:
        logits: [..., vocab], finite.

    Returns:
        [...] entropies in nats.
    """
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def _kl_k1(log_ratio: torch.Tensor) -> torch.Tensor:
    return log_ratio


def _kl_abs(log_ratio: torch.Tensor) -> torch.Tensor:
    return log_ratio.abs()


def _kl_k2(log_ratio: torch.Tensor) -> torch.Tensor:
    return 0.5 * log_ratio.square()


def _kl_k3(log_ratio: torch.Tensor) -> torch.Tensor:
    # k3 = exp(x) - x - 1 with x = ref - logp: unbiased, always >= 0, lower
    # variance than k1 (Schulman, "Approximating KL divergence"). The exponent
    # is clamped for the same overflow reason as the policy ratio; the result
    # is capped at 10 like verl (whose [-10, 10] clamp has no effect below,
    # since k3 >= 0).
    x = (-log_ratio).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return (torch.exp(x) - x - 1).clamp(max=10.0)


_KL_FNS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "kl": _kl_k1,
    "abs": _kl_abs,
    "mse": _kl_k2,
    "low_var_kl": _kl_k3,
}
KL_PENALTY_KINDS: tuple[str, ...] = tuple(_KL_FNS)


def kl_penalty(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, kind: str = "low_var_kl") -> torch.Tensor:
    """Per-token estimate of KL(pi_theta || pi_ref) from sampled tokens.

    DAPO drops the KL term (beta = 0); this exists for GRPO baselines. Kinds:
    ``"kl"`` (k1: ``logp - ref``), ``"abs"`` (``|logp - ref|``), ``"mse"``
    (k2: ``0.5 (logp - ref)^2``), ``"low_var_kl"`` (k3:
    ``exp(ref - logp) - (ref - logp) - 1``, capped at 10).

    Args:
        log_probs: [batch, time] log pi_theta of the sampled tokens.
        ref_log_probs: [batch, time] log pi_ref of the same tokens.
        kind: one of ``KL_PENALTY_KINDS``.

    Returns:
        [batch, time] per-token penalty; aggregate it with ``agg_loss``.
    """
    kl_fn = _choice(_KL_FNS, kind, "kl_penalty kind", "kinds")
    _check_same_shape(log_probs=log_probs, ref_log_probs=ref_log_probs)
    return kl_fn(log_probs - ref_log_probs)
