"""Gymnasium environments for DAPO training."""

from envs.math_env import MathEnv

__all__ = ["MathEnv"]
