"""The rollout / learner mismatch and its importance-weight corrections (docs/design/scaling.md §5)."""

from __future__ import annotations

import math

import torch

from dapo_rllib.algorithm.core_algos.common import _MAX_LOG_RATIO, _check_same_shape, masked_mean
from dapo_rllib.columns import Metrics

# --------------------------------------------------------------------------
# Rollout / learner mismatch (docs/design/scaling.md §5)
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
