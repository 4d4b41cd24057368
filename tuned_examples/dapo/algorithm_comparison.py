"""The registered algorithms side by side: DAPO, GRPO, Dr. GRPO, GSPO, CISPO, RLOO and REINFORCE++
x seeds on the ablation's scratchpad-sums task, as one Ray Tune grid.

Each algorithm runs with its own config class's defaults (its paper's: `dapo_rllib.algorithm.family`)
over the same task settings as the ablation (16 prompts x 8 completions per step, 4 optimizer
steps, 64-token responses, lr 1e-4), from the same warm-started tiny model, 40 iterations, with
`--seeds` seeds (default 3). Every trial takes one CPU, so a 2-core machine runs two at once: 21
trials took 27 min 41 s here. When the grid has run, `comparison.md` (a row per algorithm:
final and best held-out avg@4, iterations and samples to the ablation's target, entropy,
response length, truncated, clipped and masked fractions) and `comparison.png` are written into
the run directory.

    python tuned_examples/dapo/algorithm_comparison.py                     # the default run
    python tuned_examples/dapo/algorithm_comparison.py --algorithms GSPO,CISPO --seeds 5
    python tuned_examples/dapo/algorithm_comparison.py --seeds 1 --stop '{"training_iteration": 2}'   # smoke
    rllib train file tuned_examples/dapo/algorithm_comparison.py           # the same grid, 3 seeds
"""

import argparse

import dapo_rllib  # noqa: F401  (registers the algorithms and "dapo_math")
from dapo_rllib.algorithm.family import ALGORITHMS, algorithm_class
from dapo_rllib.cli.train import TrainOptions, add_train_options, train
from dapo_rllib.experiments.ablation import METRIC, SEEDS, SOFT_OVERLONG_BUFFER, TARGET, sums_task_config
from dapo_rllib.experiments.algorithm_comparison import comparison_search_space, write_report
from dapo_rllib.experiments.comparison_grid import print_report

base = sums_task_config()
config = comparison_search_space(base, seeds=SEEDS, soft_overlong_buffer=SOFT_OVERLONG_BUFFER)
stop = {"training_iteration": 40}
algorithms = list(ALGORITHMS)


def after_run(outcomes, run_dir) -> None:
    """comparison.md and comparison.png from the trials of this run."""
    markdown, png, missing = write_report(
        [o.logdir for o in outcomes], run_dir, metric=METRIC, target=TARGET, algorithms=algorithms
    )
    print_report(markdown, png, missing, "comparison")


if __name__ == "__main__":
    parser = add_train_options(
        argparse.ArgumentParser(
            description="The registered algorithms on the scratchpad-sums task (options as for `rllib train file`)."
        )
    )
    parser.add_argument("--seeds", type=int, default=SEEDS, help=f"seeds per algorithm (default {SEEDS})")
    parser.add_argument(
        "--algorithms",
        default=",".join(ALGORITHMS),
        help=f"comma-separated names (default: all, {','.join(ALGORITHMS)})",
    )
    args = parser.parse_args()
    if args.no_tune:
        parser.error("the comparison is a Tune grid (algorithms x seeds): drop --no-tune")
    try:
        algorithms = [algorithm_class(name).NAME for name in args.algorithms.split(",")]
    except ValueError as error:
        parser.error(f"--algorithms: {error}")
    train(
        comparison_search_space(
            base, algorithms=algorithms, seeds=args.seeds, soft_overlong_buffer=SOFT_OVERLONG_BUFFER
        ),
        TrainOptions.from_args(args, stop),
        after_run,
    )
