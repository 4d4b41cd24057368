"""A Python file that `rllib train file` refuses in one line: its config misspells a setting (group_size)."""

import dapo_rllib  # noqa: F401  (registers "DAPO")
from dapo_rllib.algorithm.dapo import DAPOConfig

config = DAPOConfig().training(grop_size=8)
