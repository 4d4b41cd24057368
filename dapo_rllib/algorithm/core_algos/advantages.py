"""Advantage estimators (GRPO, Dr. GRPO, RLOO, OPO, REINFORCE++, RAE) and dynamic sampling's group filter."""

from __future__ import annotations

import inspect
from collections.abc import Hashable, Mapping, Sequence

import numpy as np
import torch

from dapo_rllib.algorithm.core_algos.common import GroupIds, masked_mean
from dapo_rllib.algorithm.core_algos.registry import adv_estimator_fn, register_adv_estimator

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


def ema_baselines(
    scores: torch.Tensor, roles: Sequence[Hashable], prior: Mapping[Hashable, float], decay: float
) -> tuple[torch.Tensor, dict[Hashable, float]]:
    """The moving-average reward baseline of each response's role, as SPIRAL's role-conditioned
    advantage estimation keeps it (Liu et al., 2025, arXiv 2506.24119): responses in order, each
    reads its role's baseline, then moves it towards its own reward::

        b_i = b_role            (0 for a role not seen before)
        b_role <- decay * b_role + (1 - decay) * R_i

    Reading before the update keeps ``R_i`` out of its own baseline. ``prior``: {role: baseline}
    before these responses. Returns ([n] float64 baselines read, {role: baseline} after them).
    """
    if not 0 <= decay < 1:
        raise ValueError(f"decay={decay} must be in [0, 1): the weight the baseline keeps at each response")
    if scores.dim() != 1 or len(roles) != scores.shape[0]:
        raise ValueError(
            f"scores has shape {tuple(scores.shape)} and roles {len(roles)} entries; expected one role per score"
        )
    state = dict(prior)
    used = []
    for score, role in zip(scores.tolist(), roles):
        baseline = state.get(role, 0.0)
        used.append(baseline)
        state[role] = decay * baseline + (1 - decay) * score
    return torch.tensor(used, dtype=torch.float64), state


@register_adv_estimator("rae")
def rae_advantages(scores: torch.Tensor, group_ids: GroupIds, *, baselines: torch.Tensor) -> torch.Tensor:
    """Role-conditioned advantage estimation (SPIRAL, arXiv 2506.24119): the advantage estimator
    ``"rae"``. Each response's reward minus its role's moving-average baseline (``ema_baselines``;
    DAPO's driver keeps the baselines across steps and checkpoints)::

        A_i = R_i - b_role(i)

    No group statistics and no normalisation: a group whose rewards are all equal still has a
    signal, the distance from what the role usually gets. ``group_ids`` only checks the shapes.
    Returns [n], dtype of ``scores`` (float32 for integers).
    """
    _group_index(group_ids, scores, "scores")
    values, out_dtype = _as_float64(scores)
    if tuple(baselines.shape) != tuple(values.shape):
        raise ValueError(f"baselines has shape {tuple(baselines.shape)}; expected {tuple(values.shape)}, one per score")
    return (values - baselines.to(torch.float64)).to(out_dtype)


def wants_baselines(estimator: str) -> bool:
    """Whether ``estimator`` takes per-response ``baselines`` (``"rae"``'s role baselines)."""
    return "baselines" in inspect.signature(adv_estimator_fn(estimator)).parameters


def compute_advantages(
    estimator: str,
    scores: torch.Tensor,
    group_ids: GroupIds,
    response_mask: torch.Tensor,
    baselines: torch.Tensor | None = None,
) -> torch.Tensor:
    """[n, T] token advantages from the registered (or ``"module:function"``) ``estimator``: it gets
    ``response_mask`` (the loss tokens) and ``baselines`` ([n], one per response) if it takes those
    keywords; a per-response result [n] is broadcast over the tokens. Positions outside
    ``response_mask`` get 0."""
    fn = adv_estimator_fn(estimator)
    parameters = inspect.signature(fn).parameters
    keywords = {}
    if "response_mask" in parameters:
        keywords["response_mask"] = response_mask
    if "baselines" in parameters:
        if baselines is None:
            raise ValueError(f"adv_estimator={estimator!r} needs a baseline per response (baselines=); none given")
        keywords["baselines"] = baselines
    advantages = fn(scores, group_ids, **keywords)
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
