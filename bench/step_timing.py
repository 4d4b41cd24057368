"""Where a DAPO training step's time goes, on the tiny example (a benchmark: it prints numbers).

    python bench/step_timing.py [--steps 4] [--num-env-runners 1] [--smoke]

Runs a few training steps and prints, per step, the wall time split into generation, scoring,
the update (of which: old log-prob recomputation), and weight sync; then the env runner's
generation tokens/s next to a bare `vllm.LLM.generate` on the same prompts and sampling settings.
`--smoke` (CI) runs one step on a quarter of the batch and prints the same table.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import ray

import dapo_rllib  # noqa: F401  (registers DAPO; vLLM's environment defaults)
from dapo_rllib.columns import Metrics, tag
from dapo_rllib.env_runner import build_vllm_engine
from dapo_rllib.tensorboard import readable_scalars
from dapo_rllib.train import load_config_file
from envs.math_env import MathEnv

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
    return load_config_file(TINY_EXAMPLE)[0]


def bare_vllm_tokens_per_s(config, num_prompts: int) -> float:
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    env = MathEnv({"dataset": "arithmetic"})
    tokenizer = AutoTokenizer.from_pretrained(config.model_path)
    prompts = [
        TokensPrompt(prompt_token_ids=tokenizer.apply_chat_template(list(env.reset()[0]), add_generation_prompt=True, tokenize=True, return_dict=False))
        for _ in range(num_prompts)
    ]
    llm = build_vllm_engine(config, seed=0)
    params = SamplingParams(n=config.group_size, temperature=config.temperature, top_p=config.top_p, max_tokens=config.max_response_length)
    llm.generate(prompts[:2], params, use_tqdm=False)  # warm-up
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    return sum(len(c.token_ids) for o in outputs for c in o.outputs) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--num-env-runners", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="one short step (CI: the benchmark still runs)")
    args = parser.parse_args()

    ray.init(num_cpus=2, include_dashboard=False)
    # Steps only: the evaluation before training would count in the first step.
    config = tiny_example_config().env_runners(num_env_runners=args.num_env_runners).evaluation(val_before_train=False)
    steps = args.steps
    if args.smoke:
        steps = 1
        prompts = max(config.train_batch_size_prompts // 4, config.minibatch_size_prompts)
        config.training(train_batch_size_prompts=prompts, gen_batch_size_prompts=prompts, dynamic_sampling=False)
    algo = config.build_algo()
    tokens_per_s = []
    print(f"{'step':>4} {'total':>7} " + " ".join(f"{h:>9}" for h, _ in COLUMNS) + f" {'rounds':>6} {'gen tok/s':>10}")
    for step in range(1, steps + 1):
        start = time.perf_counter()
        scalars = readable_scalars(algo.train())
        tokens_per_s.append(scalars[tag(Metrics.TIMING, Metrics.GENERATION_TOKENS_PER_S)])
        print(
            f"{step:>4} {time.perf_counter() - start:>6.2f}s "
            # old_log_probs_s is absent when a batch gets one optimizer step (no recompute).
            + " ".join(f"{scalars.get(t, 0.0):>8.3f}s" for _, t in COLUMNS)
            + f" {scalars[tag(Metrics.ROLLOUT, Metrics.GENERATION_ROUNDS)]:>6.0f} {tokens_per_s[-1]:>10.0f}"
        )
    algo.stop()
    bare_tps = bare_vllm_tokens_per_s(algo.config, config.gen_batch_size_prompts)
    print(f"generation tokens/s: env runner {np.mean(tokens_per_s):.0f}  vs bare vLLM generate {bare_tps:.0f} (same prompts count and sampling)")


if __name__ == "__main__":
    main()
