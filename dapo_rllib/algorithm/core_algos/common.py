"""Shared pieces of the pure math: count types, argument checks, masked means."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import torch

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
