"""The real-model study: SmolLM2-135M-Instruct on reasoning-gym's one-digit arithmetic, DAPO, DAPO with LoRA
adapters and GRPO x 3 seeds, as one Ray Tune grid (`dapo_rllib.experiments.real_model`). Each trial trains
6 iterations and validates on 64 held-out problems before training, after 3 and after 6; one trial runs at a
time (the learner and the env runner take a core each). When the grid has run, `real_model.md` (a row per
arm: final held-out avg@4 mean ± std, iterations to +0.10) and `real_model.png` are written into the run
directory.

    python tuned_examples/dapo/smollm2_reasoning_gym_study.py
    python tuned_examples/dapo/smollm2_reasoning_gym_study.py --arms GRPO --seeds 1,2
    python tuned_examples/dapo/smollm2_reasoning_gym_study.py --seeds 1 --stop '{"training_iteration": 1}'   # smoke
    python tuned_examples/dapo/smollm2_reasoning_gym_study.py --report-from runs/DAPO_<a> runs/DAPO_<b>

`--report-from` trains nothing: it writes the report from the trials of earlier runs together (seeds or arms
run at different times), into the last run directory named.
"""

import argparse
from pathlib import Path

import dapo_rllib  # noqa: F401  (registers "DAPO" and "dapo_reasoning_gym")
from dapo_rllib.cli.train import TrainOptions, add_train_options, train
from dapo_rllib.experiments.comparison_grid import print_report
from dapo_rllib.experiments.real_model import (
    ITERATIONS,
    SEEDS,
    all_arms,
    smollm2_task_config,
    study_search_space,
    write_report,
)

base = smollm2_task_config().env_runners(num_env_runners=1, num_cpus_per_env_runner=1)
config = study_search_space(base)
stop = {"training_iteration": ITERATIONS}


def after_run(outcomes, run_dir) -> None:
    """real_model.md and real_model.png from the trials of this run."""
    print_report(*write_report([o.logdir for o in outcomes], run_dir), "real-model study")


def report_from(run_dirs: list[Path]) -> None:
    """real_model.md and real_model.png from the trials of several runs, into the last one."""
    trials = [trial for run in run_dirs for trial in sorted(run.iterdir()) if (trial / "result.json").is_file()]
    if not trials:
        raise SystemExit(f"--report-from: no trial directories (with a result.json) in {[str(d) for d in run_dirs]}")
    print_report(*write_report(trials, run_dirs[-1]), "real-model study")


def seeds_arg(text: str) -> int | list[int]:
    """ "3": a count (seeds 0, 1, 2); "1,2" or "2," (seed 2 alone): the seeds themselves."""
    return [int(seed) for seed in text.split(",") if seed] if "," in text else int(text)


if __name__ == "__main__":
    parser = add_train_options(
        argparse.ArgumentParser(description="The real-model study (options as for `rllib train file`).")
    )
    parser.add_argument(
        "--seeds",
        type=seeds_arg,
        default=SEEDS,
        help=f"seeds per arm: a count N (seeds 0 .. N-1, default {SEEDS}) or a list, e.g. 1,2 or 2, (seed 2 alone)",
    )
    parser.add_argument(
        "--arms", default=",".join(all_arms()), help=f"comma-separated (default: all, {','.join(all_arms())})"
    )
    parser.add_argument(
        "--report-from", nargs="+", type=Path, metavar="RUN_DIR", help="train nothing: report these runs' trials"
    )
    args = parser.parse_args()
    if args.report_from:
        report_from(args.report_from)
        raise SystemExit(0)
    if args.no_tune:
        parser.error("the study is a Tune grid (arms x seeds): drop --no-tune")
    unknown = sorted(set(args.arms.split(",")) - set(all_arms()))
    if unknown:
        parser.error(f"--arms: unknown {unknown}; the arms are {list(all_arms())}")
    train(
        study_search_space(base, seeds=args.seeds, arms=args.arms.split(",")),
        TrainOptions.from_args(args, stop),
        after_run,
    )
