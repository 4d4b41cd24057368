"""A killed env runner, through RLlib's loop: with restarts allowed it costs nothing (the step
completes with all its groups, each sampled once, the replacement gets the current weights and
the data continues where it was; one killed between steps is back, with the current weights,
after the next step); without, the run stops with the runner's name, even where RLlib is told to ignore
failed runners."""

import collections
import gc
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from dapo_rllib.columns import Metrics
from dapo_rllib.models.rl_module import hf_weights
from tests.support.runs import CHECKED, learner_weights, tiny_config, unpadded
from tests.support.stalling_env import KILL_WAIT_S, StallingMathEnv

# train_batch_size_prompts = gen_batch_size_prompts and no dynamic sampling: one round per
# step, so every problem drawn is trained on and the draw order advances by TRAIN_PROMPTS.
TRAIN_PROMPTS = 8
NUM_PROBLEMS = 40  # generated problems, so that two steps stay inside the first epoch


def scored_by_process(log_dir: Path) -> dict[int, list[int]]:
    """{pid: problem indices it scored, in order: one per episode}."""
    scored = collections.defaultdict(list)
    for line in (log_dir / "scored").read_text().splitlines():
        pid, _, index = map(int, line.split())
        scored[pid].append(index)
    return scored


def kill_victim_when_it_stalls(log_dir: Path) -> threading.Thread:
    def kill() -> None:
        victim_file = log_dir / "victim"
        deadline = time.monotonic() + KILL_WAIT_S
        while not victim_file.exists() or not victim_file.read_text():
            assert time.monotonic() < deadline, "the victim env runner never stalled"
            time.sleep(0.2)
        os.kill(int(victim_file.read_text()), signal.SIGKILL)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def stalling_config(tiny_model_path, log_dir: Path, *, restart: bool):
    config = tiny_config(
        tiny_model_path,
        train_batch_size_prompts=TRAIN_PROMPTS,
        gen_batch_size_prompts=TRAIN_PROMPTS,
        dynamic_sampling=False,
        minibatch_size_prompts=TRAIN_PROMPTS,
    )
    env_config = {"dataset": "arithmetic", "num_problems": NUM_PROBLEMS, "_log_dir": str(log_dir), "_victim": 2}
    config = config.environment(StallingMathEnv, env_config=env_config)
    # Half a CPU each: the session has two, and a restarted runner must find room.
    config = config.env_runners(num_env_runners=2, num_cpus_per_env_runner=0.5)
    # Ray restarts a dead runner at once; DAPO waits (up to the restore timeout) for its new
    # vLLM engine before the next step samples.
    return config.fault_tolerance(
        restart_failed_env_runners=restart,
        delay_between_env_runner_restarts_s=0.0,
        env_runner_restore_timeout_s=KILL_WAIT_S,
    )


@pytest.fixture(scope="module")
def restarting(ray_session, tiny_model_path, tmp_path_factory):
    """(algorithm with restarts, its env's log directory), shared by the tests that kill a runner."""
    log_dir = tmp_path_factory.mktemp("fault_tolerance")
    algo = stalling_config(tiny_model_path, log_dir, restart=True).build_algo()
    yield algo, log_dir
    algo.stop()


def runner_pids(algo) -> dict[int, int]:
    """{env runner index: pid} of the runners in service."""
    pids = algo.env_runner_group.foreach_env_runner(lambda er: (er.worker_index, os.getpid()), local_env_runner=False)
    return dict(pids)


def assert_engine_holds_learner_weights(algo, env_runner_index: int) -> None:
    (engine,) = algo.env_runner_group.foreach_env_runner(
        lambda er: er.engine_parameters(CHECKED), local_env_runner=False, remote_worker_ids=[env_runner_index]
    )
    learner = hf_weights({f"model.{k}": v for k, v in learner_weights(algo).items()})
    for name in CHECKED:
        engine_param = unpadded(engine[name], learner[name])
        np.testing.assert_allclose(engine_param, learner[name], rtol=0, atol=1e-6, err_msg=name)


def test_a_killed_env_runner_is_replaced_and_the_step_loses_nothing(restarting):
    algo, log_dir = restarting
    killer = kill_victim_when_it_stalls(log_dir)
    first = algo.train()
    killer.join()
    victim = int((log_dir / "victim").read_text())

    # The step completed with all its groups: the victim's share was sampled again.
    rollout = first[Metrics.ROLLOUT]
    assert rollout[Metrics.ENV_RUNNERS_LOST] == 1
    assert rollout[Metrics.GROUPS_GENERATED] == rollout[Metrics.GROUPS_KEPT] == TRAIN_PROMPTS
    assert first["env_runners"]["num_env_steps_sampled"] == TRAIN_PROMPTS * algo.config.group_size
    scored = scored_by_process(log_dir)
    # Each problem of the step was sampled once, on one surviving runner: its group's episodes scored once each.
    survivors = collections.Counter(index for pid, indices in scored.items() if pid != victim for index in indices)
    assert set(survivors.values()) == {algo.config.group_size}, "a problem was sampled twice"
    assert set(scored[victim]) <= set(survivors), "the dead runner's share was not sampled again"
    assert len(survivors) == TRAIN_PROMPTS

    # Ray restarted it; RLlib's hook before each step (restore_env_runners) waits for it and
    # streams in the learner's current weights before it samples.
    assert algo.restore_env_runners(algo.env_runner_group) == [2]
    assert sorted(algo.env_runner_group.healthy_worker_ids()) == [1, 2]
    assert_engine_holds_learner_weights(algo, 2)

    # The next step uses both runners and continues the epoch: no problem comes twice.
    second = algo.train()
    assert second[Metrics.ROLLOUT][Metrics.ENV_RUNNERS_LOST] == 0
    pids_of_step_one = set(scored)
    scored = scored_by_process(log_dir)
    assert set(scored) - pids_of_step_one, "the replacement env runner did not sample"
    everything = collections.Counter(index for pid, indices in scored.items() if pid != victim for index in indices)
    assert len(everything) == 2 * TRAIN_PROMPTS
    assert set(everything.values()) == {algo.config.group_size}, "a problem came twice within the epoch"


def test_an_env_runner_killed_between_steps_is_back_after_the_next_step(restarting):
    """Issue 21: SIGKILL a runner after a step; after the next `train()` both runners are in
    service again, one of them a new process that sampled in that step and holds the learner's
    current weights."""
    algo, log_dir = restarting
    (log_dir / "victim").touch()  # no stalling runner here (after the test above, there is none)
    algo.train()
    before = runner_pids(algo)
    assert sorted(before) == [1, 2]
    os.kill(before[1], signal.SIGKILL)

    result = algo.train()

    after = runner_pids(algo)
    assert sorted(algo.env_runner_group.healthy_worker_ids()) == [1, 2]
    assert after[2] == before[2] and after[1] != before[1], (before, after)
    # Found dead and waited for before the step sampled: nothing to sample again, all groups.
    rollout = result[Metrics.ROLLOUT]
    assert rollout[Metrics.ENV_RUNNERS_LOST] == 0
    assert rollout[Metrics.GROUPS_GENERATED] == rollout[Metrics.GROUPS_KEPT] == TRAIN_PROMPTS
    assert scored_by_process(log_dir)[after[1]], "the new env runner did not sample in the step"
    assert_engine_holds_learner_weights(algo, 1)


def test_a_killed_env_runner_comes_back_without_the_object_store(restarting):
    """Ray restarts a dead env runner by running its constructor again with the arguments it was
    created with, and does not keep an object-store argument alive for that (ray-project/ray#53727).
    The runners got theirs by value (`ByValueEnvRunnerGroup`): with the last reference to RLlib's
    copy of the config in the object store dropped (the one it would have passed by reference, so
    Ray deletes it), a killed runner still comes back."""
    algo, log_dir = restarting
    (log_dir / "victim").touch()  # no stalling runner here
    group = algo.env_runner_group
    group._remote_config_obj_ref = None
    gc.collect()
    before = runner_pids(algo)
    os.kill(before[2], signal.SIGKILL)

    assert algo.restore_env_runners(group) == [2]
    after = runner_pids(algo)
    assert sorted(after) == [1, 2] and after[2] != before[2], (before, after)
    assert_engine_holds_learner_weights(algo, 2)


def test_without_restarts_a_killed_env_runner_stops_the_run_with_its_name(ray_session, tiny_model_path, tmp_path):
    # Even where RLlib is told to go on without failed runners: it would sample the step with one runner fewer.
    config = stalling_config(tiny_model_path, tmp_path, restart=False).fault_tolerance(ignore_env_runner_failures=True)
    algo = config.build_algo()
    try:
        kill_victim_when_it_stalls(tmp_path)
        with pytest.raises(RuntimeError, match=r"env runner\(s\) \[2\] did not answer"):
            algo.train()
    finally:
        algo.stop()
