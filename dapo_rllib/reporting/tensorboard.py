"""DAPO's training results as TensorBoard scalars with readable names.

RLlib's result dict nests metrics by where they were computed; a DAPO user looks for them by
what they measure. The tags written here:

    rollout/...   sampling: reward_mean, acc_mean, response_length_mean/max, truncation_ratio,
                  generation_rounds, groups_kept, groups_kept_fraction, ...
    learner/...   the update: policy_loss, entropy, pg_clipfrac_low/high/dual, approx_kl,
                  grad_norm, mean_token_prob, lr, ...
    timing/...    wall time of generation, scoring, old log-probs, update, weight sync,
                  validation, the whole iteration, and generated tokens per second
    evaluation/<data source>/...
                  validation: avg@n, pass@k, maj@n, response_length_mean, truncation_ratio,
                  scoring_timeouts, num_problems, num_samples (step 0: before training)
    progress/...  lifetime counters

The step of every scalar is the training iteration. Where the files go:

- in process: `DAPOConfig.reporting(tensorboard_dir=...)` makes the algorithm write them
  (`rllib train file ... --no-tune` sets it to the run directory);
- under Ray Tune: `TensorBoardCallback` writes them into each trial's directory, next to Tune's
  own files (`rllib train file` adds it; with `tune.Tuner`, pass it in `RunConfig(callbacks=...)`).
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any, Iterator

from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.learner import DEFAULT_OPTIMIZER, LR_KEY
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EVALUATION_RESULTS,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    MODULE_TRAIN_BATCH_SIZE_MEAN,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
    WEIGHTS_SEQ_NO,
)
from ray.tune.logger import LoggerCallback
from ray.tune.result import TIME_THIS_ITER_S, TRAINING_ITERATION

from dapo_rllib.columns import Metrics, tag

#: Result key of the evaluation DAPO runs before its first training step.
EVAL_BEFORE_TRAINING = "evaluation_before_training"

# RLlib counters that only say how the batch was cut; not worth a chart.
_LEARNER_SKIP = ("num_", WEIGHTS_SEQ_NO, MODULE_TRAIN_BATCH_SIZE_MEAN)
_RENAMES = {
    # The learning rate, as RLlib's Learner logs it per optimizer: "<optimizer name>_learning_rate".
    f"{DEFAULT_OPTIMIZER}_{LR_KEY}": Metrics.LR,
    LEARNER_UPDATE_TIMER: Metrics.UPDATE_S,
    SYNCH_WORKER_WEIGHTS_TIMER: Metrics.WEIGHT_SYNC_S,
}


def _numeric_leaves(section: Any, nested: bool = False) -> Iterator[tuple[str, float]]:
    """(key, value) of the numbers in `section`; with `nested`, also of its dicts' numbers, as "key/inner"
    (the rollout section's `ended_by/<reason>` and `tool_errors/<kind>`)."""
    if isinstance(section, dict):
        for key, value in section.items():
            # RLlib reports a metric that was not logged this iteration as NaN.
            if isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value):
                yield str(key), float(value)
            elif nested and isinstance(value, dict):
                yield from ((f"{key}/{inner}", v) for inner, v in _numeric_leaves(value, nested=True))


def readable_scalars(result: dict) -> dict[str, float]:
    """The tags above, from one `Algorithm.train()` result."""
    scalars = {tag(Metrics.ROLLOUT, k): v for k, v in _numeric_leaves(result.get(Metrics.ROLLOUT), nested=True)}
    learners = result.get(LEARNER_RESULTS, {})
    # The step's timers: the algorithm's and the learner's (old log-probs).
    for section in (result, learners):
        scalars.update({tag(Metrics.TIMING, _RENAMES.get(k, k)): v for k, v in _numeric_leaves(section.get(TIMERS))})
    for section in (learners, learners.get(DEFAULT_MODULE_ID)):
        for key, value in _numeric_leaves(section):
            if not key.startswith(_LEARNER_SKIP):
                scalars[tag(Metrics.LEARNER, _RENAMES.get(key, key))] = value
    scalars.update(evaluation_scalars(result.get(EVALUATION_RESULTS)))
    levels = result.get(Metrics.CURRICULUM_LEVELS) or {}
    scalars.update({tag(Metrics.CURRICULUM_LEVELS, source): float(level) for source, level in levels.items()})
    if TIME_THIS_ITER_S in result:
        scalars[tag(Metrics.TIMING, Metrics.ITERATION_S)] = float(result[TIME_THIS_ITER_S])
    sampled = result.get(ENV_RUNNER_RESULTS, {}).get(NUM_ENV_STEPS_SAMPLED_LIFETIME)
    if sampled is not None:
        scalars[tag(Metrics.PROGRESS, Metrics.ENV_STEPS_SAMPLED)] = float(sampled)
    return scalars


def evaluation_scalars(evaluation: dict | None) -> dict[str, float]:
    """`evaluation/<data source>/<metric>` of one validation, and its wall time."""
    scalars = {}
    for source, metrics in (evaluation or {}).items():
        if source == ENV_RUNNER_RESULTS:
            scalars.update(
                {
                    tag(Metrics.TIMING, Metrics.EVALUATION_S): v
                    for k, v in _numeric_leaves(metrics)
                    if k == Metrics.EVAL_TIME_S
                }
            )
        else:
            scalars.update({tag(EVALUATION_RESULTS, f"{source}/{k}"): v for k, v in _numeric_leaves(metrics)})
    return scalars


class TensorBoardWriter:
    """Writes `readable_scalars` of each result into event files under `logdir`."""

    def __init__(self, logdir: str | Path):
        from torch.utils.tensorboard import SummaryWriter

        self.logdir = Path(logdir)
        self._writer = SummaryWriter(log_dir=str(self.logdir))

    def write(self, result: dict) -> None:
        """One `Algorithm.train()` result, at its training iteration."""
        self._add(evaluation_scalars(result.get(EVAL_BEFORE_TRAINING)), step=0)
        self._add(readable_scalars(result), step=int(result[TRAINING_ITERATION]))

    def write_evaluation(self, eval_results: dict, step: int) -> None:
        """An `Algorithm.evaluate()` result obtained outside `train()`."""
        self._add(evaluation_scalars(eval_results), step=step)

    def _add(self, scalars: dict[str, float], step: int) -> None:
        for name, value in scalars.items():
            self._writer.add_scalar(name, value, step)
        # A run can be killed any time; what was logged must be on disk.
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class TensorBoardCallback(LoggerCallback):
    """Ray Tune callback: each trial's results as readable scalars in the trial directory."""

    def __init__(self):
        self._writers: dict[Any, TensorBoardWriter] = {}

    @override(LoggerCallback)
    def log_trial_start(self, trial) -> None:
        trial.init_local_path()
        self._writers[trial] = TensorBoardWriter(trial.local_path)

    @override(LoggerCallback)
    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        if trial not in self._writers:
            self.log_trial_start(trial)
        self._writers[trial].write(result)

    @override(LoggerCallback)
    def log_trial_end(self, trial, failed: bool = False) -> None:
        writer = self._writers.pop(trial, None)
        if writer is not None:
            writer.close()
