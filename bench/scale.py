"""The learner at scale: DAPO steps on real model shapes, with time, memory and padding (a benchmark).

    python bench/scale.py [--workload NAME|default|all] [--steps 3] [--json PATH] [--no-async] [--smoke]
                          [--sweep-micro-batch-tokens 2048,4096,...]

Workloads (`WORKLOADS`): "25m" and "25m-bf16" (float32, bfloat16), and Qwen2.5 shapes with full fine-tuning or LoRA (rank 16 on
every decoder linear layer) in float32 or bfloat16: "qwen2.5-0.5b-shape", "qwen2.5-0.5b-shape-bf16",
"qwen2.5-0.5b-shape-lora", "qwen2.5-0.5b-shape-lora-bf16", "qwen2.5-0.5b-shape-lora-merged" (the
adapters merged into the weights that travel, vLLM without LoRA), "qwen2.5-1.5b-shape-lora-bf16",
"qwen2.5-3b-shape-lora-bf16". Each builds its model locally with random weights (no download: the
tokenizer is the tiny one, the vocabulary the real size). The real SmolLM2-135M-Instruct (the packaged
model) runs the 25m workload's step: "smollm2", "smollm2-lora" (the adapter travels), "smollm2-lora-merged",
each also in bfloat16 ("-bf16"). Every workload runs DAPO steps on the arithmetic task with one vLLM env
runner and the learner in this process, and reports:

    num_parameters, vocab_size
    step_s, generation_s, old_logp_s, update_s, weight_sync_s   mean over the steps after the first
    async_step_s           step_s again with async_rollout=True (generation during the update)
    rollout_logp_abs_diff  mean |learner old log-prob - vLLM's| per token (and its max)
    weight_sync_peak_extra_gb   memory one weight sync adds on top of the resident weights:
                           peak minus resident before, of the learner and env runner processes
                           together (shared object-store pages count in both)
    kv_cache_gb            the env runner's vLLM KV cache
    peak_rss_learner_gb, peak_rss_env_runner_gb                   peak resident memory per process
    padding_fraction       padded / all token positions of the learner's forward passes
    framework_overhead     one DAPO update / a bare PyTorch forward + backward + AdamW step over
                           the same micro-batches, in the same process (with LoRA: a bare PEFT
                           model's, AdamW over its adapters)
    micro_batch_sweep      with --sweep-micro-batch-tokens: per token budget, that bare step's
                           seconds and its peak memory above the resident (the update's cost
                           follows it: framework_overhead is 1.01 at the 25m workload)

Dynamic sampling is off (random weights score 0 on every problem): every group is trained.
`--smoke` (CI) runs one step of a small shape, in float32 and again with LoRA in bfloat16, and
sweeps two micro-batch budgets, so the benchmark cannot rot.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import ray
import torch

import dapo_rllib  # noqa: F401  (registers DAPO; vLLM's environment defaults)
from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.algorithm.learner import CPU_MICRO_BATCH_TOKENS
from dapo_rllib.algorithm.micro_batching import plan_micro_batches
from dapo_rllib.columns import Metrics, tag
from dapo_rllib.models.resolve import ensure_model_directory
from dapo_rllib.models.tiny import default_cache_dir
from dapo_rllib.reporting.tensorboard import readable_scalars
from dapo_rllib.rollout.vllm_engine import cpu_kv_cache_bytes


@dataclass(frozen=True)
class Workload:
    shape: dict  # Qwen2Config fields of a random model; empty for a real model (`model`)
    prompts: int
    group_size: int
    max_response_length: int
    max_tokens_per_micro_batch: int
    gradient_checkpointing: bool
    lora_rank: int | None = None  # LoRA adapters of this rank on every decoder linear layer; None: full fine-tuning
    dtype: str = "float32"  # model_dtype: the learner computes in it, vLLM serves it
    lora_sync: str = (
        "adapter"  # with LoRA: "adapter" (the adapter travels) or "merged" (merged weights, no LoRA in vLLM)
    )
    model: str | None = None  # a real model's `model_path` (a packaged name, a GGUF file), in place of a random shape


QWEN2_5_0_5B = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
)
QWEN2_5_1_5B = dict(
    hidden_size=1536,
    intermediate_size=8960,
    num_hidden_layers=28,
    num_attention_heads=12,
    num_key_value_heads=2,
    vocab_size=151936,
)
QWEN2_5_3B = dict(
    hidden_size=2048,
    intermediate_size=11008,
    num_hidden_layers=36,
    num_attention_heads=16,
    num_key_value_heads=2,
    vocab_size=151936,
)
# The 0.5B shape's DAPO step (4 prompts x 4 x up to 64 tokens, 1,024-token micro-batches with
# gradient checkpointing), the same for every shape, dtype and LoRA setting.
SHAPE_STEP = dict(
    prompts=4, group_size=4, max_response_length=64, max_tokens_per_micro_batch=1024, gradient_checkpointing=True
)
# A 25M-parameter Qwen2 with the tiny vocabulary: 16 prompts x 8 x up to 256 tokens (the
# workload bench/trl_baseline.py runs TRL's GRPOTrainer on), in micro-batches of the CPU default.
SMALL_25M = Workload(
    dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2),
    prompts=16,
    group_size=8,
    max_response_length=256,
    max_tokens_per_micro_batch=CPU_MICRO_BATCH_TOKENS,
    gradient_checkpointing=False,
)
# The real SmolLM2-135M-Instruct (the packaged model) on the same step as the 25m workload, 16 prompts
# x 8 x up to 256 tokens: the workload bench/trl_baseline.py compares with TRL on the real model.
SMOLLM2 = dataclasses.replace(SMALL_25M, shape={}, model="smollm2-135m-instruct")
WORKLOADS = {
    "25m": SMALL_25M,
    "25m-bf16": dataclasses.replace(SMALL_25M, dtype="bfloat16"),
    # Qwen2.5-0.5B's shape: 494M parameters, the real vocabulary. 4 prompts x 4 x 64 tokens.
    "qwen2.5-0.5b-shape": Workload(QWEN2_5_0_5B, **SHAPE_STEP),
    "qwen2.5-0.5b-shape-bf16": Workload(QWEN2_5_0_5B, **SHAPE_STEP, dtype="bfloat16"),
    "qwen2.5-0.5b-shape-lora": Workload(QWEN2_5_0_5B, **SHAPE_STEP, lora_rank=16),
    "qwen2.5-0.5b-shape-lora-bf16": Workload(QWEN2_5_0_5B, **SHAPE_STEP, lora_rank=16, dtype="bfloat16"),
    "qwen2.5-0.5b-shape-lora-merged": Workload(QWEN2_5_0_5B, **SHAPE_STEP, lora_rank=16, lora_sync="merged"),
    "qwen2.5-0.5b-shape-lora-bf16-merged": Workload(
        QWEN2_5_0_5B, **SHAPE_STEP, lora_rank=16, dtype="bfloat16", lora_sync="merged"
    ),
    # Qwen2.5-1.5B's and -3B's shapes (1.54B and 3.09B parameters): LoRA in bfloat16 only, the one
    # setting whose learner and engine fit this machine's 24 GiB together.
    "qwen2.5-1.5b-shape-lora-bf16": Workload(QWEN2_5_1_5B, **SHAPE_STEP, lora_rank=16, dtype="bfloat16"),
    "qwen2.5-3b-shape-lora-bf16": Workload(QWEN2_5_3B, **SHAPE_STEP, lora_rank=16, dtype="bfloat16"),
}
# SmolLM2-135M-Instruct: "smollm2", "smollm2-lora" (rank 16, the adapter travels), "smollm2-lora-merged",
# each in float32 and with a "-bf16" suffix in bfloat16.
WORKLOADS |= {
    f"smollm2{lora_suffix}{dtype_suffix}": dataclasses.replace(SMOLLM2, dtype=dtype, **lora)
    for lora_suffix, lora in (
        ("", {}),
        ("-lora", {"lora_rank": 16, "lora_sync": "adapter"}),
        ("-lora-merged", {"lora_rank": 16, "lora_sync": "merged"}),
    )
    for dtype_suffix, dtype in (("", "float32"), ("-bf16", "bfloat16"))
}
CORES = os.cpu_count()  # the Ray cluster's CPUs, all of them the env runner's in a synchronous step
# What `make bench` runs: the shapes' full fine-tuning and LoRA baselines (the rest by name or "all").
DEFAULT_WORKLOADS = ("25m", "25m-bf16", "qwen2.5-0.5b-shape", "qwen2.5-0.5b-shape-lora")
SMOKE = Workload(
    dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
    prompts=2,
    group_size=4,
    max_response_length=32,
    max_tokens_per_micro_batch=256,
    gradient_checkpointing=True,
)
# `--smoke` runs both: the small shape, and again with LoRA in bfloat16 (CI: neither path can rot).
SMOKE_WORKLOADS = {"smoke": SMOKE, "smoke-lora-bf16": dataclasses.replace(SMOKE, lora_rank=8, dtype="bfloat16")}
PHASES = {
    "generation_s": Metrics.GENERATION_S,
    "old_logp_s": Metrics.OLD_LOG_PROBS_S,
    "update_s": Metrics.UPDATE_S,
    "weight_sync_s": Metrics.WEIGHT_SYNC_S,
}


SHAPE_TAGS = {
    "hidden_size": "h",
    "intermediate_size": "i",
    "num_hidden_layers": "l",
    "num_attention_heads": "a",
    "num_key_value_heads": "kv",
    "vocab_size": "v",
}


def model_dir(shape: dict) -> Path:
    """Where the random model of ``shape`` is cached: one per shape, whatever the dtype or LoRA setting."""
    return default_cache_dir() / ("random-qwen2-" + "-".join(f"{SHAPE_TAGS[k]}{v}" for k, v in shape.items()))


def workload_model(workload: Workload) -> Path:
    """The model directory a workload trains: its real model's (converted once), or its random shape's."""
    return ensure_model_directory(workload.model) if workload.model else random_model(workload.shape)


def random_model(shape: dict) -> Path:
    """The random model of ``shape``, built (once) in a child process: building holds the whole model
    in float32, which must not count in this process's peak memory, the learner's."""
    path = model_dir(shape)
    if not (path / "config.json").exists():
        build = "import json, sys; from dapo_rllib.models.tiny import build_random_model as b, ensure_tiny_model as t; b(sys.argv[1], json.loads(sys.argv[2]), t())"
        subprocess.run([sys.executable, "-c", build, str(path), json.dumps(shape)], check=True)
    return path


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _status_gb(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 2**20


def start_peak_window(_=None) -> float:
    """Reset this process's peak RSS (VmHWM) to its current RSS; returns that RSS in GB."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_gb("VmRSS")


def peak_in_window(_=None) -> float:
    return _status_gb("VmHWM")


def weight_sync_peak_extra_gb(algo) -> tuple[float, float]:
    """(GB one more weight sync adds at its peak in the learner and env runner processes,
    its wall seconds)."""
    runners = algo.env_runner_group
    before = start_peak_window() + sum(runners.foreach_env_runner(start_peak_window, local_env_runner=False))
    start = time.perf_counter()
    algo.sync_weights_to_env_runners()
    elapsed = time.perf_counter() - start
    return peak_in_window() + sum(runners.foreach_env_runner(peak_in_window, local_env_runner=False)) - before, elapsed


def kv_cache_gb(runner) -> float:
    """The KV cache of the env runner's vLLM engine on CPU (`cpu_kv_cache_bytes`)."""
    return cpu_kv_cache_bytes(runner.settings.engine) / 1e9


def config_for(workload: Workload, model_path: Path, async_rollout: bool = False) -> DAPOConfig:
    return (
        DAPOConfig()
        .environment("dapo_math", env_config={"dataset": "arithmetic", "split": "train"})
        # A synchronous step takes turns, generation then the update: the engine gets every core for
        # its turn (Ray sets the env runner's threads from its CPUs; one thread generated at half
        # the speed). With async_rollout both run at once, one core each.
        .env_runners(num_env_runners=1, num_cpus_per_env_runner=1 if async_rollout else CORES)
        .evaluation(val_before_train=False)
        .training(
            model_path=str(model_path),
            group_size=workload.group_size,
            train_batch_size_prompts=workload.prompts,
            gen_batch_size_prompts=workload.prompts,
            minibatch_size_prompts=workload.prompts,
            dynamic_sampling=False,
            max_prompt_length=128,
            max_response_length=workload.max_response_length,
            overlong_buffer_len=0,
            max_tokens_per_micro_batch=workload.max_tokens_per_micro_batch,
            gradient_checkpointing=workload.gradient_checkpointing,
            lr=1e-6,
            lr_warmup_steps=0,
            async_rollout=async_rollout,
            model_dtype=workload.dtype,
            lora_rank=workload.lora_rank,
            lora_sync=workload.lora_sync,
        )
        .debugging(seed=0)
    )


def bare_step_s(
    workload: Workload, model_path: Path, sequences: list[tuple[list[int], list[int]]], model=None
) -> float:
    """A bare PyTorch step over the learner's micro-batches: forward, the sampled tokens'
    log-probs (logsumexp and gather), backward, AdamW. No RLlib, no connectors, no metrics. With
    LoRA the model is a bare PEFT model (`get_peft_model`, adapters on every decoder linear layer)
    and AdamW holds its adapters; in bfloat16 full fine-tuning computes under autocast on float32
    weights, LoRA on a bfloat16 base, as the learner does."""
    dtype = getattr(torch, workload.dtype)
    autocast = workload.lora_rank is None and dtype != torch.float32
    model = model or bare_model(workload, model_path)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    max_tokens = workload.max_tokens_per_micro_batch
    plan = plan_micro_batches(
        torch.tensor([len(p) for p, _ in sequences]), torch.tensor([len(r) for _, r in sequences]), max_tokens
    )
    num_tokens = sum(len(r) for _, r in sequences)
    start = time.perf_counter()
    for micro_batch in plan:
        rows = [sequences[i] for i in micro_batch.rows.tolist()]
        width_p, width_r = micro_batch.prompt_width, micro_batch.response_width
        ids = torch.zeros(len(rows), width_p + width_r, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for j, (p, r) in enumerate(rows):
            ids[j, width_p - len(p) : width_p + len(r)] = torch.tensor(p + r)
            mask[j, width_p - len(p) : width_p + len(r)] = 1
        with torch.autocast("cpu", dtype=dtype, enabled=autocast):
            logits = (
                model(
                    input_ids=ids,
                    attention_mask=mask,
                    position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                    logits_to_keep=width_r + 1,
                    use_cache=False,
                )
                .logits[:, :-1]
                .float()
            )
        response = ids[:, width_p:]
        logp = logits.gather(-1, response.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1)
        (-(logp * mask[:, width_p:]).sum() / num_tokens).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def bare_model(workload: Workload, model_path: Path):
    """The model `bare_step_s` trains: the workload's dtype (float32 under autocast for full
    fine-tuning in bfloat16), LoRA, gradient checkpointing and the learner's attention kernel,
    with no RLlib around it."""
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, workload.dtype)
    autocast = workload.lora_rank is None and dtype != torch.float32
    model = AutoModelForCausalLM.from_pretrained(
        model_path,
        dtype=torch.float32 if autocast else dtype,
        attn_implementation=config_for(workload, model_path).learner_attn_implementation,
    )
    if workload.lora_rank is not None:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=workload.lora_rank, lora_alpha=2 * workload.lora_rank, target_modules="all-linear")
        model = get_peft_model(model, lora)
    if workload.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
    return model


def micro_batch_sweep(workload: Workload, model_path: Path, sequences, budgets: list[int]) -> list[dict]:
    """The bare step over the same sequences at each token budget, with the peak memory it adds
    to this process (one model for all; each step makes its own AdamW state, the same at every
    budget)."""
    model = bare_model(workload, model_path)
    longest = max(len(p) + len(r) for p, r in sequences)
    rows = []
    for budget in budgets:
        if budget < longest:
            raise SystemExit(f"--sweep-micro-batch-tokens {budget} is below the longest sequence ({longest} tokens)")
        resident = start_peak_window()
        seconds = bare_step_s(
            dataclasses.replace(workload, max_tokens_per_micro_batch=budget), model_path, sequences, model
        )
        rows.append(
            {"max_tokens_per_micro_batch": budget, "bare_step_s": seconds, "peak_extra_gb": peak_in_window() - resident}
        )
        print(f"[micro-batch sweep] {budget} tokens: {seconds:.1f} s, +{rows[-1]['peak_extra_gb']:.2f} GB", flush=True)
    return rows


def train_steps(algo, name: str, steps: int) -> dict:
    """Mean figures of `steps` training steps, the first (warm-up) left out when there are more."""
    rows = []
    for step in range(1, steps + 1):
        start = time.perf_counter()
        scalars = readable_scalars(algo.train())
        row = {"step_s": time.perf_counter() - start} | {
            key: scalars.get(tag(Metrics.TIMING, metric), 0.0) for key, metric in PHASES.items()
        }
        row["padding_fraction"] = scalars[tag(Metrics.LEARNER, Metrics.PADDING_FRACTION)]
        for metric in (Metrics.ROLLOUT_LOGP_ABS_DIFF, Metrics.ROLLOUT_LOGP_ABS_DIFF_MAX):
            row[metric] = scalars[tag(Metrics.LEARNER, metric)]
        rows.append(row)
        print(f"[{name}] step {step}: " + "  ".join(f"{k} {v:.3f}" for k, v in row.items()), flush=True)
    measured = rows[1:] or rows
    return {key: statistics.mean(r[key] for r in measured) for key in rows[0]}


def async_step_s(name: str, steps: int) -> float:
    """step_s of the workload with async_rollout=True, in a process of its own (a second
    learner in this one would add its memory to this one's figures)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "async.json"
        command = [sys.executable, __file__, "--async-only", "--steps", str(steps), "--json", str(out)]
        subprocess.run(command + ["--workload", name], check=True)
        return json.loads(out.read_text())["async_step_s"]


def run_workload(name: str, workload: Workload, steps: int, model_path: Path, sweep: list[int]) -> dict:
    algo = config_for(workload, model_path).build_algo()
    figures = train_steps(algo, name, steps)
    sync_extra_gb, sync_s = weight_sync_peak_extra_gb(algo)
    kv_gb = algo.env_runner_group.foreach_env_runner(kv_cache_gb, local_env_runner=False)[0]

    # One more batch, timed as a learner update and as a bare PyTorch step on the same sequences.
    batch = [(problem, 10**6 + problem) for problem in range(workload.prompts)]  # (problem index, group id)
    episodes = [
        ep
        for shard in algo.env_runner_group.foreach_env_runner(
            lambda r: r.sample(requests=batch), local_env_runner=False
        )
        for ep in shard
    ]
    start = time.perf_counter()
    algo.learner_group.update(
        episodes=episodes, minibatch_size=len(episodes), num_epochs=1, shuffle_batch_per_epoch=False, timesteps={}
    )
    update_s = time.perf_counter() - start
    peak_env_runner = max(algo.env_runner_group.foreach_env_runner(lambda r: peak_rss_gb(), local_env_runner=False))
    peak_learner = peak_rss_gb()
    sequences = [(list(ep.get_observations(0)), list(ep.get_actions(0))) for ep in episodes]
    algo.stop()
    bare_s = bare_step_s(workload, model_path, sequences)
    sweep_rows = micro_batch_sweep(workload, model_path, sequences, sweep) if sweep else None

    with open(model_path / "config.json") as f:
        vocab_size = json.load(f)["vocab_size"]
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        num_parameters = sum(
            p.numel() for p in AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path)).parameters()
        )
    return {
        "workload": name,
        "num_parameters": num_parameters,
        "vocab_size": vocab_size,
        "prompts_x_group_x_max_tokens": f"{workload.prompts} x {workload.group_size} x {workload.max_response_length}",
        "max_tokens_per_micro_batch": workload.max_tokens_per_micro_batch,
        "gradient_checkpointing": workload.gradient_checkpointing,
        "lora_rank": workload.lora_rank,
        "model_dtype": workload.dtype,
        "lora_sync": workload.lora_sync if workload.lora_rank else None,
        "response_tokens": sum(len(r) for _, r in sequences),
        **figures,
        "weight_sync_bucket_mb": algo.config.weight_sync_bucket_mb,
        "weight_sync_peak_extra_gb": sync_extra_gb,
        "weight_sync_once_s": sync_s,
        "kv_cache_gb": kv_gb,
        "peak_rss_learner_gb": peak_learner,
        "peak_rss_env_runner_gb": peak_env_runner,
        "update_once_s": update_s,
        "bare_pytorch_step_s": bare_s,
        "framework_overhead": update_s / bare_s,
        "micro_batch_sweep": sweep_rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workload",
        choices=[*WORKLOADS, *SMOKE_WORKLOADS, "default", "all"],
        default="default",
        help=f"default: {', '.join(DEFAULT_WORKLOADS)} (`make bench`, about 1.5 hours here); all: every workload",
    )
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--smoke", action="store_true", help="one step of a small shape (CI: the benchmark still runs)")
    parser.add_argument("--no-async", action="store_true", help="leave out the async_rollout run (async_step_s: null)")
    parser.add_argument("--async-only", action="store_true", help=argparse.SUPPRESS)  # see async_step_s
    parser.add_argument(
        "--sweep-micro-batch-tokens",
        type=lambda text: [int(t) for t in text.split(",")],
        default=[],
        metavar="N,N,...",
        help="also time the bare step over the same sequences at each of these token budgets",
    )
    args = parser.parse_args()

    if args.smoke:
        runs = {name: (w, 1) for name, w in SMOKE_WORKLOADS.items()}
        args.sweep_micro_batch_tokens = args.sweep_micro_batch_tokens or [256, 512]
    elif args.workload in SMOKE_WORKLOADS:
        runs = {args.workload: (SMOKE_WORKLOADS[args.workload], args.steps)}
    else:
        chosen = {"default": DEFAULT_WORKLOADS, "all": tuple(WORKLOADS)}.get(args.workload, (args.workload,))
        runs = {name: (WORKLOADS[name], args.steps) for name in chosen}
    models = {name: workload_model(w) for name, (w, _) in runs.items()}
    # A cluster of its own (address="local"), not one another job on this machine started.
    ray.init(address="local", num_cpus=CORES, include_dashboard=False)
    if args.async_only:
        ((name, (workload, steps)),) = runs.items()
        algo = config_for(workload, models[name], async_rollout=True).build_algo()
        args.json.write_text(json.dumps({"async_step_s": train_steps(algo, f"{name} async", steps)["step_s"]}))
        algo.stop()
        ray.shutdown()
        return
    # Peak RSS is a high-water mark of this process: the smaller workload runs first, and
    # `--workload` gives each its own process.
    results = [
        run_workload(name, workload, steps, models[name], args.sweep_micro_batch_tokens)
        for name, (workload, steps) in runs.items()
    ]
    ray.shutdown()
    for result, (name, (_, steps)) in zip(results, runs.items()):
        if args.no_async:
            result["async_step_s"] = None
            continue
        try:
            result["async_step_s"] = async_step_s(name, steps)
        except subprocess.CalledProcessError as error:
            if args.smoke:  # CI: the benchmark must not rot
                raise
            # Reported, and the other figures kept (a run of an hour is not thrown away).
            print(f"[{name}] the async_rollout run failed (exit {error.returncode}): see its output above", flush=True)
            result["async_step_s"] = None
    for result in results:
        print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results if len(results) > 1 else results[0], indent=1))
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
