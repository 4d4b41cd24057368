"""The `rllib` command end to end, in subprocesses, as a user runs it: train without Tune, restore, evaluate,
export and plot.

One short DAPO run and one GSPO run are shared by the tests of TensorBoard files, plots, evaluation and
export. (Tune experiments: test_cli_tune.py; the code and tool examples and `rllib data`: test_cli_examples.py.)
"""

import json
import os

import numpy as np
import pytest

from dapo_rllib.cli.main import build_parser, main
from tests.support.rllib_command import FAST_EVAL, IN_PROCESS, TENSORBOARD_TAGS, TINY, rllib, run_ok, scalar_tags
from tests.support.runs import ONE_STEP


@pytest.fixture(scope="module")
def dapo_run(tiny_model_path, tmp_path_factory):
    """`rllib train file <tiny example> --no-tune` for 2 iterations, a checkpoint after each, the engine in the
    command's process."""
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
        json.dumps(FAST_EVAL | IN_PROCESS),
        "--name",
        "tiny",
        "--num-cpus",
        "2",
        cwd=work,
    )
    return dict(out=out, run_dir=work / "runs" / "tiny")


def test_help_lists_the_subcommands(capsys):
    for args, names in (
        (["--help"], ("train", "evaluate", "export", "doctor", "plot")),
        (["train", "--help"], ("file",)),
    ):
        with pytest.raises(SystemExit) as exit:
            main(args)
        assert exit.value.code == 0
        out = capsys.readouterr().out
        assert all(name in out for name in names), out


def test_every_path_typed_is_made_absolute_and_names_are_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "run" / "checkpoint_000002").mkdir(parents=True)
    (tmp_path / "test.parquet").touch()
    parser = build_parser()
    evaluate = parser.parse_args(
        ["evaluate", "runs/run/checkpoint_000002", "--data", "test.parquet", "--out", "r.json"]
    )
    assert (evaluate.model, evaluate.data, evaluate.out) == (
        str(tmp_path / "runs" / "run" / "checkpoint_000002"),
        str(tmp_path / "test.parquet"),
        str(tmp_path / "r.json"),
    )
    export = parser.parse_args(["export", "runs/run/checkpoint_000002", "my_model/"])
    assert export.out_dir == str(tmp_path / "my_model")
    # Names that are no paths here stay names; URIs stay URIs.
    named = parser.parse_args(["evaluate", "smollm2-135m-instruct", "--data", "arithmetic"])
    assert (named.model, named.data) == ("smollm2-135m-instruct", "arithmetic")
    train = parser.parse_args(["train", "file", "f.py", "--storage-path", "s3://b/runs", "--restore", "ck"])
    assert (train.storage_path, train.restore) == ("s3://b/runs", "ck")


@pytest.mark.engine  # an `rllib` process: Ray's and vLLM's imports, 10-20 s
def test_a_run_that_fails_before_writing_leaves_no_run_directory(tmp_path):
    (tmp_path / "bad_model.py").write_text(
        "import dapo_rllib  # noqa: F401\n"
        "from dapo_rllib.algorithm.dapo import DAPOConfig\n\n"
        "config = DAPOConfig().training(model_path='no_such_model')\n"
    )
    stop = '{"training_iteration": 1}'
    code, out = rllib("train", "file", "bad_model.py", "--no-tune", "--stop", stop, "--name", "bad", cwd=tmp_path)
    assert code == 2 and "model_path='no_such_model' is not a Hugging Face model directory" in out, out[-3000:]
    assert (tmp_path / "runs").is_dir() and not (tmp_path / "runs" / "bad").exists()


@pytest.mark.engine  # an `rllib` process: Ray's and vLLM's imports, 10-20 s
def test_a_module_in_the_current_directory_imports_as_in_rays_workers(tmp_path):
    """A scorer next to the config file (`scorer="my_scorers:judge"`) is found by the driver as by the env runners."""
    (tmp_path / "my_scorers.py").write_text("def judge(response, ground_truth):\n    return {}\n")
    (tmp_path / "uses_it.py").write_text("from my_scorers import judge  # noqa: F401\n")
    code, out = rllib("train", "file", "uses_it.py", cwd=tmp_path)
    assert code == 2 and "must define an AlgorithmConfig named `config`" in out, out[-3000:]


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
# (tests/algorithm/test_family_training.py trains each of them in process).
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
        json.dumps(FAST_EVAL | IN_PROCESS),
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


def test_plot_renders_a_non_blank_png_from_a_real_run(dapo_run, tmp_path):
    from PIL import Image

    out = tmp_path / "curves.png"
    assert f"plot: {out}" in run_ok("plot", dapo_run["run_dir"], "--out", out, cwd=tmp_path)
    with Image.open(out) as image:
        assert image.format == "PNG"
        pixels = np.asarray(image.convert("RGB"))
    assert pixels.shape == (1600, 1500, 3)  # 4 rows x 3 panels of 500 x 400 pixels (11 panels, PANELS)
    # Lines in several colours on a white background, not a blank canvas.
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50
    assert (pixels < 200).any(axis=-1).mean() > 0.01


def test_evaluate_a_checkpoint_on_another_dataset(dapo_run, tmp_path):
    from dapo_rllib.tasks.data import generate_arithmetic_problems, problem_to_row, write_jsonl

    data = tmp_path / "eval.jsonl"
    # Each problem three times: a model directory would get n = 3, a checkpoint its run's n.
    write_jsonl(3 * list(map(problem_to_row, generate_arithmetic_problems("test", 6))), data)
    results = tmp_path / "results.json"
    # Every path relative, from another directory than the run's, as the README's command types them.
    checkpoint = os.path.relpath(dapo_run["run_dir"] / "checkpoint_000002", tmp_path)
    out = run_ok(
        "evaluate", checkpoint, "--data", "eval.jsonl", "--temperature", "0.9", "--out", "results.json", cwd=tmp_path
    )
    # The run's validation settings (FAST_EVAL's 2 samples, the tiny example's 32-token responses), said so.
    assert (
        "settings of the checkpoint's run: 2 samples per problem (--num-samples), "
        "responses up to 32 tokens (--max-response-length), top_p 0.7 (--top-p)"
    ) in out
    assert "avg@2" in out and "maj@2" in out and f"results (every number, per problem too): {results}" in out
    report = json.loads(results.read_text())
    metrics = report["metrics"]["arithmetic"]
    assert (metrics["num_problems"], metrics["num_samples"]) == (6, 12)
    assert 0.0 <= metrics["avg@2"] <= metrics["pass@2"] <= 1.0
    settings = report["settings"]
    assert (settings["num_samples"], settings["max_response_length"], settings["temperature"]) == (2, 32, 0.9)
    assert [p["num_samples"] for p in report["problems"]] == [2] * 6
    assert metrics["avg@2"] == pytest.approx(np.mean([p["accuracy"] for p in report["problems"]]))


def test_export_writes_a_model_that_transformers_and_vllm_load(dapo_run, tmp_path, tiny_model_path):
    from ray.rllib.core.rl_module.rl_module import RLModule
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm import LLM, SamplingParams

    from dapo_rllib.algorithm.checkpoints import policy_module_path
    from dapo_rllib.rollout.vllm_engine import release_startup_objects

    out_dir = tmp_path / "hf"
    run_ok("export", os.path.relpath(dapo_run["run_dir"] / "checkpoint_000002", tmp_path), "hf", cwd=tmp_path)
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
