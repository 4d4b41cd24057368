"""The DAPO paper's ablation (its Table 1) as a Ray Tune grid: cumulative stages x seeds.

The paper adds DAPO's techniques one at a time to naive GRPO and reports AIME 2024 avg@32
after each (Qwen2.5-32B): naive GRPO 30, + overlong filtering 36, + clip-higher 38, + soft
overlong punishment 41, + token-level loss 42, + dynamic sampling 50. Here every stage is a
set of DAPOConfig settings (`STAGES`), never a code path, and `ablation_search_space` turns a
base config into a Tune grid over stages and seeds. After the run, `write_report` reads every
trial's results and writes `ablation.md` (a row per stage, mean ± std over seeds) and
`ablation.png` (curves per stage, seed spread shaded) into the run directory.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import tune
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.tune.result import TRAINING_ITERATION

from dapo_rllib.columns import Metrics, tag
from dapo_rllib.tensorboard import EVAL_BEFORE_TRAINING, evaluation_scalars, readable_scalars

#: Naive GRPO (Shao et al., 2024), as the paper's baseline: the sequence-mean loss, a symmetric
#: clip range, every group trained on, no length shaping. The dual clip is off in every stage
#: (neither paper has it); the KL term is off in every stage (the paper's baseline drops it too).
NAIVE_GRPO: dict[str, Any] = {
    "loss_agg_mode": "seq-mean-token-mean",
    "clip_eps_low": 0.2,
    "clip_eps_high": 0.2,
    "clip_ratio_c": None,
    "overlong_filtering": False,
    "overlong_buffer_len": 0,
    "dynamic_sampling": False,
    "kl_coef": 0.0,
}

#: The stages in the paper's order: (name, the settings the stage adds to the one before).
#: `soft_overlong_buffer` is filled in by `stages()`: the buffer scales with the response limit.
STAGE_CHANGES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("naive GRPO", {}),
    ("+ overlong filtering", {"overlong_filtering": True}),
    ("+ clip-higher", {"clip_eps_high": 0.28}),
    ("+ soft overlong punishment", {"overlong_buffer_len": "soft_overlong_buffer"}),
    ("+ token-level loss", {"loss_agg_mode": "token-mean"}),
    ("+ dynamic sampling", {"dynamic_sampling": True}),
)
#: The paper's AIME 2024 avg@32 after each stage (Table 1), for the report's last column.
PAPER_AIME: dict[str, int] = dict(zip((name for name, _ in STAGE_CHANGES), (30, 36, 38, 41, 42, 50)))
STAGE_KEY = "ablation_stage"  # the config attribute that names a trial's stage


def stages(soft_overlong_buffer: int) -> dict[str, dict[str, Any]]:
    """Stage name -> its complete settings (cumulative), with L_cache = `soft_overlong_buffer`."""
    settings, out = dict(NAIVE_GRPO), {}
    for name, change in STAGE_CHANGES:
        settings |= {k: soft_overlong_buffer if v == "soft_overlong_buffer" else v for k, v in change.items()}
        out[name] = dict(settings)
    return out


def ablation_search_space(config: AlgorithmConfig, *, seeds: int, soft_overlong_buffer: int) -> AlgorithmConfig:
    """A copy of `config` that Tune expands into every stage x `seeds` seeds (0 .. seeds-1).

    The stage is one grid axis (`ablation_stage`); each stage setting follows it through
    `tune.sample_from`, so the grid has len(STAGES) x seeds trials, not a cross product of
    settings. The seed also picks the training problems' draw order.
    """
    if not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds={seeds!r} must be a positive integer")
    table = stages(soft_overlong_buffer)
    config = config.copy(copy_frozen=False)
    setattr(config, STAGE_KEY, tune.grid_search(list(table)))
    for key in next(iter(table.values())):
        setattr(config, key, tune.sample_from(lambda spec, key=key: table[spec.config[STAGE_KEY]][key]))
    config.seed = tune.grid_search(list(range(seeds)))
    config.env_config = dict(config.env_config) | {"seed": tune.sample_from(lambda spec: spec.config.seed)}
    return config


@dataclass
class TrialCurves:
    """One trial's curves, each a list of (training iteration, value)."""

    stage: str
    seed: int
    accuracy: list[tuple[int, float]]  # held-out avg@n; iteration 0 is before training
    samples: dict[int, float]  # iteration -> completions sampled so far
    series: dict[str, list[tuple[int, float]]]  # tag -> per-iteration training metric


#: The training metrics the report and the plot use, by their TensorBoard tags.
ENTROPY = tag(Metrics.LEARNER, Metrics.ENTROPY)
RESPONSE_LENGTH = tag(Metrics.ROLLOUT, Metrics.RESPONSE_LENGTH_MEAN)
TRUNCATION = tag(Metrics.ROLLOUT, Metrics.TRUNCATION_RATIO)
SAMPLES = tag(Metrics.PROGRESS, Metrics.ENV_STEPS_SAMPLED)
TRAIN_SERIES = (ENTROPY, RESPONSE_LENGTH, TRUNCATION)


def read_trial(trial_dir: Path, accuracy_tag: str) -> TrialCurves:
    """A trial's curves from Tune's `params.json` and `result.json` in `trial_dir`."""
    params = json.loads((trial_dir / "params.json").read_text())
    curves = TrialCurves(params[STAGE_KEY], int(params["seed"]), [], {0: 0.0}, {name: [] for name in TRAIN_SERIES})
    for line in (trial_dir / "result.json").read_text().splitlines():
        result = json.loads(line)
        iteration = result[TRAINING_ITERATION]
        scalars = readable_scalars(result)
        before = evaluation_scalars(result.get(EVAL_BEFORE_TRAINING))
        if accuracy_tag in before:
            curves.accuracy.append((0, before[accuracy_tag]))
        if accuracy_tag in scalars:
            curves.accuracy.append((iteration, scalars[accuracy_tag]))
        if SAMPLES in scalars:
            curves.samples[iteration] = scalars[SAMPLES]
        for name in TRAIN_SERIES:
            if name in scalars:
                curves.series[name].append((iteration, scalars[name]))
    return curves


@dataclass
class StageRow:
    """A stage's line of the report, over its seeds."""

    stage: str
    seeds: int
    final: tuple[float, float]  # held-out accuracy at the last validation: mean, std
    best: float  # mean over seeds of each seed's best validation
    iterations_to_target: float | None  # mean over the seeds that reached the target
    samples_to_target: float | None
    reached: int  # seeds that reached the target
    entropy: float  # each over the last `TAIL` iterations, then over seeds
    response_length: float
    truncated: float


TAIL = 3  # training metrics are averaged over the last few iterations: one step is noisy


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _tail_mean(points: list[tuple[int, float]]) -> float:
    tail = [v for _, v in points[-TAIL:]]
    return sum(tail) / len(tail) if tail else math.nan


def _to_target(curves: TrialCurves, target: float) -> tuple[int, float] | None:
    """(iteration, samples) of the first validation at or above `target`, after training started."""
    for iteration, value in curves.accuracy:
        if iteration > 0 and value >= target:
            return iteration, curves.samples.get(iteration, math.nan)
    return None


def summarize(trials: list[TrialCurves], target: float) -> list[StageRow]:
    """A row per stage (in the paper's order) over its trials."""
    rows = []
    for name, _ in STAGE_CHANGES:
        mine = [t for t in trials if t.stage == name and t.accuracy]
        if not mine:
            continue
        reached = [r for r in (_to_target(t, target) for t in mine) if r is not None]
        rows.append(
            StageRow(
                stage=name,
                seeds=len(mine),
                final=_mean_std([t.accuracy[-1][1] for t in mine]),
                best=sum(max(v for _, v in t.accuracy) for t in mine) / len(mine),
                iterations_to_target=sum(i for i, _ in reached) / len(reached) if reached else None,
                samples_to_target=sum(s for _, s in reached) / len(reached) if reached else None,
                reached=len(reached),
                entropy=_mean_std([_tail_mean(t.series[ENTROPY]) for t in mine])[0],
                response_length=_mean_std([_tail_mean(t.series[RESPONSE_LENGTH]) for t in mine])[0],
                truncated=_mean_std([_tail_mean(t.series[TRUNCATION]) for t in mine])[0],
            )
        )
    return rows


def markdown_table(rows: list[StageRow], *, target: float, metric: str, before: float | None) -> str:
    """The report's table as Markdown, with a header that says what each number is."""
    lines = [
        f"Held-out {metric}; before training: {'n/a' if before is None else f'{before:.3f}'}. Target fixed before the run: {target:.2f}. "
        f"Final: last validation, mean ± std over seeds. Best: each seed's best validation, mean over seeds. "
        f"To target: first validation at or above the target (mean over the seeds that reached it). "
        f"Entropy, response length (tokens) and truncated fraction: training rollouts, last {TAIL} iterations.",
        "",
        "| stage | seeds | final | best | iterations to target | samples to target | entropy | response length | truncated | paper (AIME avg@32) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        to_target = (
            (f"{r.iterations_to_target:.1f} ({r.reached}/{r.seeds})", f"{r.samples_to_target:,.0f}")
            if r.reached
            else (f"not reached (0/{r.seeds})", "–")
        )
        lines.append(
            f"| {r.stage} | {r.seeds} | {r.final[0]:.3f} ± {r.final[1]:.3f} | {r.best:.3f} | {to_target[0]} | {to_target[1]} | "
            f"{r.entropy:.3f} | {r.response_length:.1f} | {r.truncated:.3f} | {PAPER_AIME[r.stage]} |"
        )
    return "\n".join(lines) + "\n"


def _band(trials: list[TrialCurves], points) -> tuple[list[float], list[float], list[float], list[float]]:
    """x, mean, low, high of `points(trial)` over trials, at the x values every trial has."""
    series = [dict(points(t)) for t in trials]
    xs = sorted(set.intersection(*(set(s) for s in series))) if series else []
    values = [[s[x] for s in series] for x in xs]
    return xs, [sum(v) / len(v) for v in values], [min(v) for v in values], [max(v) for v in values]


def plot(trials: list[TrialCurves], out: Path, *, metric: str, target: float) -> Path:
    """Accuracy vs iterations and vs samples, entropy, response length, truncation and samples
    drawn: a mean line per stage, the seeds' range shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    panels = [
        (axes[0, 0], f"held-out {metric}", "training iteration", lambda t: t.accuracy),
        (
            axes[0, 1],
            f"held-out {metric}",
            "completions sampled",
            lambda t: [(t.samples.get(i, math.nan), v) for i, v in t.accuracy],
        ),
        (axes[0, 2], "entropy (training rollouts)", "training iteration", lambda t: t.series[ENTROPY]),
        (axes[1, 0], "response length, mean tokens", "training iteration", lambda t: t.series[RESPONSE_LENGTH]),
        (axes[1, 1], "truncated fraction", "training iteration", lambda t: t.series[TRUNCATION]),
        (axes[1, 2], "completions sampled", "training iteration", lambda t: sorted(t.samples.items())),
    ]
    for ax, title, xlabel, points in panels:
        for name, _ in STAGE_CHANGES:
            mine = [t for t in trials if t.stage == name]
            if not mine:
                continue
            if xlabel == "completions sampled":
                # Seeds sample different numbers of completions: x is their mean at each validation.
                xs, ys, lo, hi = _band(mine, lambda t: t.accuracy)
                xs = [sum(t.samples.get(x, math.nan) for t in mine) / len(mine) for x in xs]
            else:
                xs, ys, lo, hi = _band(mine, points)
            line = ax.plot(xs, ys, label=f"{name} ({len(mine)} seeds)", marker="." if len(xs) < 25 else None)[0]
            if len(mine) > 1:
                ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.15)
        if title.startswith("held-out"):
            ax.axhline(target, color="grey", linestyle=":", linewidth=1)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("DAPO ablation: cumulative stages (mean over seeds; shaded: min to max)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def write_report(
    trial_dirs: Sequence[str | Path], run_dir: str | Path, *, metric: str, target: float
) -> tuple[Path, Path, list[str]]:
    """`ablation.md` and `ablation.png` in `run_dir`, from the trials in `trial_dirs`; and the
    names of the trials left out.

    `metric` is the validation tag read, e.g. "evaluation/scratchpad_sums/avg@4"; a trial
    without it (one that failed before its first validation) is left out, named in the report
    and returned, never silently dropped.
    """
    run_dir = Path(run_dir)
    trials, missing = [], []
    for trial_dir in map(Path, trial_dirs):
        curves = read_trial(trial_dir, metric) if (trial_dir / "result.json").is_file() else None
        (trials if curves is not None and curves.accuracy else missing).append(
            curves if curves and curves.accuracy else trial_dir.name
        )
    if not trials:
        raise ValueError(
            f"no trial under {[str(d) for d in trial_dirs]} has validation results {metric!r}; nothing to report"
        )
    befores = [v for t in trials for i, v in t.accuracy if i == 0]
    before = sum(befores) / len(befores) if befores else None
    short_metric = metric.split("/", 1)[-1]
    text = "# DAPO ablation\n\n" + markdown_table(
        summarize(trials, target), target=target, metric=short_metric, before=before
    )
    if missing:
        text += f"\nTrials without validation results, left out: {', '.join(missing)}\n"
    md = run_dir / "ablation.md"
    md.write_text(text)
    return md, plot(trials, run_dir / "ablation.png", metric=short_metric, target=target), missing
