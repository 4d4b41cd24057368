"""The real-model study: SmolLM2-135M-Instruct on reasoning-gym's one-digit arithmetic, DAPO, DAPO with LoRA
adapters and GRPO x 3 seeds, as one Ray Tune grid (`dapo_rllib.experiments.real_model`). Each trial trains
6 iterations and validates on 64 held-out problems before training, after 3 and after 6; one trial runs at a
time (the learner and the env runner take a core each). When the grid has run, `real_model.md` (a row per
arm: final held-out avg@4 mean ± std, iterations to +0.10) and `real_model.png` are written into the run
directory.

    python tuned_examples/dapo/smollm2_reasoning_gym_study.py
    python tuned_examples/dapo/smollm2_reasoning_gym_study.py --seeds 1 --stop '{"training_iteration": 1}'   # smoke
"""

import argparse

import dapo_rllib  # noqa: F401  (registers "DAPO" and "dapo_reasoning_gym")
from dapo_rllib.cli.train import TrainOptions, add_train_options, train
from dapo_rllib.experiments.comparison_grid import print_report
from dapo_rllib.experiments.real_model import ITERATIONS, SEEDS, smollm2_task_config, study_search_space, write_report

base = smollm2_task_config().env_runners(num_env_runners=1, num_cpus_per_env_runner=1)
config = study_search_space(base)
stop = {"training_iteration": ITERATIONS}


def after_run(outcomes, run_dir) -> None:
    """real_model.md and real_model.png from the trials of this run."""
    print_report(*write_report([o.logdir for o in outcomes], run_dir), "real-model study")


if __name__ == "__main__":
    parser = add_train_options(
        argparse.ArgumentParser(description="The real-model study (options as for `rllib train file`).")
    )
    parser.add_argument("--seeds", type=int, default=SEEDS, help=f"seeds per arm (default {SEEDS})")
    args = parser.parse_args()
    if args.no_tune:
        parser.error("the study is a Tune grid (arms x seeds): drop --no-tune")
    train(study_search_space(base, seeds=args.seeds), TrainOptions.from_args(args, stop), after_run)
