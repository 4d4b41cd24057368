"""The `rllib` command end to end, in subprocesses, as a user runs it.

One short DAPO run in process and one Ray Tune sweep of the tiny example are shared by the tests
of TensorBoard files, plots, evaluation and export.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_family_training import ONE_STEP

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tuned_examples" / "dapo" / "tiny_arithmetic_dapo.py"
SWEEP = ROOT / "tuned_examples" / "dapo" / "tiny_arithmetic_sweep.py"
CODE = ROOT / "tuned_examples" / "dapo" / "tiny_code_dapo.py"
TOOL = ROOT / "tuned_examples" / "dapo" / "tiny_tool_arithmetic_dapo.py"
PPO = ROOT / "tests" / "configs" / "ppo_cartpole.py"
RLLIB = [str(Path(sys.executable).with_name("rllib"))]
# Small, fast evaluation for the tests: 16 held-out problems, 2 samples each.
FAST_EVAL = {"eval_max_problems": 16, "eval_num_samples": 2}
# The code and tool examples train on one round of prompts, informative or not: their tests hold for any
# model the test recipes build (dynamic sampling is tested on the arithmetic model).
ONE_ROUND = FAST_EVAL | {"dynamic_sampling": False}

# Every DAPO metric a user watches, under its TensorBoard name.
TENSORBOARD_TAGS = [
    "learner/policy_loss",
    "learner/entropy",
    "learner/pg_clipfrac_low",
    "learner/pg_clipfrac_high",
    "learner/pg_clipfrac_dual",
    "learner/approx_kl",
    "learner/grad_norm",
    "learner/mean_token_prob",
    "learner/lr",
    "rollout/reward_mean",
    "rollout/acc_mean",
    "rollout/response_length_mean",
    "rollout/response_length_max",
    "rollout/truncation_ratio",
    "rollout/generation_rounds",
    "rollout/groups_kept",
    "rollout/scoring_timeouts",
    "timing/generation_s",
    "timing/scoring_s",
    "timing/old_log_probs_s",
    "timing/update_s",
    "timing/weight_sync_s",
    "timing/generation_tokens_per_s",
    "timing/iteration_s",
    "timing/evaluation_s",
    "evaluation/arithmetic/avg@2",
    "evaluation/arithmetic/pass@2",
    "evaluation/arithmetic/maj@2",
    "evaluation/arithmetic/truncation_ratio",
    "evaluation/arithmetic/response_length_mean",
]


def rllib(*args, cwd, timeout=600):
    """Run the installed `rllib` console script; returns (exit code, stdout + stderr)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run([*RLLIB, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def run_ok(*args, cwd, timeout=600):
    code, out = rllib(*args, cwd=cwd, timeout=timeout)
    assert code == 0, out[-4000:]
    return out


@pytest.fixture(scope="module")
def dapo_run(tiny_model_path, tmp_path_factory):
    """`rllib train file <tiny example> --no-tune` for 2 iterations, a checkpoint after each."""
    work = tmp_path_factory.mktemp("dapo_run")
    out = run_ok(
        "train",
        "file",
        TINY,
        "--no-tune",
        "--stop",
        '{"training_iteration": 2}',
        "--checkpoint-freq",
        "1",
        "--config",
        json.dumps(FAST_EVAL),
        "--name",
        "tiny",
        "--num-cpus",
        "2",
        cwd=work,
    )
    return dict(out=out, run_dir=work / "runs" / "tiny")


@pytest.fixture(scope="module")
def sweep_run(tiny_model_path, tmp_path_factory):
    """The sweep example through Ray Tune with its group_size grid pinned to 4 (a setting given on the
    command line replaces a grid): 3 trials of 1 iteration over clip_eps_high. Each trial runs its env runner
    in the trial's process (num_env_runners=0), so that a trial asks for one CPU and two run at once."""
    work = tmp_path_factory.mktemp("sweep")
    out = run_ok(
        "train",
        "file",
        SWEEP,
        "--stop",
        '{"training_iteration": 1}',
        "--config",
        json.dumps(FAST_EVAL | {"group_size": 4, "num_env_runners": 0}),
        "--name",
        "sweep",
        "--num-cpus",
        "2",
        cwd=work,
        timeout=900,
    )
    return dict(out=out, run_dir=work / "runs" / "sweep")


def scalar_tags(logdir: Path) -> set[str]:
    from dapo_rllib.reporting.plot import read_scalars

    return set(read_scalars(logdir))


def test_help_lists_the_subcommands():
    out = run_ok("--help", cwd=ROOT)
    for command in ("train", "evaluate", "export", "plot"):
        assert command in out
    assert "file" in run_ok("train", "--help", cwd=ROOT)


def test_ppo_cartpole_trains_in_process_and_checkpoints(tmp_path):
    out = run_ok("train", "file", PPO, "--no-tune", "--name", "ppo", "--num-cpus", "2", cwd=tmp_path)
    assert "iter   2 | return" in out
    assert (tmp_path / "runs" / "ppo" / "checkpoint_000002" / "rllib_checkpoint.json").is_file()
    trials = json.loads((tmp_path / "runs" / "ppo" / "trials.json").read_text())
    assert trials[0]["iterations"] == 2 and trials[0]["last"]["env_runners/episode_return_mean"] > 0


def test_ppo_cartpole_trains_as_a_tune_experiment(tmp_path):
    out = run_ok(
        "train", "file", PPO, "--stop", '{"training_iteration": 1}', "--name", "ppo", "--num-cpus", "2", cwd=tmp_path
    )
    assert "iter   1 | return" in out
    checkpoints = list((tmp_path / "runs" / "ppo").glob("PPO_*/checkpoint_*"))
    assert len(checkpoints) == 1, out[-3000:]


def test_a_storage_uri_receives_checkpoints_and_the_trial_table_and_resumes(tmp_path):
    # file:// stands in for s3:// or gs://: the same pyarrow filesystem path, no credentials.
    store = tmp_path / "store"
    out = run_ok(
        "train",
        "file",
        PPO,
        "--no-tune",
        "--stop",
        '{"training_iteration": 1}',
        "--name",
        "ppo",
        "--num-cpus",
        "2",
        "--storage-path",
        f"file://{store}",
        cwd=tmp_path,
    )
    assert (store / "ppo" / "checkpoint_000001" / "rllib_checkpoint.json").is_file()
    assert json.loads((store / "ppo" / "trials.json").read_text())[0]["iterations"] == 1
    assert f"run directory:  file://{store}/ppo" in out
    assert not any(tmp_path.glob("file:*")), "the URI must not become a local directory"
    out = run_ok(
        "train",
        "file",
        PPO,
        "--no-tune",
        "--stop",
        '{"training_iteration": 2}',
        "--name",
        "ppo2",
        "--num-cpus",
        "2",
        "--storage-path",
        f"file://{store}",
        "--restore",
        f"file://{store}/ppo/checkpoint_000001",
        cwd=tmp_path,
    )
    assert "at iteration 1" in out and (store / "ppo2" / "checkpoint_000002").is_dir()


def test_dapo_in_process_run_reports_and_checkpoints(dapo_run):
    out, run_dir = dapo_run["out"], dapo_run["run_dir"]
    assert "[DAPO] generation round 1:" in out and "samples scored" in out
    assert "iter   2 | acc" in out
    assert "validation arithmetic/avg@2: " in out
    assert "[DAPO] validation (" in out and "arithmetic: avg@2 " in out
    for line in (
        f"run directory:  {run_dir}",
        f"TensorBoard:    tensorboard --logdir {run_dir}",
        f"plot:           {run_dir / 'dapo_curves.png'}",
    ):
        assert line in out
    assert sorted(p.name for p in run_dir.glob("checkpoint_*")) == ["checkpoint_000001", "checkpoint_000002"]


# A config file for a registered algorithm besides DAPO: its config class, the tiny task, one small step
# (tests/test_family_training.py trains each of them in process).
FAMILY_CONFIG_FILE = """
import dapo_rllib  # noqa: F401
from dapo_rllib.algorithm.family import GSPOConfig

config = (
    GSPOConfig()
    .environment("dapo_math", env_config={{"dataset": "arithmetic", "split": "train"}})
    .evaluation(val_before_train=False, **{fast_eval!r})
    .env_runners(num_env_runners=0)
    .training(**{one_step!r})
)
"""


@pytest.fixture(scope="module")
def gspo_run(tiny_model_path, tmp_path_factory):
    """`rllib train file <a file with GSPO's config> --no-tune` for one iteration, a checkpoint after it."""
    work = tmp_path_factory.mktemp("gspo")
    config_file = work / "gspo.py"
    config_file.write_text(FAMILY_CONFIG_FILE.format(one_step=ONE_STEP, fast_eval=FAST_EVAL))
    out = run_ok(
        "train", "file", config_file, "--no-tune", "--stop", '{"training_iteration": 1}', "--checkpoint-freq",
        "1", "--name", "gspo", "--num-cpus", "2", cwd=work,
    )  # fmt: skip
    return dict(out=out, config_file=config_file, checkpoint=work / "runs" / "gspo" / "checkpoint_000001")


def test_a_registered_algorithm_trains_through_rllib_train_file_and_names_its_checkpoint(gspo_run, dapo_run, tmp_path):
    from dapo_rllib.algorithm.checkpoints import checkpoint_algorithm
    from dapo_rllib.algorithm.family import GSPO

    assert "building GSPO ..." in gspo_run["out"] and "iter   1 | acc" in gspo_run["out"]
    assert checkpoint_algorithm(gspo_run["checkpoint"]) is GSPO
    # The checkpoint resumes as its own algorithm only: into a DAPO run it is refused, and the reverse.
    code, out = rllib(
        "train", "file", TINY, "--no-tune", "--restore", gspo_run["checkpoint"], "--stop", '{"training_iteration": 2}',
        "--num-cpus", "2", cwd=tmp_path,
    )  # fmt: skip
    assert code != 0 and "is a checkpoint of GSPO" in out and "cannot be restored as DAPO" in out, out[-3000:]
    code, out = rllib(
        "train", "file", gspo_run["config_file"], "--no-tune", "--restore", dapo_run["run_dir"] / "checkpoint_000001",
        "--stop", '{"training_iteration": 2}', "--num-cpus", "2", cwd=tmp_path,
    )  # fmt: skip
    assert code != 0 and "is a checkpoint of DAPO" in out and "cannot be restored as GSPO" in out, out[-3000:]


def test_evaluate_takes_a_checkpoint_of_another_registered_algorithm(gspo_run, tmp_path):
    results = tmp_path / "results.json"
    out = run_ok(
        "evaluate", gspo_run["checkpoint"], "--data", "arithmetic", "--num-samples", "2",
        "--max-problems", "4", "--out", results, cwd=tmp_path,
    )  # fmt: skip
    assert "avg@2" in out
    metrics = json.loads(results.read_text())["metrics"]["arithmetic"]
    assert (metrics["num_problems"], metrics["num_samples"]) == (4, 8)


def test_restore_repeats_iteration_two_from_the_checkpoint_of_iteration_one(dapo_run, tmp_path):
    out = run_ok(
        "train",
        "file",
        TINY,
        "--no-tune",
        "--restore",
        dapo_run["run_dir"] / "checkpoint_000001",
        "--stop",
        '{"training_iteration": 2}',
        "--config",
        json.dumps(FAST_EVAL),
        "--name",
        "resumed",
        "--num-cpus",
        "2",
        cwd=tmp_path,
    )
    assert "at iteration 1" in out
    original = json.loads((dapo_run["run_dir"] / "trials.json").read_text())[0]["last"]
    resumed = json.loads((tmp_path / "runs" / "resumed" / "trials.json").read_text())[0]["last"]
    assert resumed["training_iteration"] == original["training_iteration"] == 2
    # Same prompts and completions (data position, seeds), same LR schedule position.
    for key in (
        "rollout/acc_mean",
        "rollout/reward_mean",
        "rollout/response_length_mean",
        "learners/default_policy/default_optimizer_learning_rate",
    ):
        assert resumed[key] == original[key], key
    assert resumed["learners/default_policy/policy_loss"] == pytest.approx(
        original["learners/default_policy/policy_loss"], rel=1e-5
    )


def test_tensorboard_files_of_an_in_process_run_hold_every_dapo_metric(dapo_run):
    tags = scalar_tags(dapo_run["run_dir"])
    assert set(TENSORBOARD_TAGS) <= tags, sorted(set(TENSORBOARD_TAGS) - tags)


def test_sweep_runs_every_grid_point_and_prints_the_trial_table(sweep_run):
    out, run_dir = sweep_run["out"], sweep_run["run_dir"]
    trials = json.loads((run_dir / "trials.json").read_text())
    assert sorted(t["params"]["clip_eps_high"] for t in trials) == [0.2, 0.28, 0.35]
    header = next(line for line in out.splitlines() if line.startswith("trial "))
    assert {"clip_eps_high", "iters", "before", "after"} <= set(header.split())
    for t in trials:
        assert 0.0 <= t["last"]["evaluation_before_training/arithmetic/avg@2"] <= 1.0
        assert t["iterations"] == 1


def test_tensorboard_files_of_tune_trials_hold_every_dapo_metric(sweep_run):
    trial_dirs = [p for p in sweep_run["run_dir"].iterdir() if p.is_dir() and p.name.startswith("DAPO_")]
    assert len(trial_dirs) == 3
    for trial_dir in trial_dirs:
        tags = scalar_tags(trial_dir)
        # Evaluation runs before training only, with a 12-iteration interval and a 1-iteration stop.
        assert set(TENSORBOARD_TAGS) <= tags, sorted(set(TENSORBOARD_TAGS) - tags)


def test_plot_renders_a_non_blank_png_from_a_real_run(dapo_run, tmp_path):
    from PIL import Image

    out = tmp_path / "curves.png"
    assert f"plot: {out}" in run_ok("plot", dapo_run["run_dir"], "--out", out, cwd=tmp_path)
    with Image.open(out) as image:
        assert image.format == "PNG"
        pixels = np.asarray(image.convert("RGB"))
    assert pixels.shape == (1200, 1500, 3)  # 3 x 3 panels
    # Lines in several colours on a white background, not a blank canvas.
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50
    assert (pixels < 200).any(axis=-1).mean() > 0.01


def test_plot_draws_every_trial_of_a_sweep(sweep_run):
    from dapo_rllib.reporting.plot import find_runs

    assert len(find_runs(sweep_run["run_dir"])) == 3
    assert (sweep_run["run_dir"] / "dapo_curves.png").is_file()


def test_evaluate_a_checkpoint_on_another_dataset(dapo_run, tmp_path):
    from dapo_rllib.tasks.data import generate_arithmetic_problems, problem_to_row, write_jsonl

    data = tmp_path / "eval.jsonl"
    write_jsonl(map(problem_to_row, generate_arithmetic_problems("test", 6)), data)
    results = tmp_path / "results.json"
    checkpoint = dapo_run["run_dir"] / "checkpoint_000002"
    out = run_ok("evaluate", checkpoint, "--data", data, "--num-samples", "3", "--out", results, cwd=tmp_path)
    assert "avg@3" in out and "maj@3" in out and f"results (every number, per problem too): {results}" in out
    report = json.loads(results.read_text())
    metrics = report["metrics"]["arithmetic"]
    assert (metrics["num_problems"], metrics["num_samples"]) == (6, 18)
    assert 0.0 <= metrics["avg@3"] <= metrics["pass@3"] <= 1.0
    assert report["settings"]["num_samples"] == 3 and report["settings"]["max_response_length"] == 32
    assert [p["num_samples"] for p in report["problems"]] == [3] * 6
    assert metrics["avg@3"] == pytest.approx(np.mean([p["accuracy"] for p in report["problems"]]))


def test_code_example_trains_on_sandboxed_rewards(tiny_code_model_path, tmp_path):
    """The code env inside a Ray env runner: generation, sandboxed scoring, update, validation."""
    out = run_ok(
        "train",
        "file",
        CODE,
        "--no-tune",
        "--stop",
        '{"training_iteration": 1}',
        "--config",
        json.dumps(ONE_ROUND),
        "--name",
        "code",
        "--num-cpus",
        "2",
        cwd=tmp_path,
    )
    assert "iter   1 | acc" in out and "validation code_arithmetic/avg@2: " in out
    last = json.loads((tmp_path / "runs" / "code" / "trials.json").read_text())[0]["last"]
    assert last["rollout/groups_kept"] == 16
    assert (
        0.0 <= last["evaluation/code_arithmetic/avg@2"] <= 1.0 and last["evaluation/code_arithmetic/num_problems"] == 16
    )


def test_data_convert_writes_dapo_rows_and_reports_drops(tmp_path):
    source = tmp_path / "problems.csv"
    source.write_text("question,answer\nWhat is 2 + 2?,4\nWhat is 2 + 2?,4\nWhat is 3 + 3?,\n")
    out = run_ok("data", "convert", source, tmp_path / "out" / "train.parquet", cwd=tmp_path)
    assert "wrote 1 row\n" in out and "duplicate: 1 (e.g. row 1)" in out and "missing answer: 1 (e.g. row 2)" in out
    from dapo_rllib.tasks.data import DAPO_PROMPT_TEMPLATE, load_math_dataset

    (problem,) = load_math_dataset(tmp_path / "out" / "train.parquet")
    assert problem.messages == ({"role": "user", "content": DAPO_PROMPT_TEMPLATE.format(problem="What is 2 + 2?")},)
    assert (problem.ground_truth, problem.data_source) == ("4", "math_dapo")
    code, out = rllib("data", "convert", tmp_path / "missing.csv", tmp_path / "x.parquet", cwd=tmp_path)
    assert code == 2 and "missing.csv" in out and "Traceback" not in out


def test_export_writes_a_model_that_transformers_and_vllm_load(dapo_run, tmp_path, tiny_model_path):
    from ray.rllib.core.rl_module.rl_module import RLModule
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm import LLM, SamplingParams

    from dapo_rllib.algorithm.checkpoints import policy_module_path
    from dapo_rllib.rollout.vllm_engine import release_startup_objects

    out_dir = tmp_path / "hf"
    run_ok("export", dapo_run["run_dir"] / "checkpoint_000002", out_dir, cwd=tmp_path)
    exported = AutoModelForCausalLM.from_pretrained(out_dir)
    trained = RLModule.from_checkpoint(policy_module_path(dapo_run["run_dir"] / "checkpoint_000002")).model
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    for name, param in exported.state_dict().items():
        np.testing.assert_array_equal(param.numpy(), trained.state_dict()[name].numpy())
    assert not np.array_equal(
        exported.state_dict()["model.embed_tokens.weight"].numpy(),
        base.state_dict()["model.embed_tokens.weight"].numpy(),
    )
    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    assert tokenizer.get_vocab() == AutoTokenizer.from_pretrained(tiny_model_path).get_vocab()

    llm = LLM(
        model=str(out_dir),
        max_model_len=160,
        enforce_eager=True,
        gpu_memory_utilization=0.1,
        kv_cache_memory_bytes=64 << 20,  # on CPU, else 10% of the machine's memory less this process's
        enable_chunked_prefill=False,
    )
    release_startup_objects()  # vLLM froze this process's objects (the fixtures' too) at the engine's start
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 12 + 7?"}], add_generation_prompt=True, tokenize=False
    )
    completion = llm.generate([prompt], SamplingParams(max_tokens=16, temperature=0), use_tqdm=False)[0].outputs[0]
    assert len(completion.token_ids) > 0


def test_the_tool_example_runs_as_a_tune_experiment_with_its_turn_metrics(tiny_tool_model_path, tmp_path):
    """Episodes of several turns with the python tool through Ray Tune: TensorBoard holds the turn, tool and
    token metrics, validation reports tool use, and the plot is drawn. The env runner runs in the trial's
    process (the code example's test has one of its own)."""
    out = run_ok(
        "train",
        "file",
        TOOL,
        "--stop",
        '{"training_iteration": 1}',
        "--config",
        json.dumps(ONE_ROUND | {"num_env_runners": 0}),
        "--name",
        "tool",
        "--num-cpus",
        "2",
        cwd=tmp_path,
    )
    assert "turns " in out and "tools " in out  # the summary line of episodes with turns
    run_dir = tmp_path / "runs" / "tool"
    (trial_dir,) = [p for p in run_dir.iterdir() if p.is_dir() and p.name.startswith("DAPO_")]
    tags = scalar_tags(trial_dir)
    for name in (
        "rollout/turns_mean",
        "rollout/turns_max",
        "rollout/tool_calls",
        "rollout/tool_errors/malformed",
        "rollout/model_tokens_mean",
        "rollout/env_tokens_mean",
        "rollout/ended_by/env",
        "rollout/ended_by/max_turns",
        "rollout/ended_by/budget",
        "timing/tool_s",
        "evaluation/tool_arithmetic/tool_use",
        "evaluation/tool_arithmetic/turns_mean",
    ):
        assert name in tags, name
    assert (run_dir / "dapo_curves.png").is_file()
