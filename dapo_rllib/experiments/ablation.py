"""The DAPO paper's ablation (its Table 1) as a Ray Tune grid: cumulative stages x seeds.

The paper adds DAPO's techniques one at a time to naive GRPO and reports AIME 2024 avg@32
after each (Qwen2.5-32B): naive GRPO 30, + overlong filtering 36, + clip-higher 38, + soft
overlong punishment 41, + token-level loss 42, + dynamic sampling 50. Here every stage is a
set of DAPOConfig settings (`STAGES`), never a code path, and `ablation_search_space` turns a
base config into a Tune grid over stages and seeds. After the run, `write_report` reads every
trial's results and writes `ablation.md` (a row per stage, mean ± std over seeds) and
`ablation.png` (curves per stage, seed spread shaded) into the run directory; the grid and the
report are `dapo_rllib.experiments.comparison_grid`'s, as the algorithm comparison's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.experiments import comparison_grid
from dapo_rllib.models.tiny import default_cache_dir, ensure_tiny_model
from dapo_rllib.tasks.data.scratchpad_sums import SUMS_DATA_SOURCE, ensure_sum_datasets

# The task both grids run on (`sums_task_config`) and how they are scored.
SEEDS = 3
EVAL_SAMPLES = 4
MAX_RESPONSE_LENGTH = 64
SOFT_OVERLONG_BUFFER = 16  # L_cache: the last quarter of the response limit
# Fixed before the ablation ran, from the warm-started model's held-out avg@4 of 0.34 alone:
# an arm "reaches the target" when it gets to 0.55.
TARGET = 0.55
METRIC = f"evaluation/{SUMS_DATA_SOURCE}/avg@{EVAL_SAMPLES}"

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


def sums_task_config():
    """The scratchpad-sums task of the ablation and the algorithm comparison, as a DAPOConfig:
    the warm-started tiny model and 2,400 training / 120 held-out problems (both built on first
    use), one CPU per trial, validation before training and every 5 iterations. Why this task:
    tuned_examples/dapo/tiny_ablation.py."""

    model = ensure_tiny_model(task="sums")
    train_file, test_file = ensure_sum_datasets(
        default_cache_dir() / "scratchpad-sums-data", train_problems=2400, test_problems=120
    )
    return (
        DAPOConfig()
        .environment("dapo_math", env_config={"dataset": str(train_file)})
        # 120 held-out problems (20 of each length), 4 samples each, before training and every
        # 5 iterations.
        .evaluation(evaluation_interval=5, eval_dataset=str(test_file), eval_num_samples=EVAL_SAMPLES)
        # One CPU per trial: no env runner actor, the local one samples in the trial's process.
        .env_runners(num_env_runners=0)
        .resources(num_cpus_for_main_process=1)
        .training(
            model_path=str(model),
            group_size=8,
            train_batch_size_prompts=16,
            # Dynamic sampling draws rounds of 24 prompts until 16 groups are informative (at most
            # 4 rounds, then it trains on what it has); without it a step takes one round of 16.
            gen_batch_size_prompts=24,
            max_num_gen_batches=4,
            train_on_partial_batch=True,
            # 4 optimizer steps per training step: later mini-batches are off-policy enough for
            # the clip range to matter.
            minibatch_size_prompts=4,
            max_prompt_length=64,
            max_response_length=MAX_RESPONSE_LENGTH,
            lr=1e-4,
            lr_warmup_steps=3,
            weight_decay=0.0,
        )
    )


def ablation_search_space(config: AlgorithmConfig, *, seeds: int, soft_overlong_buffer: int) -> AlgorithmConfig:
    """A copy of `config` that Tune expands into every stage x `seeds` seeds (0 .. seeds-1)
    (`comparison_grid.arms_search_space`, the stage named by `ablation_stage`)."""
    return comparison_grid.arms_search_space(config, stages(soft_overlong_buffer), seeds=seeds, key=STAGE_KEY)


def write_report(
    trial_dirs: Sequence[str | Path], run_dir: str | Path, *, metric: str, target: float
) -> tuple[Path, Path, list[str]]:
    """`ablation.md` and `ablation.png` in `run_dir`, a row per stage with the paper's figure
    (`comparison_grid.write_report`); and the names of the trials left out."""
    return comparison_grid.write_report(
        trial_dirs,
        run_dir,
        metric=metric,
        target=target,
        key=STAGE_KEY,
        arms=[name for name, _ in STAGE_CHANGES],
        name="ablation",
        title="DAPO ablation",
        arm_title="stage",
        extra_column=("paper (AIME avg@32)", PAPER_AIME),
    )
