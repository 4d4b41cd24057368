"""The DAPO paper's ablation, small: six cumulative stages x seeds on the scratchpad-sums task.

Naive GRPO, then + overlong filtering, + clip-higher, + soft overlong punishment, + token-level
loss, + dynamic sampling (dapo_rllib.experiments.ablation.STAGES), each from the same tiny model with
`--seeds` seeds (default 3), as one Ray Tune grid. Every trial takes one CPU (the env runner's
vLLM engine and the learner share the trial's process), so a 2-core machine runs two at once.
When the grid has run, `ablation.md` (a row per stage) and `ablation.png` (curves per stage,
seed spread shaded) are written into the run directory.

    python tuned_examples/dapo/tiny_ablation.py                    # the default run
    python tuned_examples/dapo/tiny_ablation.py --seeds 1 --stop '{"training_iteration": 2}'   # smoke
    rllib train file tuned_examples/dapo/tiny_ablation.py          # the same grid, 3 seeds

Why this task (chosen for what each technique acts on, before any result was seen;
docs/experiments/ablation.md says more): "What is 47 + 5 + 8 + 3?" with one to six addends, worked out one
line per addend. Difficulty and needed length both grow with the number of addends, so groups
are all right (one addend), all wrong (six) or mixed, and long answers meet the response limit.
The warm start imitates three ways of answering: the scratchpad "47+5=52", the same spaced out
("47 + 5 = 52", which no longer fits the response limit for long sums), and the bare answer.
"""

import argparse

import dapo_rllib  # noqa: F401  (registers the algorithms and "dapo_math")
from dapo_rllib.cli.train import TrainOptions, add_train_options, train
from dapo_rllib.experiments.ablation import (
    METRIC,
    SEEDS,
    SOFT_OVERLONG_BUFFER,
    TARGET,
    ablation_search_space,
    sums_task_config,
    write_report,
)
from dapo_rllib.experiments.comparison_grid import print_report

base = sums_task_config()
config = ablation_search_space(base, seeds=SEEDS, soft_overlong_buffer=SOFT_OVERLONG_BUFFER)
stop = {"training_iteration": 40}


def after_run(outcomes, run_dir) -> None:
    """ablation.md and ablation.png from the trials of this run."""
    markdown, png, missing = write_report([o.logdir for o in outcomes], run_dir, metric=METRIC, target=TARGET)
    print_report(markdown, png, missing, "ablation")


if __name__ == "__main__":
    parser = add_train_options(
        argparse.ArgumentParser(
            description="The DAPO ablation on the scratchpad-sums task (options as for `rllib train file`)."
        )
    )
    parser.add_argument("--seeds", type=int, default=SEEDS, help=f"seeds per stage (default {SEEDS})")
    args = parser.parse_args()
    if args.no_tune:
        parser.error("the ablation is a Tune grid (stages x seeds): drop --no-tune")
    train(
        ablation_search_space(base, seeds=args.seeds, soft_overlong_buffer=SOFT_OVERLONG_BUFFER),
        TrainOptions.from_args(args, stop),
        after_run,
    )
