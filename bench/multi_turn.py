"""Where a multi-turn training step's time goes, and what vLLM's prefix cache saves between turns (a benchmark).

    python bench/multi_turn.py [--steps 4] [--smoke]

Part 1 runs training steps of the tool-integrated arithmetic example
(tuned_examples/dapo/tiny_tool_arithmetic_dapo.py: the python tool in the sandbox, up to 3 turns) and
prints each step's wall time split into generation, tool execution, scoring, the update and the weight
sync, with the turns and tool calls per episode. The turn loop runs a turn's tool calls after that turn's
generation of every running episode, so no tool time is hidden behind generation: the table's `tool`
column is all on the step's critical path.

Part 2 samples the same round of episodes (one batch of the example, fixed seeds; after a round that
warms the engine up) on an engine with prefix caching and on one without, and reads vLLM's own counters: the prompt tokens the engine was given
over all turns, and how many of them it found in its prefix cache instead of computing them again. Turn
2 onwards re-reads the whole context (prompt, earlier turns, tool output); with the cache only the tokens
new since the last turn are computed.

`--smoke` (CI) runs one step on a quarter of the batch and a quarter of the round.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import ray

import dapo_rllib  # noqa: F401  (registers DAPO and the environments; vLLM's environment defaults)
from dapo_rllib.cli.train import load_config_file
from dapo_rllib.columns import Metrics, tag
from dapo_rllib.reporting.tensorboard import readable_scalars

EXAMPLE = Path(__file__).resolve().parents[1] / "tuned_examples" / "dapo" / "tiny_tool_arithmetic_dapo.py"

# (column header, TensorBoard tag) of each timing column.
COLUMNS = [
    (header, tag(Metrics.TIMING, name))
    for header, name in (
        ("generate", Metrics.GENERATION_S),
        ("tool", Metrics.TOOL_S),
        ("score", Metrics.SCORING_S),
        ("update", Metrics.UPDATE_S),
        ("sync", Metrics.WEIGHT_SYNC_S),
    )
]


def example_config(smoke: bool):
    config = load_config_file(EXAMPLE).config.evaluation(val_before_train=False)
    if smoke:
        prompts = max(config.train_batch_size_prompts // 4, config.minibatch_size_prompts)
        config.training(train_batch_size_prompts=prompts, gen_batch_size_prompts=prompts, dynamic_sampling=False)
    return config


def step_times(steps: int, smoke: bool) -> None:
    algo = example_config(smoke).env_runners(num_env_runners=1).build_algo()
    print(
        f"{'step':>4} {'total':>7} "
        + " ".join(f"{h:>9}" for h, _ in COLUMNS)
        + f" {'turns':>5} {'calls':>5} {'env tok':>7} {'model tok':>9}"
    )
    for step in range(1, steps + 1):
        start = time.perf_counter()
        scalars = readable_scalars(algo.train())
        elapsed = time.perf_counter() - start
        rollout = {name: scalars[tag(Metrics.ROLLOUT, name)] for name in (Metrics.TURNS_MEAN, Metrics.TOOL_CALLS)}
        tokens = {
            name: scalars[tag(Metrics.ROLLOUT, name)] for name in (Metrics.ENV_TOKENS_MEAN, Metrics.MODEL_TOKENS_MEAN)
        }
        print(
            f"{step:>4} {elapsed:>6.2f}s "
            + " ".join(f"{scalars.get(t, 0.0):>8.3f}s" for _, t in COLUMNS)
            + f" {rollout[Metrics.TURNS_MEAN]:>5.2f} {rollout[Metrics.TOOL_CALLS]:>5.2f}"
            + f" {tokens[Metrics.ENV_TOKENS_MEAN]:>7.1f} {tokens[Metrics.MODEL_TOKENS_MEAN]:>9.1f}"
        )
    algo.stop()
    print("tool time hidden behind generation: 0 s (a turn's tool calls run after the turn's generation)")


def prefix_cache_round(caching: bool, smoke: bool) -> dict[str, float]:
    """Prompt tokens given to the engine and found in its prefix cache over one round, and the round's
    wall time, on a local env runner (num_env_runners=0) with prefix caching on or off."""
    config = example_config(smoke).env_runners(num_env_runners=0)
    config.training(vllm_engine_kwargs={"enable_prefix_caching": caching, "disable_log_stats": False})
    algo = config.build_algo()
    runner = algo.env_runner
    # A round first, to warm the engine up (its first calls compile kernels); then the measured round.
    runner.sample(requests=[(i, 20_000 + i) for i in range(config.gen_batch_size_prompts)])
    runner.llm.reset_prefix_cache()
    requests = [(i, 10_000 + i) for i in range(config.gen_batch_size_prompts)]
    before = counters(runner.llm)
    start = time.perf_counter()
    episodes = runner.sample(requests=requests)
    seconds = time.perf_counter() - start
    after = counters(runner.llm)
    algo.stop()
    turns = sum(len(ep) for ep in episodes)
    return {
        "prompt tokens": after["prompt"] - before["prompt"],
        "from cache": after["hits"] - before["hits"],
        "turns": turns,
        "episodes": len(episodes),
        "seconds": seconds,
    }


def counters(llm) -> dict[str, float]:
    """vLLM's counters of prompt tokens and of prefix-cache hits (in tokens), summed over engines."""
    values = {"prompt": 0.0, "hits": 0.0}
    for metric in llm.get_metrics():
        if metric.name == "vllm:prompt_tokens":
            values["prompt"] += metric.value
        elif metric.name == "vllm:prefix_cache_hits":
            values["hits"] += metric.value
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--smoke", action="store_true", help="one short step and a short round (CI)")
    args = parser.parse_args()
    # A cluster of its own (address="local"), not one that another job on this machine started.
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    step_times(1 if args.smoke else args.steps, args.smoke)

    rounds = {caching: prefix_cache_round(caching, args.smoke) for caching in (True, False)}
    print("one round of the example's episodes, the same seeds, prefix caching on and off:")
    print(
        f"{'prefix cache':>12} {'episodes':>8} {'turns':>6} {'prompt tok':>10} {'from cache':>10} {'computed':>9} {'round':>7}"
    )
    for caching, r in rounds.items():
        computed = r["prompt tokens"] - r["from cache"]
        print(
            f"{'on' if caching else 'off':>12} {r['episodes']:>8} {r['turns']:>6} {r['prompt tokens']:>10.0f}"
            f" {r['from cache']:>10.0f} {computed:>9.0f} {r['seconds']:>6.2f}s"
        )
    on, off = rounds[True], rounds[False]
    per_turn = np.array([on["prompt tokens"], on["prompt tokens"] - on["from cache"]]) / on["turns"]
    print(f"prompt tokens per model turn: {per_turn[0]:.0f} given, {per_turn[1]:.0f} computed with the cache")
    print(f"round time without the cache / with it: {off['seconds'] / on['seconds']:.2f}")


if __name__ == "__main__":
    main()
