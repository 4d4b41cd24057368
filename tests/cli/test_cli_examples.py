"""The code and tool tuned examples through the `rllib` command, in subprocesses, and `rllib data convert`."""

import json

import pytest

from tests.support.rllib_command import CODE, IN_PROCESS, ONE_ROUND, TOOL, rllib, run_ok, scalar_tags

pytestmark = pytest.mark.engine  # each test runs an `rllib` process with a model


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
        json.dumps(ONE_ROUND | IN_PROCESS),
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
