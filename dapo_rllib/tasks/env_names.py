"""The names the built-in environments are registered under (`dapo_rllib.registry`; their classes are in envs/)."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

#: The entry-point group an environment package declares its environments in (pyproject.toml).
ENVIRONMENTS_GROUP = "dapo_rllib.environments"
MATH_ENV = "dapo_math"  # envs.math_env.MathEnv, DAPOConfig's default environment
CODE_ENV = "dapo_code"  # envs.code_env.CodeEnv


def declared_environments() -> dict[str, EntryPoint]:
    """Every installed package's environments, by name, as declared in their entry points (a name declared twice:
    the last one, as `dapo_rllib.registry.register_all` registers it)."""
    return {entry.name: entry for entry in entry_points(group=ENVIRONMENTS_GROUP)}


def make_declared_env(entry_point: str, env_context):
    """The environment an entry point ("module:Class") declares, built on `env_context`."""
    return EntryPoint(name="", value=entry_point, group=ENVIRONMENTS_GROUP).load()(env_context)
