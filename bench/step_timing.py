"""Where a DAPO training step's time goes, on the tiny example (a benchmark: it prints numbers).

    python bench/step_timing.py [--steps 4] [--num-env-runners 1] [--smoke]

Runs a few training steps and prints, per step, the wall time split into generation, scoring,
the update (of which: old log-prob recomputation), and weight sync, and the env runner's
generation tokens/s next to a bare `vllm.LLM.generate` (one shared SamplingParams: no seeds, no
log-probs) on the same prompts and sampling settings. The bare call runs before each step on the
env runner's own engine, in its process: the same weights (a trained policy's response lengths
differ from the initial one's, and with them tokens/s), the same torch threads (Ray gives an
actor with num_cpus=1 OMP_NUM_THREADS=1; a vLLM engine in this driver would run torch on every
core) and the same moment of the machine's load. Both count tokens / seconds inside `generate`;
the summary sums steps 2.. (step 1 also pays one-time warm-ups, such as compiling vLLM's
log-prob kernel).
`--smoke` (CI) runs one step on a quarter of the batch and prints the same table.
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from pathlib import Path

import numpy as np
import ray

import dapo_rllib  # noqa: F401  (registers DAPO; vLLM's environment defaults)
from dapo_rllib.cli.train import load_config_file
from dapo_rllib.columns import Metrics, tag
from dapo_rllib.reporting.tensorboard import readable_scalars

# (column header, TensorBoard tag) of each timing column.
COLUMNS = [
    (header, tag(Metrics.TIMING, name))
    for header, name in (
        ("generate", Metrics.GENERATION_S),
        ("score", Metrics.SCORING_S),
        ("update", Metrics.UPDATE_S),
        ("old_logp", Metrics.OLD_LOG_PROBS_S),
        ("sync", Metrics.WEIGHT_SYNC_S),
    )
]

TINY_EXAMPLE = Path(__file__).resolve().parents[1] / "tuned_examples" / "dapo" / "tiny_arithmetic_dapo.py"


def tiny_example_config():
    """The main job's config, read from its tuned example."""
    return load_config_file(TINY_EXAMPLE).config


def bare_generate(env_runner, num_prompts: int) -> tuple[int, float, int]:
    """(tokens, seconds inside generate, torch threads) of a bare `generate` call on the env
    runner's engine, for the next `num_prompts` prompts of a copy of its environment (the same
    draw order: with one generation round per step, call k gets the prompts of step k)."""
    import torch
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from dapo_rllib.tasks.data.prompts import render_prompt_ids
    from dapo_rllib.tasks.env_factory import build_env

    cfg, llm = env_runner.config, env_runner.llm
    if not hasattr(env_runner, "bench_env"):
        env_runner.bench_env = build_env(cfg.env, cfg.env_config, env_runner.worker_index, env_runner.num_workers)
    tokenizer = llm.get_tokenizer()
    prompts = [
        TokensPrompt(prompt_token_ids=render_prompt_ids(tokenizer, p.messages)[-cfg.max_prompt_length :])
        for p in env_runner.bench_env.draw(num_prompts)
    ]
    params = SamplingParams(
        n=cfg.group_size, temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_response_length
    )
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    # The step's own generation starts from an empty prefix cache, as it would without this call.
    llm.reset_prefix_cache()
    return sum(len(c.token_ids) for o in outputs for c in o.outputs), elapsed, torch.get_num_threads()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--num-env-runners", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="one short step (CI: the benchmark still runs)")
    args = parser.parse_args()

    # A cluster of its own (address="local"), not one that another job on this machine started.
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    # Steps only: the evaluation before training would count in the first step.
    config = tiny_example_config().env_runners(num_env_runners=args.num_env_runners).evaluation(val_before_train=False)
    steps = args.steps
    if args.smoke:
        steps = 1
        prompts = max(config.train_batch_size_prompts // 4, config.minibatch_size_prompts)
        config.training(train_batch_size_prompts=prompts, gen_batch_size_prompts=prompts, dynamic_sampling=False)
    algo = config.build_algo()
    remote = args.num_env_runners > 0
    bare = partial(bare_generate, num_prompts=config.gen_batch_size_prompts)
    runner_tps, runner_s, bare_tps, bare_s = [], [], [], []
    print(
        f"{'step':>4} {'total':>7} "
        + " ".join(f"{h:>9}" for h, _ in COLUMNS)
        + f" {'rounds':>6} {'gen tok/s':>10} {'bare tok/s':>10} {'ratio':>5}"
    )
    for step in range(1, steps + 1):
        # Before the step, with the weights its generation will use; on the first env runner
        # (the comparison is per engine).
        tokens, seconds, threads = algo.env_runner_group.foreach_env_runner(bare, local_env_runner=not remote)[0]
        bare_tps.append(tokens / seconds)
        bare_s.append(seconds)
        start = time.perf_counter()
        scalars = readable_scalars(algo.train())
        elapsed = time.perf_counter() - start
        runner_tps.append(scalars[tag(Metrics.TIMING, Metrics.GENERATION_TOKENS_PER_S)])
        runner_s.append(scalars[tag(Metrics.TIMING, Metrics.GENERATION_S)])
        print(
            f"{step:>4} {elapsed:>6.2f}s "
            # old_log_probs_s is absent when a batch gets one optimizer step (no recompute).
            + " ".join(f"{scalars.get(t, 0.0):>8.3f}s" for _, t in COLUMNS)
            + f" {scalars[tag(Metrics.ROLLOUT, Metrics.GENERATION_ROUNDS)]:>6.0f} {runner_tps[-1]:>10.0f} {bare_tps[-1]:>10.0f} {runner_tps[-1] / bare_tps[-1]:>5.2f}"
        )
    algo.stop()

    first = 1 if steps > 1 else 0  # steady state: without step 1's one-time costs

    def total(tps, seconds):  # tokens / seconds over the steps summarized
        return float(np.dot(tps[first:], seconds[first:]) / np.sum(seconds[first:]))

    runner_total, bare_total = total(runner_tps, runner_s), total(bare_tps, bare_s)
    print(
        f"generation tokens/s over steps {first + 1}-{steps}: same engine, weights, prompts, sampling settings and torch threads ({threads})"
    )
    print(f"  env runner        {runner_total:7.0f}")
    print(f"  bare vLLM engine  {bare_total:7.0f}")
    print(
        f"  ratio env runner / bare: {runner_total / bare_total:.2f} (median of the steps' ratios {np.median(np.divide(runner_tps, bare_tps)[first:]):.2f})"
    )


if __name__ == "__main__":
    main()
