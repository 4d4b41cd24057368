"""KL penalty estimators (k1, abs, k2, k3): the term DAPO removes, kept for GRPO baselines."""

from __future__ import annotations

from collections.abc import Callable

import torch

from dapo_rllib.algorithm.core_algos.common import _MAX_LOG_RATIO, _check_same_shape, _choice


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
