"""DAPO on the built-in arithmetic task with the tiny Qwen2 model: the project's main job.

Runs on a 2-core CPU in a few minutes and ends with `eval accuracy: <before> -> <after>`
(avg@4 on held-out problems at the evaluation sampling settings).

    python tuned_examples/dapo/tiny_arithmetic_dapo.py --no-tune
    python tuned_examples/dapo/tiny_arithmetic_dapo.py --no-tune --stop-iters 5 --num-env-runners 0

The settings scale the reference recipe down: 16 prompts x 8 completions per step, 2 optimizer
steps per training step, responses of at most 32 tokens (so the overlong buffer of 8 tokens can
bite), and a learning rate suited to a 1M-parameter model.
"""

import dapo_rllib  # noqa: F401  (registers "DAPO" and "dapo_math")
from dapo_rllib.dapo import DAPOConfig
from dapo_rllib.run import example_args, run_tuned_example

parser = example_args(default_iters=40, num_env_runners=1)
args = parser.parse_args()

config = (
    DAPOConfig()
    .environment("dapo_math", env_config={"dataset": "arithmetic", "split": "train"})
    .evaluation(evaluation_config={"env_config": {"split": "test"}})
    .training(
        model_path=None,  # the built-in tiny model, built on first use
        group_size=8,
        train_batch_size_prompts=16,
        gen_batch_size_prompts=24,
        max_num_gen_batches=10,
        minibatch_size_prompts=8,
        max_prompt_length=128,
        max_response_length=32,
        overlong_buffer_len=8,
        lr=1e-4,
        lr_warmup_steps=3,
        weight_decay=0.0,
        eval_num_samples=4,
        eval_max_problems=193,
    )
    .debugging(seed=0)
)

if __name__ == "__main__":
    run_tuned_example(config, args)
