"""Evaluating a saved policy through the algorithm's evaluation API (`Algorithm.evaluate`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ray.tune.utils import flatten_dict

from dapo_rllib.checkpoints import build_with_policy


def evaluate_checkpoint(checkpoint: str | Path, *, data: str | None = None, num_samples: int | None = None, max_problems: int | None = None, out: str | Path | None = None) -> dict[str, Any]:
    """Evaluate a checkpoint's policy; print the numbers and optionally write them as JSON.

    DAPO: `data` replaces the evaluation dataset, `num_samples` the k of avg@k and
    `max_problems` the number of problems. Other algorithms evaluate as configured.
    """
    from dapo_rllib.dapo import DAPOConfig

    def adjust(config) -> None:
        dapo_settings = {"data": data, "num_samples": num_samples, "max_problems": max_problems}
        if not isinstance(config, DAPOConfig):
            given = [k for k, v in dapo_settings.items() if v is not None]
            if given:
                raise ValueError(f"{given} apply to DAPO checkpoints; {str(checkpoint)!r} is a {config.algo_class.__name__} checkpoint")
            return
        if data is not None:
            config.evaluation(evaluation_config={"env_config": {"dataset": data}})
        config.training(
            eval_num_samples=num_samples or config.eval_num_samples,
            eval_max_problems=max_problems if max_problems is not None else config.eval_max_problems,
        )

    algo = build_with_policy(checkpoint, adjust)
    try:
        results = algo.evaluate()
    finally:
        algo.stop()
    numbers = {k: v for k, v in flatten_dict(results).items() if isinstance(v, (int, float))}
    width = max(map(len, numbers), default=0)
    print(f"evaluation of {checkpoint}" + (f" on {data}" if data else ""))
    for key, value in sorted(numbers.items()):
        print(f"  {key.ljust(width)}  {value:.4f}" if isinstance(value, float) else f"  {key.ljust(width)}  {value}")
    if out is not None:
        Path(out).write_text(json.dumps({"checkpoint": str(checkpoint), "data": data, "results": numbers}, indent=1))
        print(f"results: {out}")
    return results
