"""A Ray Tune sweep of DAPO on the tiny arithmetic task: clip_eps_high x group_size, 6 trials.

Each trial is the main job (tiny_arithmetic_dapo.py) shortened to 12 iterations, with 8
optimizer steps per training step instead of 2 and a higher learning rate: the later mini-batches
are then off-policy enough for the clip range to matter (with the main job's settings the policy
ratio never leaves [0.8, 1.2] and every clip_eps_high gives the same run). A trial asks
for the 2 CPUs it uses (driver + learner, one vLLM env runner), so on a 2-core machine Tune
runs the trials one after another; the tiny model is built once and read from the cache. Ends
with a table of the trials and their held-out accuracy before and after training.

    python tuned_examples/dapo/tiny_arithmetic_sweep.py
    rllib train file tuned_examples/dapo/tiny_arithmetic_sweep.py
"""

from pathlib import Path

from ray import tune

from dapo_rllib.cli.train import load_config_file, run_example

ITERATIONS = 12

base = load_config_file(Path(__file__).with_name("tiny_arithmetic_dapo.py")).config
config = (
    base.copy(copy_frozen=False)
    .training(
        clip_eps_high=tune.grid_search([0.2, 0.28, 0.35]),
        group_size=tune.grid_search([4, 8]),
        minibatch_size_prompts=2,
        lr=3e-4,
    )
    .evaluation(evaluation_interval=ITERATIONS)
)

stop = {"training_iteration": ITERATIONS}

if __name__ == "__main__":
    run_example(config, stop)
