"""Gymnasium environments for DAPO training."""

from envs.math_env import SCORERS, MathEnv

__all__ = ["SCORERS", "MathEnv"]
