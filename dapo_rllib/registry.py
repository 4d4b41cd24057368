"""Registers DAPO with Ray Tune and the environments with RLlib's env registry."""

from ray.tune.registry import register_env, register_trainable

MATH_ENV = "dapo_math"


def _make_math_env(env_context):
    from envs.math_env import MathEnv

    return MathEnv(env_context)


def register_all() -> None:
    from dapo_rllib.dapo import DAPO

    register_trainable("DAPO", DAPO)
    register_env(MATH_ENV, _make_math_env)
