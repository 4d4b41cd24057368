"""Curricula: environments whose problems get harder as the policy gets better on held-out ones.

An environment has a curriculum when it defines three methods (`envs/reasoning_gym_env.py` does):

    curriculum_levels()                          {data source: level} now, or None without a curriculum
    next_curriculum_levels(levels, accuracy)     the levels after a validation (a pure function)
    set_curriculum_levels(levels)                draw the problems at `levels`

The levels are the algorithm's state, like the training data's draw order: DAPO computes the next levels
after each validation during training (not the one before it), sets them in every env runner's training and
validation envs, checkpoints them, and gives them to an env runner that is restarted.
"""

from __future__ import annotations

from collections.abc import Mapping


def next_levels(
    levels: Mapping[str, int], accuracy: Mapping[str, float], threshold: float, max_levels: Mapping[str, int]
) -> dict[str, int]:
    """`levels` with every data source whose held-out `accuracy` reached `threshold` one level higher, up to
    its `max_levels` entry; a data source the validation did not report keeps its level."""
    return {
        source: min(level + 1, max_levels[source]) if accuracy.get(source, -1.0) >= threshold else level
        for source, level in levels.items()
    }
