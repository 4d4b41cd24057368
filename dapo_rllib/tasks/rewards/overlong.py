"""Soft Overlong Punishment (DAPO §2.4): the length penalty added to the correctness reward."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import torch

from dapo_rllib.settings import FeatureSettings, require

#: L_cache / L_max of the paper's run (4096 of 20,480 tokens): the default buffer's share of the response limit.
PAPER_BUFFER_SHARE = 4096 / 20480


@dataclasses.dataclass(frozen=True)
class OverlongSettings(FeatureSettings):
    """The Soft Overlong Punishment (`DAPOConfig.training`).

    Attributes:
        buffer_len: ``overlong_buffer_len``, L_cache, in [0, max_response_length]; 0 turns the punishment off.
            None (the default): the paper's share of ``max_response_length``, 0.2 (its 4096 of 20480 tokens),
            so a shorter response limit gets a buffer that fits it (192 tokens: 38).
        penalty_factor: ``overlong_penalty_factor``, its scale. Reference 1.0.
    """

    prefix: ClassVar[str] = "overlong_"
    buffer_len: int | None = None
    penalty_factor: float = 1.0

    def validate(self) -> None:
        require(self.buffer_len is None or self.buffer_len >= 0, f"overlong_buffer_len={self.buffer_len} must be >= 0")
        require(self.penalty_factor >= 0, f"overlong_penalty_factor={self.penalty_factor} must be >= 0")

    def buffer_tokens(self, max_response_length: int) -> int:
        """L_cache for responses of at most `max_response_length` tokens: `buffer_len` as set, or by default the
        paper's share of `max_response_length`."""
        return round(PAPER_BUFFER_SHARE * max_response_length) if self.buffer_len is None else self.buffer_len


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
