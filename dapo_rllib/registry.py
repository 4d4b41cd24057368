"""Registers DAPO with Ray Tune and the environments with RLlib's env registry."""

from ray.tune.registry import register_env, register_trainable

MATH_ENV = "dapo_math"
CODE_ENV = "dapo_code"


def _make_math_env(env_context):
    from envs.math_env import MathEnv

    return MathEnv(env_context)


def _make_code_env(env_context):
    from envs.code_env import CodeEnv

    return CodeEnv(env_context)


def register_all() -> None:
    from dapo_rllib.dapo import DAPO

    register_trainable("DAPO", DAPO)
    register_env(MATH_ENV, _make_math_env)
    register_env(CODE_ENV, _make_code_env)
