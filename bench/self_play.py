"""A self-play step against a league, and what a league of adapter snapshots costs (a benchmark).

    python bench/self_play.py [--steps 6] [--smoke] [--memory-only]

Part 1, the step: training steps of the league example (tuned_examples/dapo/tiny_take_away_league.py: the tiny
take-away model's rank-8 adapters against a league of 4 of their snapshots, PFSP), with a snapshot every step
so that every step pays for one, and no validation. Each step's wall time is split into generation (both seats'
moves: the trained adapter's and the snapshots', in the same batches), the games' steps, the update, the weight
sync and the league's bookkeeping (`timing/league_s`: the snapshot taken from an engine and sent to every
engine, and the odds of the next draws). The first step is not counted (it warms the engine up).

Part 2, the memory: one vLLM engine of SmolLM2-135M-Instruct (the packaged model, float32) serving the trained
policy's rank-8 adapter on every projection and N snapshots beside it (N = 0, 1, 2, 4, 8; the engine built for
1 + N adapters, as a league of N builds it), each N in a process of its own. Reported: the process's resident
memory after the engine started and after the N + 1 adapters are served, the bytes of one snapshot's tensors
(what the driver and each checkpoint hold per snapshot), and the time of one batched generation of 32 prompts
whose adapters are spread over all N + 1 against one where every prompt samples the trained adapter.

`--memory-only` runs part 2 alone (part 1 trains the tiny take-away model, shipped with the package). A full
run writes bench/results/self_play.json and self_play.md; `--smoke` (CI) runs one step on the test
suite's tiny model and part 2 with N = 2 on it, and writes nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray
from env_server import machine

import dapo_rllib  # noqa: F401  (registers DAPO and the environments; vLLM's environment defaults)
from dapo_rllib.columns import Metrics, tag
from dapo_rllib.reporting.tensorboard import readable_scalars

RESULTS = Path(__file__).resolve().parent / "results"
LEAGUE_SIZES = (0, 1, 2, 4, 8)
SMOKE_LEAGUE_SIZES = (2,)
PROMPTS, SMOKE_PROMPTS = 32, 8
RANK = 8
# (column header, TensorBoard tag) of each timing column of part 1.
COLUMNS = [
    (header, tag(Metrics.TIMING, name))
    for header, name in (
        ("generate", Metrics.GENERATION_S),
        ("game steps", Metrics.SCORING_S),
        ("update", Metrics.UPDATE_S),
        ("sync", Metrics.WEIGHT_SYNC_S),
        ("league", Metrics.LEAGUE_S),
    )
]


def league_config(smoke: bool):
    from dapo_rllib.experiments.self_play import take_away_league_config
    from dapo_rllib.models.tiny import ensure_tiny_model

    # Smoke: the test suite's model, lighter than the take-away one, a step of 4 positions.
    config = take_away_league_config(str(ensure_tiny_model()) if smoke else None)
    config.training(league_snapshot_every=1).evaluation(evaluation_interval=0, val_before_train=False)
    if smoke:
        config.training(train_batch_size_prompts=4, minibatch_size_prompts=4)
    return config


def step_times(steps: int, smoke: bool) -> list[dict[str, float]]:
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    algo = league_config(smoke).build_algo()
    rows = []
    try:
        for step in range(steps + (0 if smoke else 1)):
            start = time.perf_counter()
            scalars = readable_scalars(algo.train())
            row = {"total": time.perf_counter() - start} | {header: scalars.get(t, 0.0) for header, t in COLUMNS}
            row["league size"] = scalars[tag(Metrics.ROLLOUT, f"{Metrics.LEAGUE}/{Metrics.LEAGUE_SIZE}")]
            if smoke or step > 0:  # the first step warms the engine up
                rows.append(row)
            print("  " + "  ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    finally:
        algo.stop()
        ray.shutdown()
    return rows


def rss_bytes() -> int:
    """This process's resident memory now (VmRSS)."""
    status = Path("/proc/self/status").read_text().splitlines()
    return int(next(line for line in status if line.startswith("VmRSS:")).split()[1]) * 1024


def league_memory(league_size: int, smoke: bool) -> dict[str, Any]:
    """Part 2 for one league size, in this process: the engine, the adapters, the generations."""
    import torch
    from transformers import AutoModelForCausalLM

    from dapo_rllib.algorithm.dapo import DAPOConfig
    from dapo_rllib.models.adapter_shelf import AdapterShelf
    from dapo_rllib.models.lora import LoraSettings, adapter_config, adapter_tensors, apply_lora
    from dapo_rllib.models.resolve import ensure_policy_model
    from dapo_rllib.models.tiny import ensure_tiny_model
    from dapo_rllib.rollout.vllm_engine import EngineSettings, build_vllm_engine

    model = str(ensure_tiny_model()) if smoke else "smollm2-135m-instruct"
    config = DAPOConfig().training(
        model_path=model,
        lora_rank=RANK,
        lora_sync="adapter",
        league_size=league_size,
        max_prompt_length=64,
        max_response_length=16,
    )
    ensure_policy_model(config.model_settings)
    # The adapters first (random B matrices: each a policy of its own), so that the model they are cut from is
    # gone before the engine's memory is measured.
    peft = apply_lora(AutoModelForCausalLM.from_pretrained(config.policy_model_path), LoraSettings(rank=RANK))
    names = ["policy", *(f"league_{k}" for k in range(league_size))]
    generator, lora_json = torch.Generator().manual_seed(0), adapter_config(peft)
    adapters = {
        name: {
            key: torch.randn(value.shape, generator=generator) * 0.01 if "lora_B" in key else value.detach().clone()
            for key, value in adapter_tensors(peft).items()
        }
        for name in names
    }
    del peft
    gc.collect()
    before = rss_bytes()
    llm = build_vllm_engine(EngineSettings.from_config(config), seed=0)
    started = rss_bytes()
    shelf = AdapterShelf(llm, "bench")
    for name, tensors in adapters.items():
        shelf.put(name, tensors, lora_json)
    served = rss_bytes()
    snapshot_bytes = sum(t.numel() * 4 for t in adapters["policy"].values())
    from vllm import SamplingParams

    prompts = [{"prompt_token_ids": [1 + k % 50] * 8} for k in range(SMOKE_PROMPTS if smoke else PROMPTS)]
    params = SamplingParams(max_tokens=16, temperature=1.0, seed=0, ignore_eos=True)
    seconds = {}
    for kind, requests in (
        ("one adapter", [shelf.request("policy")] * len(prompts)),
        ("spread", [shelf.request(names[k % len(names)]) for k in range(len(prompts))]),
    ):
        llm.generate(prompts, params, use_tqdm=False, lora_request=requests)  # loads the adapters, warms up
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False, lora_request=requests)
        seconds[kind] = time.perf_counter() - start
    shelf.close()
    return {
        "league_size": league_size,
        "rss_engine_gb": (started - before) / 2**30,
        "rss_adapters_mb": (served - started) / 2**20,
        "snapshot_mb": snapshot_bytes / 2**20,
        "generate_one_adapter_s": seconds["one adapter"],
        "generate_spread_s": seconds["spread"],
    }


def memory_rows(smoke: bool) -> list[dict[str, Any]]:
    """Part 2 for every league size, each in a process of its own (an engine's memory is not given back)."""
    rows = []
    for size in SMOKE_LEAGUE_SIZES if smoke else LEAGUE_SIZES:
        command = [sys.executable, __file__, "--league-memory", str(size)] + (["--smoke"] if smoke else [])
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print("  " + "  ".join(f"{k} {v:.3f}" for k, v in rows[-1].items()), flush=True)
    return rows


def markdown(steps: list[dict[str, float]], memory: list[dict[str, Any]], setup: dict[str, Any]) -> str:
    lines = [f"Setup: {json.dumps(setup)}", ""]
    if steps:
        mean = {key: float(np.mean([row[key] for row in steps])) for key in steps[0]}
        lines += [
            "A league step (mean of the steps after the first; seconds):",
            "",
            "| " + " | ".join(mean) + " |",
            "|" + "---|" * len(mean),
            "| " + " | ".join(f"{v:.2f}" for v in mean.values()) + " |",
            "",
        ]
    lines += [
        f"A league of N snapshots in one engine (rank {RANK}, float32 adapters):",
        "",
        "| N | engine RSS (GB) | N + 1 adapters served (MB RSS) | one snapshot's tensors (MB) "
        "| generate, one adapter (s) | generate, N + 1 adapters (s) |",
        "|---|---|---|---|---|---|",
    ]
    for row in memory:
        lines.append(
            f"| {row['league_size']} | {row['rss_engine_gb']:.2f} | {row['rss_adapters_mb']:.1f} | "
            f"{row['snapshot_mb']:.2f} | {row['generate_one_adapter_s']:.2f} | {row['generate_spread_s']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="league steps measured (after a warm-up step)")
    parser.add_argument("--smoke", action="store_true", help="each part briefly, nothing written (CI)")
    parser.add_argument("--memory-only", action="store_true", help="part 2 alone: a league's snapshots in one engine")
    parser.add_argument("--league-memory", type=int, help=argparse.SUPPRESS)  # part 2's child process
    args = parser.parse_args()
    if args.league_memory is not None:
        print(json.dumps(league_memory(args.league_memory, args.smoke)))
        return
    setup = {"machine": machine(), "steps": 0 if args.memory_only else 1 if args.smoke else args.steps}
    setup["smoke"] = args.smoke
    steps = []
    if not args.memory_only:
        print("part 1: league steps", flush=True)
        steps = step_times(setup["steps"], args.smoke)
    print("part 2: a league's snapshots in one engine", flush=True)
    memory = memory_rows(args.smoke)
    report = markdown(steps, memory, setup)
    print(report)
    if not args.smoke:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "self_play.json").write_text(
            json.dumps({"setup": setup, "steps": steps, "memory": memory}, indent=1)
        )
        (RESULTS / "self_play.md").write_text(report)
        print(f"wrote {RESULTS / 'self_play.json'} and self_play.md")


if __name__ == "__main__":
    main()
