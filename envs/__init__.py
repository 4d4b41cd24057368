"""Gymnasium environments for DAPO training."""

from dapo_rllib.tasks.problem_env import ProblemEnv
from envs.code_env import CodeEnv
from envs.math_env import MathEnv

__all__ = ["CodeEnv", "MathEnv", "ProblemEnv"]
