"""Held-out validation during training: avg@n, pass@k, maj@n per data source.

Run by RLlib's evaluation (`evaluation_interval`, `Algorithm.evaluate()`) through its
`custom_evaluation_function` hook, and once before the first training step
(`val_before_train`). Each env runner samples its shard of the validation problems
(`VLLMEnvRunner.evaluate`); the shards are merged here and summarised by
`dapo_rllib.reporting.eval_metrics`. (The `rllib evaluate` command, `dapo_rllib.cli.evaluate`, reports the same
metrics for a model or checkpoint outside training.)
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, EVALUATION_RESULTS, NUM_ENV_STEPS_SAMPLED, NUM_EPISODES
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger
from ray.tune.utils import flatten_dict

from dapo_rllib.columns import Metrics
from dapo_rllib.reporting import eval_metrics
from dapo_rllib.rollout.env_runner_group import on_env_runners
from dapo_rllib.rollout.game_loop import RANDOM_SCRIPT
from dapo_rllib.settings import FeatureSettings, is_positive_int, require

logger = logging.getLogger(__name__)

DATA_FILE_SUFFIXES = (".parquet", ".jsonl", ".gz")  # an eval_dataset with these names a file; others a built-in set


@dataclasses.dataclass(frozen=True)
class EvaluationSettings(FeatureSettings):
    """How DAPO validates (`DAPOConfig.evaluation`): n samples per problem, reported per data source as
    avg@n, pass@k, maj@n, response length and truncation ratio (`dapo_rllib.reporting.eval_metrics`).

    Attributes:
        eval_dataset: The validation problems: a .parquet/.jsonl file in the env's row format (e.g. the
            AIME 2024 file) or a built-in set ("arithmetic" for the math env, "generated" for the code
            env; their held-out test split). It replaces the problem source of the env config
            ("dataset", "split", "num_problems"); the env's other settings (scorer, scoring timeout)
            carry over. None: the env of `evaluation_config`, by default the training env's "test" split.
        eval_num_samples: n, samples per problem (avg@n). Reference 32.
        eval_max_problems: Validate on the first this-many problems only (None: all).
        eval_temperature, eval_top_p: Validation sampling. Reference 1.0, 0.7.
        val_before_train: Validate once before the first training step (reported as
            `evaluation_before_training` in the first result, at step 0 in TensorBoard). Skipped when
            resuming from a checkpoint.
    """

    eval_dataset: str | None = None
    eval_num_samples: int = 32
    eval_max_problems: int | None = None
    eval_temperature: float = 1.0
    eval_top_p: float = 0.7
    val_before_train: bool = True

    def validate(self) -> None:
        require(
            is_positive_int(self.eval_num_samples),
            f"eval_num_samples={self.eval_num_samples!r} must be a positive integer",
        )
        require(
            self.eval_max_problems is None or is_positive_int(self.eval_max_problems),
            f"eval_max_problems={self.eval_max_problems!r} must be a positive integer or None (all problems)",
        )
        require(
            self.eval_dataset is None
            or Path(self.eval_dataset).suffix not in DATA_FILE_SUFFIXES
            or Path(self.eval_dataset).is_file(),
            f"eval_dataset={self.eval_dataset!r}: no such file",
        )
        require(self.eval_temperature >= 0, f"eval_temperature={self.eval_temperature} must be >= 0")
        require(0 < self.eval_top_p <= 1, f"eval_top_p={self.eval_top_p} must be in (0, 1]")


def evaluate_heldout(algorithm, eval_env_runner_group) -> tuple[dict, int, int]:
    """Validation metrics per data source (RLlib's `custom_evaluation_function` hook).

    Runs on the evaluation env runners if there are any, else on the training ones (which hold
    the learner's weights: DAPO syncs them after every update).
    """
    settings = EvaluationSettings.from_flat(algorithm.config)
    results = heldout_results(settings, eval_env_runner_group or algorithm.env_runner_group)
    # Evaluate() reads results back as merged stats, the way eval env runners report theirs.
    algorithm.metrics.aggregate([as_stats(results)], key=EVALUATION_RESULTS)
    num_samples = results[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED]
    return results, num_samples, num_samples


def heldout_results(settings: EvaluationSettings, group) -> dict[str, Any]:
    """{data source: avg@n, pass@k, maj@n, ...} on the validation env, over `group`'s runners."""
    start = time.perf_counter()
    # Each runner holds a shard of the problems: one that does not answer must not shrink the set.
    shards = on_env_runners(
        group,
        lambda runner: runner.evaluate(num_samples=settings.eval_num_samples, max_problems=settings.eval_max_problems),
    )
    problems = sorted((record for shard in shards for record in shard), key=lambda r: r.problem_index)
    results: dict[str, Any] = eval_metrics.summarize(problems, elo_anchor=RANDOM_SCRIPT)
    elapsed = time.perf_counter() - start
    num_samples = sum(m[Metrics.NUM_SAMPLES] for _, m in eval_metrics.per_source(results).values())
    results[ENV_RUNNER_RESULTS] = {
        NUM_ENV_STEPS_SAMPLED: num_samples,
        NUM_EPISODES: num_samples,
        Metrics.EVAL_TIME_S: elapsed,
        Metrics.PROMPTS_TRUNCATED: sum(r.prompt_truncated for r in problems),
    }
    logger.info(f"[DAPO] validation ({elapsed:.1f} s): {eval_metrics.headline(results)}")
    return results


def as_stats(results: dict[str, Any]) -> dict:
    """(Nested) `results` as reduced MetricsLogger stats, ready for `MetricsLogger.aggregate`."""
    logger = MetricsLogger(root=False)
    for key, value in flatten_dict(results, delimiter="\0").items():
        logger.log_value(tuple(key.split("\0")), value, window=1)
    return logger.reduce()
