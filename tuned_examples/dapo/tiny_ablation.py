"""The DAPO paper's ablation, small: six cumulative stages x seeds on the scratchpad-sums task.

Naive GRPO, then + overlong filtering, + clip-higher, + soft overlong punishment, + token-level
loss, + dynamic sampling (dapo_rllib.ablation.STAGES), each from the same tiny model with
`--seeds` seeds (default 3), as one Ray Tune grid. Every trial takes one CPU (the env runner's
vLLM engine and the learner share the trial's process), so a 2-core machine runs two at once.
When the grid has run, `ablation.md` (a row per stage) and `ablation.png` (curves per stage,
seed spread shaded) are written into the run directory.

    python tuned_examples/dapo/tiny_ablation.py                    # the default run
    python tuned_examples/dapo/tiny_ablation.py --seeds 1 --stop '{"training_iteration": 2}'   # smoke
    rllib train file tuned_examples/dapo/tiny_ablation.py          # the same grid, 3 seeds

Why this task (chosen for what each technique acts on, before any result was seen; the README's
"Ablation" section says more): "What is 47 + 5 + 8 + 3?" with one to six addends, worked out one
line per addend. Difficulty and needed length both grow with the number of addends, so groups
are all right (one addend), all wrong (six) or mixed, and long answers meet the response limit.
The warm start imitates three ways of answering: the scratchpad "47+5=52", the same spaced out
("47 + 5 = 52", which no longer fits the response limit for long sums), and the bare answer.
"""

import argparse

import dapo_rllib  # noqa: F401  (registers "DAPO" and "dapo_math")
from dapo_rllib.ablation import ablation_search_space, write_report
from dapo_rllib.dapo import DAPOConfig
from dapo_rllib.data.scratchpad_sums import SUMS_DATA_SOURCE, ensure_sum_datasets
from dapo_rllib.tiny_model import default_tiny_model_path, ensure_tiny_model
from dapo_rllib.train import TrainOptions, add_train_options, train

SEEDS = 3
EVAL_SAMPLES = 4
MAX_RESPONSE_LENGTH = 64
SOFT_OVERLONG_BUFFER = 16  # L_cache: the last quarter of the response limit
# Fixed before the ablation ran, from the warm-started model's held-out avg@4 of 0.34 alone:
# a stage "reaches the target" when it gets to 0.55.
TARGET = 0.55
METRIC = f"evaluation/{SUMS_DATA_SOURCE}/avg@{EVAL_SAMPLES}"

model = ensure_tiny_model(task="sums")
train_file, test_file = ensure_sum_datasets(
    default_tiny_model_path("sums").with_name("scratchpad-sums-data"), train_problems=2400, test_problems=120
)

base = (
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
        # 4 rounds, then it trains on what it has); the other stages take one round of 16.
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

config = ablation_search_space(base, seeds=SEEDS, soft_overlong_buffer=SOFT_OVERLONG_BUFFER)
stop = {"training_iteration": 40}


def after_run(outcomes, run_dir) -> None:
    """ablation.md and ablation.png from the trials of this run."""
    markdown, png, missing = write_report([o.logdir for o in outcomes], run_dir, metric=METRIC, target=TARGET)
    print(markdown.read_text())
    print(f"ablation table: {markdown}\nablation plot:  {png}")
    if missing:
        raise SystemExit(f"{len(missing)} trial(s) have no validation results (failed?): {', '.join(missing)}")


if __name__ == "__main__":
    parser = add_train_options(
        argparse.ArgumentParser(
            description="The DAPO ablation on the scratchpad-sums task (options as for `rllib train file`)."
        )
    )
    parser.add_argument("--seeds", type=int, default=SEEDS, help=f"seeds per stage (default {SEEDS})")
    args = parser.parse_args()
    if args.no_tune:
        parser.error("the ablation is a Tune grid (stages x seeds): drop --no-tune")
    train(
        ablation_search_space(base, seeds=args.seeds, soft_overlong_buffer=SOFT_OVERLONG_BUFFER),
        TrainOptions.from_args(args, stop),
        after_run,
    )
