"""The build of a tiny model: tokenizer, a ~1M-parameter Qwen2, the warm start, the held-out accuracy and
the build record, in a child process whose kernels and threads are pinned (`build_environment`).

The build is as reproducible as torch allows: kernels pinned where the CPU allows (the AVX2 code paths of
torch, oneDNN and, on Intel CPUs, MKL on any x86-64 CPU with AVX2; `BUILD_THREADS` threads), torch's
deterministic algorithms on, and every random draw (data, initialization, held-out sampling) from `seed`;
README.md ("The tiny model") says what still differs.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from dapo_rllib.models.tiny.answers import answer_text
from dapo_rllib.models.tiny.held_out import accuracy_text, held_out_accuracy
from dapo_rllib.models.tiny.recipes import recipe_for
from dapo_rllib.models.tiny.record import save_model
from dapo_rllib.models.tiny.tokenizer import build_tokenizer
from dapo_rllib.models.tiny.warm_start import warm_start

#: Intra-op threads of a build: fixed, so that reductions are split the same way on any machine.
#: Two: as fast as an unpinned build on an idle 2-core machine (one thread takes 1.7 times as long).
BUILD_THREADS = 2


def build_environment() -> dict[str, str]:
    """Environment variables that pin a build's kernels, as far as this CPU allows.

    torch, MKL and oneDNN read them when they first run, so the build runs in a child process
    that starts with them: on an x86-64 CPU with AVX2 (and FMA), torch's own vectorized kernels
    (`ATEN_CPU_CAPABILITY`), MKL's code path (`MKL_CBWR`, its conditional numerical
    reproducibility) and oneDNN's (`ONEDNN_MAX_CPU_ISA`) are those of AVX2, whatever newer
    instructions (AVX-512, AMX) the CPU has. MKL honours its AVX2 branch on Intel CPUs only (on
    others it picks its kernels itself; its one branch for every CPU, COMPATIBLE, doubles the build
    time); elsewhere (ARM, older x86) all kernels are the CPU's own. Always: `BUILD_THREADS`
    OpenMP/MKL threads, which sleep rather than spin while they wait (on a busy machine spinning
    threads made the build up to 3 times slower), no tokenizer threads.
    """
    env = {
        "OMP_NUM_THREADS": str(BUILD_THREADS),
        "MKL_NUM_THREADS": str(BUILD_THREADS),
        "OMP_WAIT_POLICY": "PASSIVE",
        "TOKENIZERS_PARALLELISM": "false",
    }
    if {"avx2", "fma"} <= _cpu_flags():
        env |= {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    return env


def _cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux; empty elsewhere)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    match = re.search(r"^(?:flags|Features)\s*:(.*)$", cpuinfo, re.MULTILINE)
    return set(match.group(1).split()) if match else set()


def _cpu_name() -> str:
    try:
        match = re.search(r"^model name\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    except OSError:
        match = None
    return match.group(1).strip() if match else platform.processor() or platform.machine()


def build_tiny_model(
    output_dir: str | os.PathLike,
    *,
    task: str = "arithmetic",
    sft_steps: int | None = None,
    batch_size: int | None = None,
    lr: float = 3e-3,
    seed: int = 0,
) -> Path:
    """Build tokenizer + Qwen2 model, warm-start it and `save_pretrained` it to `output_dir`,
    with its `BUILD_RECORD`.

    Runs in a child process with `build_environment()` (its output goes to this process's).
    `sft_steps` and `batch_size` default to the task's recipe. Written atomically (see `save_model`).

    Raises:
        RuntimeError: The build failed (the child's output above says why).
    """
    recipe_for(task)
    args = {
        "output_dir": str(output_dir),
        "task": task,
        "sft_steps": sft_steps,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
    }
    package_root = str(Path(__file__).resolve().parents[3])
    # The child needs no Ray; it trains on the CPU, which DeepSpeed (imported by transformers' save_pretrained)
    # is told, instead of warning that it found no accelerator.
    env = os.environ | build_environment() | {"DAPO_RLLIB_NO_REGISTRATION": "1", "DS_ACCELERATOR": "cpu"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    code = "import sys, json; from dapo_rllib.models.tiny.build import _build; _build(**json.loads(sys.argv[1]))"
    sys.stdout.flush()
    done = subprocess.run([sys.executable, "-c", code, json.dumps(args)], env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"building the tiny {task} model into {output_dir} failed (exit status {done.returncode}); "
            "the build's output above says why"
        )
    return Path(output_dir)


def _build(output_dir: str, *, task: str, sft_steps: int | None, batch_size: int | None, lr: float, seed: int) -> Path:
    """The build itself, in the process `build_tiny_model` started."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    start = time.time()
    torch.set_num_threads(BUILD_THREADS)
    torch.use_deterministic_algorithms(True)
    recipe = recipe_for(task)
    output_dir = Path(output_dir)
    sft_steps, batch_size = sft_steps or recipe.sft_steps, batch_size or recipe.batch_size
    torch.manual_seed(seed)
    corpus = [
        p.messages[-1]["content"] + "\n" + answer_text(recipe.answer(p, recipe.styles[i % len(recipe.styles)][1]))
        for i, p in enumerate(recipe.train_problems(seed))
    ]
    tokenizer = build_tokenizer(corpus, recipe.chat_template)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,  # head_dim 32: one of vLLM's CPU attention head sizes
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"[tiny model] building a {n_params / 1e6:.2f}M-parameter Qwen2 for {task} into {output_dir}", flush=True)
    warm_start(recipe, model, tokenizer, steps=sft_steps, batch_size=batch_size, lr=lr, seed=seed)
    held_out = held_out_accuracy(model, tokenizer, task, seed=seed)
    print(f"[tiny model] held-out {held_out['problems']} problems: " + accuracy_text(held_out), flush=True)
    flags = _cpu_flags()
    record = {
        "task": task,
        "version": recipe.version,
        "seed": seed,
        "sft_steps": sft_steps,
        "batch_size": batch_size,
        "lr": lr,
        "held_out": held_out,
        "built_with": {
            "torch": torch.__version__,
            "transformers": _version("transformers"),
            "tokenizers": _version("tokenizers"),
            "python": platform.python_version(),
            "threads": torch.get_num_threads(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "environment": {name: os.environ.get(name) for name in build_environment()},
            "cpu": _cpu_name(),
            "machine": platform.machine(),
            "cpu_flags": sorted(f for f in flags if re.fullmatch(r"sse4_2|avx|avx2|fma|f16c|avx512\w*|amx\w*", f)),
            "seconds": None,  # filled in by save_model
        },
    }
    return save_model(model, tokenizer, output_dir, record=record, started=start)


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"
