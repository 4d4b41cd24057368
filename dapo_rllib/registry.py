"""Registers DAPO and its neighbours (`dapo_rllib.algorithms`) with Ray Tune, and the environments
with RLlib's env registry.

Environments are plug-ins: a package declares each under the entry-point group
`dapo_rllib.environments` (name = "module:Class"; this project's own in pyproject.toml), and
each is registered under its name, loaded on first use. So `dapo_rllib` never imports the
environments that build on it (envs/ imports dapo_rllib, not the reverse).
"""

from __future__ import annotations

from functools import partial
from importlib.metadata import EntryPoint, entry_points

from ray.tune.registry import register_env, register_trainable

ENVIRONMENTS_GROUP = "dapo_rllib.environments"
MATH_ENV = "dapo_math"  # envs.math_env.MathEnv, DAPOConfig's default environment
CODE_ENV = "dapo_code"  # envs.code_env.CodeEnv
TOOL_MATH_ENV = "dapo_tool_math"  # envs.tool_math_env.ToolMathEnv: math with the python tool, over turns
CODE_REPAIR_ENV = "dapo_code_repair"  # envs.code_repair_env.CodeRepairEnv: code with test feedback, over turns


def _make_env(entry_point: str, env_context):
    return EntryPoint(name="", value=entry_point, group=ENVIRONMENTS_GROUP).load()(env_context)


def register_all() -> None:
    from dapo_rllib.algorithms import ALGORITHMS

    for name, algorithm in ALGORITHMS.items():
        register_trainable(name, algorithm)
    for entry in entry_points(group=ENVIRONMENTS_GROUP):
        register_env(entry.name, partial(_make_env, entry.value))
