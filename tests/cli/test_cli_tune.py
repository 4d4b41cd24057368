"""The `rllib` command's Ray Tune experiments, in subprocesses: PPO on CartPole (RLlib's own algorithm through
this command), a storage URI, and the sweep example's grid, shared by the tests of its trial table,
TensorBoard files and plots."""

import json

import pytest

from tests.support.rllib_command import FAST_EVAL, IN_PROCESS, PPO, SWEEP, TENSORBOARD_TAGS, run_ok, scalar_tags

pytestmark = pytest.mark.engine  # each test starts Ray in an `rllib` process


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
        json.dumps(FAST_EVAL | {"group_size": 4} | IN_PROCESS),
        "--name",
        "sweep",
        "--num-cpus",
        "2",
        cwd=work,
        timeout=900,
    )
    return dict(out=out, run_dir=work / "runs" / "sweep")


def test_ppo_cartpole_trains_as_a_tune_experiment(tmp_path):
    out = run_ok(
        "train", "file", PPO, "--stop", '{"training_iteration": 1}', "--name", "ppo", "--num-cpus", "2", cwd=tmp_path
    )
    assert "iter   1 | return" in out
    checkpoints = list((tmp_path / "runs" / "ppo").glob("PPO_*/checkpoint_*"))
    assert len(checkpoints) == 1, out[-3000:]


def test_ppo_cartpole_trains_in_process_into_a_storage_uri_and_resumes_from_it(tmp_path):
    # file:// stands in for s3:// or gs://: the same pyarrow filesystem path, no credentials. One in-process run
    # (--no-tune) of iteration 1, then its restore for iteration 2: what a run without a storage URI checks too.
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
    assert "at iteration 1" in out and "iter   2 | return" in out
    assert (store / "ppo2" / "checkpoint_000002" / "rllib_checkpoint.json").is_file()
    trials = json.loads((store / "ppo2" / "trials.json").read_text())
    assert trials[0]["iterations"] == 2 and trials[0]["last"]["env_runners/episode_return_mean"] > 0


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


def test_plot_draws_every_trial_of_a_sweep(sweep_run):
    from dapo_rllib.reporting.plot import find_runs

    assert len(find_runs(sweep_run["run_dir"])) == 3
    assert (sweep_run["run_dir"] / "dapo_curves.png").is_file()
