"""DAPO on the built-in arithmetic task with the tiny Qwen2 model: the project's main job.

Runs on a 2-core CPU in a few minutes. Validation (avg@4, pass@k, maj@4 on 193 held-out
problems) runs before training and every 10 iterations; the run ends with
`validation arithmetic/avg@4: <before> -> <after>` and the paths of its TensorBoard logs, plot
and checkpoint.

    python tuned_examples/dapo/tiny_arithmetic_dapo.py --no-tune
    rllib train file tuned_examples/dapo/tiny_arithmetic_dapo.py --no-tune --stop '{"training_iteration": 5}'
    rllib train file tuned_examples/dapo/tiny_arithmetic_dapo.py           # as a Ray Tune experiment

The settings scale the reference recipe down: 16 prompts x 8 completions per step, 2 optimizer
steps per training step, responses of at most 32 tokens (so the overlong buffer of 8 tokens can
bite), and a learning rate suited to a 1M-parameter model.
"""

import dapo_rllib  # noqa: F401  (registers "DAPO" and "dapo_math")
from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.cli.train import run_example

config = (
    DAPOConfig()
    .environment("dapo_math", env_config={"dataset": "arithmetic", "split": "train"})
    # Validation on the arithmetic test split (193 problems), 4 samples each, before training
    # and every 10 iterations.
    .evaluation(evaluation_interval=10, eval_dataset="arithmetic", eval_num_samples=4, eval_max_problems=193)
    # The learner and the driver share one CPU, the vLLM env runner has the other.
    .env_runners(num_env_runners=1, num_cpus_per_env_runner=1)
    .training(
        model_path=None,  # the built-in tiny model, shipped with the package
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
    )
    .debugging(seed=0)
)

stop = {"training_iteration": 40}

if __name__ == "__main__":
    run_example(config, stop)
