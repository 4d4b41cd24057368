"""One PNG with the curves a DAPO user watches (docs/design/algorithm.md §6), read from TensorBoard event files.

`plot_run(run_dir)` finds every directory under `run_dir` whose event files hold DAPO's tags
(one per run, or one per trial of a Tune experiment) and draws each as a line in every panel.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

from ray.rllib.utils.metrics import EVALUATION_RESULTS

from dapo_rllib.columns import Metrics, tag

# Panel title -> the tags drawn in it (see dapo_rllib.reporting.tensorboard); shell-style patterns allowed.
PANELS: dict[str, tuple[str, ...]] = {
    "reward and accuracy": (tag(Metrics.ROLLOUT, Metrics.REWARD_MEAN), tag(Metrics.ROLLOUT, Metrics.ACC_MEAN)),
    "validation avg@n": (tag(EVALUATION_RESULTS, f"*/{Metrics.AVG_AT}*"),),
    "response length": (
        tag(Metrics.ROLLOUT, Metrics.RESPONSE_LENGTH_MEAN),
        tag(Metrics.ROLLOUT, Metrics.RESPONSE_LENGTH_MAX),
    ),
    "entropy": (tag(Metrics.LEARNER, Metrics.ENTROPY),),
    "clip fractions": tuple(
        tag(Metrics.LEARNER, m) for m in (Metrics.PG_CLIPFRAC_LOW, Metrics.PG_CLIPFRAC_HIGH, Metrics.PG_CLIPFRAC_DUAL)
    ),
    "generation rounds per step": (tag(Metrics.ROLLOUT, Metrics.GENERATION_ROUNDS),),
    "turns and tool calls per episode": (
        tag(Metrics.ROLLOUT, Metrics.TURNS_MEAN),
        tag(Metrics.ROLLOUT, Metrics.TOOL_CALLS),
        tag(Metrics.ROLLOUT, f"{Metrics.TOOL_ERRORS}/*"),
    ),
    "episodes ended by": (tag(Metrics.ROLLOUT, f"{Metrics.ENDED_BY}/*"),),
    "validation tool use": (tag(EVALUATION_RESULTS, f"*/{Metrics.TOOL_USE}"),),
    "games: validation Elo": (tag(EVALUATION_RESULTS, f"*/{Metrics.ELO}"),),
    "games: refused moves per episode": (tag(Metrics.ROLLOUT, Metrics.INVALID_MOVES),),
    "league: win rate in training, odds of each snapshot": (
        tag(Metrics.ROLLOUT, f"{Metrics.LEAGUE}/{Metrics.LEAGUE_WIN_RATE}"),
        tag(Metrics.ROLLOUT, f"{Metrics.LEAGUE}/{Metrics.LEAGUE_ODDS}/*"),
    ),
}
COLUMNS = 3  # panels per row
PLOT_FILE = "dapo_curves.png"


def read_scalars(logdir: Path) -> dict[str, tuple[list[int], list[float]]]:
    """tag -> (steps, values) from the event files directly in `logdir`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    series = {}
    for name in events.Tags()["scalars"]:
        points = events.Scalars(name)
        series[name] = ([p.step for p in points], [p.value for p in points])
    return series


def find_runs(run_dir: Path) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """Runs under `run_dir` (name relative to it) with at least one DAPO tag."""
    patterns = [tag for tags in PANELS.values() for tag in tags]
    runs = {}
    for logdir in sorted({p.parent for p in run_dir.rglob("events.out.tfevents.*")}):
        series = read_scalars(logdir)
        if any(_matching(series, pattern) for pattern in patterns):
            runs[str(logdir.relative_to(run_dir)) or run_dir.name] = series
    return runs


def _matching(series: dict, pattern: str) -> list[str]:
    return sorted(fnmatch.filter(series, pattern))


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the panels for every run under `run_dir` to `out` (default `run_dir/dapo_curves.png`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {str(run_dir)!r} does not exist")
    runs = find_runs(run_dir)
    if not runs:
        raise ValueError(
            f"no TensorBoard event files with DAPO metrics under {str(run_dir)!r}; expected a run or Tune experiment directory of a DAPO run"
        )

    rows = -(-len(PANELS) // COLUMNS)
    fig, axes = plt.subplots(rows, COLUMNS, figsize=(5 * COLUMNS, 4 * rows))
    for ax in axes.flat[len(PANELS) :]:
        ax.axis("off")
    for ax, (title, tags) in zip(axes.flat, PANELS.items()):
        for run_name, series in runs.items():
            for name in (t for pattern in tags for t in _matching(series, pattern)):
                label = name.split("/", 1)[1] if len(runs) == 1 else f"{run_name}: {name.split('/', 1)[1]}"
                ax.plot(*series[name], marker="." if len(series[name][0]) < 30 else None, label=label)
        ax.set_title(title)
        ax.set_xlabel("training iteration")
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(f"DAPO: {run_dir.name}")
    fig.tight_layout()
    out = Path(out) if out is not None else run_dir / PLOT_FILE
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
