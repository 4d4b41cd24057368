"""A Tune grid of named arms (each a set of config settings) x seeds, and its report.

The ablation (`dapo_rllib.experiments.ablation`: cumulative stages) and the algorithm comparison
(`dapo_rllib.experiments.algorithm_comparison`: the registered algorithms) are both such grids.
`arms_search_space` turns a base config into the grid: one axis names the arm, every setting
follows it, and the seed is the other axis. After the run, `write_report` reads every trial's
results and writes `<name>.md` (a row per arm, mean ± std over seeds) and `<name>.png` (curves per
arm, seed spread shaded) into the run directory.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import tune
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.tune.result import TRAINING_ITERATION

from dapo_rllib.columns import Metrics, tag
from dapo_rllib.reporting.tensorboard import EVAL_BEFORE_TRAINING, evaluation_scalars, readable_scalars


def arms_search_space(
    config: AlgorithmConfig, arms: Mapping[str, Mapping[str, Any]], *, seeds: int | Sequence[int], key: str
) -> AlgorithmConfig:
    """A copy of `config` that Tune expands into every arm x `seeds` seeds (0 .. seeds-1, or those listed).

    The arm is one grid axis (the config attribute `key` holds its name); each of its settings
    follows it through `tune.sample_from`, so the grid has len(arms) x seeds trials, not a cross
    product of settings. Every arm must set the same keys. The seed also picks the training
    problems' draw order. (Tune passes a `sample_from` function the trial's config dict.)
    """
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seed_list or not all(isinstance(seed, int) and seed >= 0 for seed in seed_list):
        raise ValueError(f"seeds={seeds!r} must be a positive integer or a list of seeds (integers >= 0)")
    keys = {frozenset(settings) for settings in arms.values()}
    if len(keys) != 1:
        raise ValueError(f"every arm must set the same settings; the arms set {sorted(map(sorted, keys))}")
    arms = {name: dict(settings) for name, settings in arms.items()}
    config = config.copy(copy_frozen=False)
    setattr(config, key, tune.grid_search(list(arms)))
    for setting in next(iter(arms.values())):
        setattr(config, setting, tune.sample_from(lambda trial, s=setting: arms[trial[key]][s]))
    config.seed = tune.grid_search(seed_list)
    config.env_config = dict(config.env_config) | {"seed": tune.sample_from(lambda trial: trial["seed"])}
    return config


@dataclass
class TrialCurves:
    """One trial's curves, each a list of (training iteration, value)."""

    arm: str
    seed: int
    accuracy: list[tuple[int, float]]  # held-out avg@n; iteration 0 is before training
    samples: dict[int, float]  # iteration -> completions sampled so far
    series: dict[str, list[tuple[int, float]]]  # tag -> per-iteration training metric


#: The training metrics the report and the plot use, by their TensorBoard tags.
ENTROPY = tag(Metrics.LEARNER, Metrics.ENTROPY)
RESPONSE_LENGTH = tag(Metrics.ROLLOUT, Metrics.RESPONSE_LENGTH_MEAN)
TRUNCATION = tag(Metrics.ROLLOUT, Metrics.TRUNCATION_RATIO)
SAMPLES = tag(Metrics.PROGRESS, Metrics.ENV_STEPS_SAMPLED)
CLIP_FRACTIONS = tuple(
    tag(Metrics.LEARNER, m) for m in (Metrics.PG_CLIPFRAC_LOW, Metrics.PG_CLIPFRAC_HIGH, Metrics.PG_CLIPFRAC_DUAL)
)
MASKED = tag(Metrics.LEARNER, Metrics.ROLLOUT_IS_MASKED_FRACTION)
TRAIN_SERIES = (ENTROPY, RESPONSE_LENGTH, TRUNCATION, *CLIP_FRACTIONS, MASKED)


def read_trial(trial_dir: Path, accuracy_tag: str, key: str) -> TrialCurves:
    """A trial's curves from Tune's `params.json` (its arm under `key`) and `result.json` in `trial_dir`."""
    params = json.loads((trial_dir / "params.json").read_text())
    curves = TrialCurves(params[key], int(params["seed"]), [], {0: 0.0}, {name: [] for name in TRAIN_SERIES})
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
class ArmRow:
    """An arm's line of the report, over its seeds."""

    arm: str
    seeds: int
    final: tuple[float, float]  # held-out accuracy at the last validation: mean, std
    best: float  # mean over seeds of each seed's best validation
    iterations_to_target: float | None  # mean over the seeds that reached the target
    samples_to_target: float | None
    reached: int  # seeds that reached the target
    entropy: float  # each over the last `TAIL` iterations, then over seeds
    response_length: float
    truncated: float
    clipped: float  # tokens the policy loss clipped (low + high + dual)
    masked: float | None  # tokens a masking rollout correction dropped; None without one


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


def _clipped(curves: TrialCurves) -> float:
    return sum(_tail_mean(curves.series[name]) for name in CLIP_FRACTIONS if curves.series[name])


def summarize(trials: list[TrialCurves], arms: Sequence[str], target: float) -> list[ArmRow]:
    """A row per arm (in the order of `arms`) over its trials."""
    rows = []
    for name in arms:
        mine = [t for t in trials if t.arm == name and t.accuracy]
        if not mine:
            continue
        reached = [r for r in (_to_target(t, target) for t in mine) if r is not None]
        rows.append(
            ArmRow(
                arm=name,
                seeds=len(mine),
                final=_mean_std([t.accuracy[-1][1] for t in mine]),
                best=sum(max(v for _, v in t.accuracy) for t in mine) / len(mine),
                iterations_to_target=sum(i for i, _ in reached) / len(reached) if reached else None,
                samples_to_target=sum(s for _, s in reached) / len(reached) if reached else None,
                reached=len(reached),
                entropy=_mean_std([_tail_mean(t.series[ENTROPY]) for t in mine])[0],
                response_length=_mean_std([_tail_mean(t.series[RESPONSE_LENGTH]) for t in mine])[0],
                truncated=_mean_std([_tail_mean(t.series[TRUNCATION]) for t in mine])[0],
                clipped=_mean_std([_clipped(t) for t in mine])[0],
                masked=_mean_std([_tail_mean(t.series[MASKED]) for t in mine])[0]
                if all(t.series[MASKED] for t in mine)
                else None,
            )
        )
    return rows


def markdown_table(
    rows: list[ArmRow],
    *,
    target: float,
    metric: str,
    before: float | None,
    arm_title: str,
    extra_column: tuple[str, Mapping[str, Any]] | None = None,
) -> str:
    """The report's table as Markdown, with a header that says what each number is;
    `extra_column` is (its title, a value per arm), e.g. the paper's figure per stage."""
    extra_title, extra = extra_column or ("", {})
    lines = [
        f"Held-out {metric}; before training: {'n/a' if before is None else f'{before:.3f}'}. Target fixed before the run: {target:.2f}. "
        f"Final: last validation, mean ± std over seeds. Best: each seed's best validation, mean over seeds. "
        f"To target: first validation at or above the target (mean over the seeds that reached it). "
        f"Entropy, response length (tokens), truncated fraction, clipped fraction (the policy loss's clip, "
        f"low + high + dual) and masked fraction (a masking rollout correction; – without one): "
        f"training, last {TAIL} iterations.",
        "",
        f"| {arm_title} | seeds | final | best | iterations to target | samples to target | entropy | response length | truncated | clipped | masked |"
        + (f" {extra_title} |" if extra_column else ""),
        "|---" * (11 + bool(extra_column)) + "|",
    ]
    for r in rows:
        to_target = (
            (f"{r.iterations_to_target:.1f} ({r.reached}/{r.seeds})", f"{r.samples_to_target:,.0f}")
            if r.reached
            else (f"not reached (0/{r.seeds})", "–")
        )
        masked = "–" if r.masked is None else f"{r.masked:.3f}"
        lines.append(
            f"| {r.arm} | {r.seeds} | {r.final[0]:.3f} ± {r.final[1]:.3f} | {r.best:.3f} | {to_target[0]} | {to_target[1]} | "
            f"{r.entropy:.3f} | {r.response_length:.1f} | {r.truncated:.3f} | {r.clipped:.4f} | {masked} |"
            + (f" {extra[r.arm]} |" if extra_column else "")
        )
    return "\n".join(lines) + "\n"


def _band(trials: list[TrialCurves], points) -> tuple[list[float], list[float], list[float], list[float]]:
    """x, mean, low, high of `points(trial)` over trials, at the x values every trial has."""
    series = [dict(points(t)) for t in trials]
    xs = sorted(set.intersection(*(set(s) for s in series))) if series else []
    values = [[s[x] for s in series] for x in xs]
    return xs, [sum(v) / len(v) for v in values], [min(v) for v in values], [max(v) for v in values]


def plot(trials: list[TrialCurves], out: Path, *, arms: Sequence[str], metric: str, target: float, title: str) -> Path:
    """Accuracy vs iterations and vs samples, entropy, response length, truncation and samples
    drawn: a mean line per arm, the seeds' range shaded."""
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
    for ax, panel_title, xlabel, points in panels:
        for name in arms:
            mine = [t for t in trials if t.arm == name]
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
        if panel_title.startswith("held-out"):
            ax.axhline(target, color="grey", linestyle=":", linewidth=1)
        ax.set_title(panel_title)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{title} (mean over seeds; shaded: min to max)")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def write_report(
    trial_dirs: Sequence[str | Path],
    run_dir: str | Path,
    *,
    metric: str,
    target: float,
    key: str,
    arms: Sequence[str],
    name: str,
    title: str,
    arm_title: str,
    extra_column: tuple[str, Mapping[str, Any]] | None = None,
) -> tuple[Path, Path, list[str]]:
    """`<name>.md` and `<name>.png` in `run_dir`, from the trials in `trial_dirs` (each names its
    arm under `key`), rows in the order of `arms`; and the names of the trials left out.

    `metric` is the validation tag read, e.g. "evaluation/scratchpad_sums/avg@4"; a trial
    without it (one that failed before its first validation) is left out, named in the report
    and returned, never silently dropped.
    """
    run_dir = Path(run_dir)
    trials, missing = [], []
    for trial_dir in map(Path, trial_dirs):
        curves = read_trial(trial_dir, metric, key) if (trial_dir / "result.json").is_file() else None
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
    text = f"# {title}\n\n" + markdown_table(
        summarize(trials, arms, target),
        target=target,
        metric=short_metric,
        before=before,
        arm_title=arm_title,
        extra_column=extra_column,
    )
    if missing:
        text += f"\nTrials without validation results, left out: {', '.join(missing)}\n"
    md = run_dir / f"{name}.md"
    md.write_text(text)
    png = plot(trials, run_dir / f"{name}.png", arms=arms, metric=short_metric, target=target, title=title)
    return md, png, missing


def print_report(markdown: Path, png: Path, missing: list[str], what: str) -> None:
    """Show a written report (`write_report`'s return) on the console; exit non-zero if trials
    had no validation results, so that a smoke run fails when a trial did."""
    print(markdown.read_text())
    print(f"{what} table: {markdown}\n{what} plot:  {png}")
    if missing:
        raise SystemExit(f"{len(missing)} trial(s) have no validation results (failed?): {', '.join(missing)}")
