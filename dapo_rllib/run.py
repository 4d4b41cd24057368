"""Running a tuned example: RLlib's example-script arguments, plus held-out accuracy before and after.

`run_tuned_example(config, args)` trains `config` for `--stop-iters` iterations, either in
process (`--no-tune`) or as a Ray Tune experiment, and ends with the line

    eval accuracy: <before> -> <after>

where both numbers are avg@k on the evaluation env (`config.evaluation(evaluation_config=...)`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import ray
from ray.rllib.examples.utils import add_rllib_example_script_args, run_rllib_example_script_experiment
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, EVALUATION_RESULTS

from dapo_rllib.dapo import ROLLOUT

EVAL_BEFORE = "eval_before_training"


def example_args(default_iters: int, **defaults) -> argparse.ArgumentParser:
    """RLlib's example-script parser (--stop-iters, --no-tune, --num-env-runners, ...)."""
    parser = add_rllib_example_script_args(default_iters=default_iters, default_reward=float("inf"), default_timesteps=10**12)
    parser.add_argument("--storage-path", default=str(Path.cwd() / "runs"), help="where --no-tune runs save their checkpoint (Tune runs: ~/ray_results)")
    parser.set_defaults(**defaults)
    return parser


def accuracy(eval_results: dict) -> float:
    return float(eval_results[ENV_RUNNER_RESULTS]["accuracy"])


def iteration_summary(result: dict) -> str:
    rollout = result.get(ROLLOUT, {})
    learner = result.get("learners", {}).get("default_policy", {})
    return (
        f"iter {result['training_iteration']:>3}  acc {rollout.get('acc_mean', float('nan')):.3f}  "
        f"reward {rollout.get('reward_mean', float('nan')):+.3f}  "
        f"groups kept {rollout.get('groups_kept', 0):.0f}/{rollout.get('groups_generated', 0):.0f} "
        f"in {rollout.get('generation_rounds', 0):.0f} rounds  "
        f"len {rollout.get('response_length_mean', float('nan')):.1f}  "
        f"entropy {learner.get('entropy', float('nan')):.3f}  "
        f"loss {learner.get('policy_loss', float('nan')):+.4f}  "
        f"{result.get('time_this_iter_s', 0):.1f}s"
    )


def _evaluate_before_training(algorithm, metrics_logger=None, **kwargs) -> None:
    """Algorithm-init callback (Tune path): held-out accuracy of the untrained policy."""
    before = accuracy(algorithm.evaluate())
    algorithm.metrics.log_value(EVAL_BEFORE, before, reduce="max")


def run_tuned_example(config, args) -> tuple[float, float]:
    """Train `config`; returns (accuracy before, accuracy after) and prints the summary line."""
    if args.no_tune:
        return _run_in_process(config, args)
    config.evaluation(evaluation_interval=args.stop_iters)
    config.callbacks(on_algorithm_init=_evaluate_before_training)
    results = run_rllib_example_script_experiment(config, args, stop={"training_iteration": args.stop_iters})
    last = results.get_best_result(metric="training_iteration", mode="max")
    # Logged once, at algorithm init: it appears in the first reported iteration only.
    before = float(last.metrics_dataframe[EVAL_BEFORE].dropna().iloc[0])
    after = accuracy(last.metrics[EVALUATION_RESULTS])
    print(f"Tune results, TensorBoard logs and checkpoints: {last.path}")
    print(f"eval accuracy: {before:.3f} -> {after:.3f}")
    return before, after


def _run_in_process(config, args) -> tuple[float, float]:
    ray.init(num_cpus=args.num_cpus or None, ignore_reinit_error=True, include_dashboard=False)
    if args.num_env_runners is not None:
        config.env_runners(num_env_runners=args.num_env_runners)
    start = time.time()
    algo = config.build_algo()
    print(f"built DAPO in {time.time() - start:.0f}s; evaluating before training ...", flush=True)
    before = accuracy(algo.evaluate())
    print(f"eval accuracy before training: {before:.3f}", flush=True)
    for _ in range(args.stop_iters):
        print(iteration_summary(algo.train()), flush=True)
    after = accuracy(algo.evaluate())
    checkpoint = Path(args.storage_path) / f"dapo_{time.strftime('%Y%m%d_%H%M%S')}" / "checkpoint_final"
    algo.save_to_path(str(checkpoint))
    algo.stop()
    print(f"checkpoint: {checkpoint}")
    print(f"total time {time.time() - start:.0f}s")
    print(f"eval accuracy: {before:.3f} -> {after:.3f}")
    return before, after
