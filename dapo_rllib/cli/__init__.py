"""The `rllib` command (`main`): train, evaluate, export, convert and plot."""
