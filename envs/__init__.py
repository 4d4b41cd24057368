"""Gymnasium environments for DAPO training."""

from envs.code_env import CodeEnv
from envs.math_env import MathEnv
from dapo_rllib.problem_env import ProblemEnv

__all__ = ["CodeEnv", "MathEnv", "ProblemEnv"]
