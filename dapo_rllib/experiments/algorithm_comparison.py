"""The registered algorithms side by side (`tuned_examples/dapo/algorithm_comparison.py`).

Every algorithm of `dapo_rllib.algorithm.family` x seeds runs as one Ray Tune grid on the ablation's
scratchpad-sums task (`ablation.sums_task_config`), scored against the ablation's target. A Tune
grid has one trainable, so each arm is DAPO's trainable with the settings the algorithm's config
class sets (`COMPARED_SETTINGS`, read from that class's defaults): the loop, learner and
connectors a registered algorithm runs are DAPO's, so the arm trains as the algorithm does.
`write_report` writes `comparison.md` and `comparison.png` (`dapo_rllib.experiments.comparison_grid`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from dapo_rllib.algorithm.family import ALGORITHMS, algorithm_class
from dapo_rllib.experiments import comparison_grid

#: Every setting in which a registered algorithm's defaults may differ from DAPO's (a test keeps
#: this complete): an arm sets all of them.
COMPARED_SETTINGS = (
    "policy_loss",
    "adv_estimator",
    "clip_eps_low",
    "clip_eps_high",
    "clip_ratio_c",
    "loss_agg_mode",
    "kl_coef",
    "kl_penalty",
    "dynamic_sampling",
    "overlong_filtering",
    "overlong_buffer_len",
)
ALGORITHM_KEY = "compared_algorithm"  # the config attribute that names a trial's algorithm


def algorithm_settings(name: str, *, soft_overlong_buffer: int) -> dict[str, Any]:
    """The `COMPARED_SETTINGS` of algorithm `name`'s defaults, its soft overlong buffer (DAPO's is
    4,096 tokens, for 20,480-token responses) scaled down to `soft_overlong_buffer`."""
    defaults = algorithm_class(name).get_default_config()
    settings = {key: getattr(defaults, key) for key in COMPARED_SETTINGS}
    buffer = defaults.overlong_settings.buffer_tokens(defaults.max_response_length)
    settings["overlong_buffer_len"] = min(buffer, soft_overlong_buffer)
    return settings


def comparison_search_space(
    config: AlgorithmConfig, *, algorithms: Sequence[str] = tuple(ALGORITHMS), seeds: int, soft_overlong_buffer: int
) -> AlgorithmConfig:
    """A copy of `config` that Tune expands into every one of `algorithms` x `seeds` seeds."""
    arms = {name: algorithm_settings(name, soft_overlong_buffer=soft_overlong_buffer) for name in algorithms}
    return comparison_grid.arms_search_space(config, arms, seeds=seeds, key=ALGORITHM_KEY)


def write_report(
    trial_dirs: Sequence[str | Path], run_dir: str | Path, *, metric: str, target: float, algorithms: Sequence[str]
) -> tuple[Path, Path, list[str]]:
    """`comparison.md` and `comparison.png` in `run_dir`, a row per algorithm with its policy loss,
    estimator and aggregation; and the names of the trials left out."""
    recipe = {
        name: "{policy_loss}, {adv_estimator}, {loss_agg_mode}".format(
            **algorithm_settings(name, soft_overlong_buffer=0)
        )
        for name in algorithms
    }
    return comparison_grid.write_report(
        trial_dirs,
        run_dir,
        metric=metric,
        target=target,
        key=ALGORITHM_KEY,
        arms=algorithms,
        name="comparison",
        title="The GRPO family on scratchpad sums",
        arm_title="algorithm",
        extra_column=("loss, estimator, aggregation", recipe),
    )
