"""Registers DAPO and its neighbours (`dapo_rllib.algorithm.family`) with Ray Tune, and the environments
with RLlib's env registry.

Environments are plug-ins: a package declares each under the entry-point group
`dapo_rllib.environments` (name = "module:Class"; this project's own in pyproject.toml), and
each is registered under its name, loaded on first use. So `dapo_rllib` never imports the
environments that build on it (envs/ imports dapo_rllib, not the reverse).
"""

from __future__ import annotations

import logging
from functools import partial
from importlib.metadata import EntryPoint, entry_points

from ray.tune.registry import register_env, register_trainable

from dapo_rllib.algorithm.family import ALGORITHMS
from dapo_rllib.tasks.env_names import ENVIRONMENTS_GROUP, make_declared_env

logger = logging.getLogger(__name__)


def register_all() -> None:
    """Register the algorithms and every installed package's environments (again: a package installed since
    the last call is found too)."""
    for name, algorithm in ALGORITHMS.items():
        register_trainable(name, algorithm)
    declared: dict[str, EntryPoint] = {}
    for entry in entry_points(group=ENVIRONMENTS_GROUP):
        earlier = declared.get(entry.name)
        if earlier is not None and earlier.value != entry.value:
            logger.warning(
                "environment name %r is declared twice, by %s (%s) and %s (%s); the last is registered: rename one "
                "in its package's entry points",
                entry.name,
                _package(earlier),
                earlier.value,
                _package(entry),
                entry.value,
            )
        declared[entry.name] = entry
        register_env(entry.name, partial(make_declared_env, entry.value))  # a string: pickled small, loaded late


def _package(entry: EntryPoint) -> str:
    return entry.dist.name if entry.dist is not None else "an unknown package"
