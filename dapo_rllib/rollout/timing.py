"""How long a generation round's phases took on an env runner, sent to the driver as it is."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RolloutTiming:
    """Wall seconds of a round's phases, and what was generated."""

    generation_s: float = 0.0
    tool_s: float = 0.0  # steps that ran tool calls
    scoring_s: float = 0.0  # steps that rated answers, and the runner's finish() calls
    generated_tokens: int = 0
