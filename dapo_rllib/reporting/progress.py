"""Terminal progress: a one-line summary per training iteration, for any RLlib algorithm."""

from __future__ import annotations

import logging
import math
from typing import Any

from ray import tune
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    EVALUATION_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)
from ray.tune.result import TIME_THIS_ITER_S, TRAINING_ITERATION

from dapo_rllib.columns import Metrics, tag
from dapo_rllib.reporting.eval_metrics import headline_values
from dapo_rllib.reporting.tensorboard import EVAL_BEFORE_TRAINING, readable_scalars

logger = logging.getLogger(__name__)

# DAPO's summary fields: (readable tag, label, format).
_ACC, _KEPT, _GENERATED = (
    tag(Metrics.ROLLOUT, m) for m in (Metrics.ACC_MEAN, Metrics.GROUPS_KEPT, Metrics.GROUPS_GENERATED)
)
_TURNS, _TURNS_MAX, _TOOL_CALLS = (
    tag(Metrics.ROLLOUT, m) for m in (Metrics.TURNS_MEAN, Metrics.TURNS_MAX, Metrics.TOOL_CALLS)
)
_DAPO_FIELDS = (
    (_ACC, "acc", "{:.3f}"),
    (tag(Metrics.ROLLOUT, Metrics.REWARD_MEAN), "reward", "{:+.3f}"),
    (tag(Metrics.ROLLOUT, Metrics.GENERATION_ROUNDS), "rounds", "{:.0f}"),
    (tag(Metrics.ROLLOUT, Metrics.RESPONSE_LENGTH_MEAN), "len", "{:.1f}"),
    (tag(Metrics.LEARNER, Metrics.ENTROPY), "entropy", "{:.3f}"),
    (tag(Metrics.LEARNER, Metrics.POLICY_LOSS), "loss", "{:+.4f}"),
    (tag(Metrics.LEARNER, Metrics.PG_CLIPFRAC_HIGH), "clip_high", "{:.3f}"),
    (tag(Metrics.LEARNER, Metrics.ROLLOUT_LOGP_ABS_DIFF), "logp_diff", "{:.4f}"),
    # Only there with rollout_correction="tis": the line shows that the correction is on.
    (tag(Metrics.LEARNER, Metrics.ROLLOUT_IS_WEIGHT_MEAN), "tis_weight", "{:.3f}"),
    (tag(Metrics.LEARNER, Metrics.LR), "lr", "{:.2e}"),
)


def lookup(result: dict, path: str, default: Any = None) -> Any:
    """`result["a"]["b"]` for path "a/b" (Tune's flattened stop keys), else `default`."""
    node: Any = result
    for key in path.split("/"):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def summary_line(result: dict) -> str:
    """`iter 3 | acc 0.512 reward +0.024 ... | 2.1s`: DAPO's metrics, or the episode return. Episodes of
    several turns add `turns 2.31 tools 1.05` (per episode)."""
    scalars = readable_scalars(result)
    if _ACC in scalars:
        fields = [f"{label} {fmt.format(scalars[tag])}" for tag, label, fmt in _DAPO_FIELDS if tag in scalars]
        kept = f"groups {scalars.get(_KEPT, 0):.0f}/{scalars.get(_GENERATED, 0):.0f}"
        fields.insert(3, kept)
        if scalars.get(_TURNS_MAX, 1) > 1:
            fields[4:4] = [f"turns {scalars[_TURNS]:.2f}", f"tools {scalars.get(_TOOL_CALLS, 0):.2f}"]
    else:
        ret = lookup(result, f"{ENV_RUNNER_RESULTS}/{EPISODE_RETURN_MEAN}")
        fields = [f"return {ret:.2f}"] if ret is not None else []
        fields.append(f"env steps {lookup(result, f'{ENV_RUNNER_RESULTS}/{NUM_ENV_STEPS_SAMPLED_LIFETIME}', 0):.0f}")
    for section, label in ((EVAL_BEFORE_TRAINING, "before training "), (EVALUATION_RESULTS, "")):
        fields += [
            f"eval {label}{name} {value:.3f}"
            for name, value in headline_values(result.get(section) or {}).items()
            if not math.isnan(value)
        ]
    seconds = result.get(TIME_THIS_ITER_S, 0.0)
    return f"iter {result[TRAINING_ITERATION]:>3} | " + "  ".join(fields) + f" | {seconds:.1f}s"


class IterationSummary(tune.Callback):
    """Logs `summary_line` for each reported result of each trial (Tune path)."""

    @override(tune.Callback)
    def on_trial_result(self, iteration, trials, trial, result, **info):
        logger.info("[%s] %s", trial.trial_id, summary_line(result))
