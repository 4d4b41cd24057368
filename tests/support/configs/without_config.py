"""A Python file that `rllib train file` refuses: it defines no AlgorithmConfig named `config`."""

from ray.rllib.algorithms.ppo import PPOConfig

ppo_config = PPOConfig().environment("CartPole-v1")
