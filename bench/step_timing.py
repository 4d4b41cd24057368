"""Where a DAPO training step's time goes, on the tiny example (a benchmark: it prints numbers).

    python bench/step_timing.py [--steps 4] [--num-env-runners 1]

Runs a few training steps and prints, per step, the wall time split into generation, scoring,
old log-prob recomputation, the update, and weight sync; then the env runner's generation
tokens/s next to a bare `vllm.LLM.generate` on the same prompts and sampling settings.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import numpy as np
import ray

import dapo_rllib  # noqa: F401
from dapo_rllib.env_runner import build_vllm_engine
from dapo_rllib.train import load_config_file
from envs.math_env import MathEnv

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
    args = parser.parse_args()

    ray.init(num_cpus=2, include_dashboard=False)
    # Steps only: the evaluation before training would count in the first step.
    config = tiny_example_config().env_runners(num_env_runners=args.num_env_runners).training(val_before_train=False)
    algo = config.build_algo()
    rows = []
    print(f"{'step':>4} {'total':>7} {'generate':>9} {'score':>7} {'old_logp':>9} {'update':>7} {'sync':>7} {'rounds':>6} {'gen tok/s':>10}")
    for step in range(1, args.steps + 1):
        start = time.perf_counter()
        result = algo.train()
        t = result["timing"]
        rows.append(t)
        print(
            f"{step:>4} {time.perf_counter() - start:>6.2f}s {t['generation_s']:>8.2f}s {t['scoring_s']:>6.3f}s "
            f"{t['old_log_probs_s']:>8.2f}s {t['update_s']:>6.2f}s {t['weight_sync_s']:>6.3f}s "
            f"{result['rollout']['generation_rounds']:>6.0f} {t['generation_tokens_per_s']:>10.0f}"
        )
    algo.stop()
    runner_tps = float(np.mean([r["generation_tokens_per_s"] for r in rows]))
    bare_tps = bare_vllm_tokens_per_s(algo.config, config.gen_batch_size_prompts)
    print(f"generation tokens/s: env runner {runner_tps:.0f}  vs bare vLLM generate {bare_tps:.0f} (same prompts count and sampling)")


if __name__ == "__main__":
    main()
