"""When an environment fails: its calls off the generation thread with a deadline (`EnvCalls`), the failure
that ends an episode (`EnvFailure`), and DAPO's real loop leaving the failed groups out, counting them, drawing
others in their place, and stopping past `max_env_error_rate`."""

from __future__ import annotations

import pickle
import threading
import time

import pytest

from dapo_rllib.columns import Metrics
from dapo_rllib.rollout.env_calls import EnvCalls
from dapo_rllib.tasks.env_failures import RAISED, SERVER_DOWN, TIMEOUT, EnvFailure
from tests.support.failing_env import NEVER, FailingMathEnv
from tests.support.runs import tiny_config


def test_env_calls_return_results_in_order_and_failures_in_place():
    def call(x):
        if x == 1:
            raise KeyError("no such move")
        if x == 2:
            raise EnvFailure(SERVER_DOWN, "connection refused")
        return x * 10

    results = EnvCalls(max_concurrent=4, timeout_s=5).map(call, [0, 1, 2, 3])
    assert results[0] == 0 and results[3] == 30
    assert (results[1].kind, str(results[1])) == (RAISED, "KeyError: 'no such move'")
    assert (results[2].kind, str(results[2])) == (SERVER_DOWN, "connection refused")


def test_a_call_that_never_returns_times_out_without_holding_up_the_others():
    # Two calls hang for ever and the pool has room for two at once: the other four still run, once the hung
    # ones have been given up on at their deadline.
    def call(x):
        if x < 2:
            NEVER.wait()
        return x

    start = time.monotonic()
    results = EnvCalls(max_concurrent=2, timeout_s=0.5).map(call, range(6))
    elapsed = time.monotonic() - start
    assert [r.kind for r in results[:2]] == [TIMEOUT, TIMEOUT]
    assert "env_timeout_s=0.5" in str(results[0])
    assert results[2:] == [2, 3, 4, 5]
    assert elapsed < 3.0  # 0.5 s deadline + the fast calls; a wait for the hung calls would never end


def test_env_calls_run_at_most_max_concurrent_at_once_and_overlap_up_to_it():
    running, most = 0, 0
    lock = threading.Lock()

    def call(x):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.2)
        with lock:
            running -= 1
        return x

    start = time.monotonic()
    assert EnvCalls(max_concurrent=3, timeout_s=5).map(call, range(9)) == list(range(9))
    assert most == 3
    assert time.monotonic() - start < 1.2  # 3 waves of 0.2 s; one at a time would take 1.8 s


def test_an_env_failure_keeps_its_kind_across_processes_and_refuses_a_bad_kind():
    failure = pickle.loads(pickle.dumps(EnvFailure(SERVER_DOWN, "connection refused")))
    assert (failure.kind, str(failure)) == (SERVER_DOWN, "connection refused")
    with pytest.raises(ValueError, match="'Server Down' must be a snake_case word"):
        EnvFailure("Server Down", "x")


def failing_config(model_path, **env_config):
    # env_timeout_s: a step waits for the scoring process behind the others running (up to 16), a few seconds
    # on a busy machine; a hung step costs this much.
    return tiny_config(model_path, dynamic_sampling=False, env_timeout_s=10.0, max_env_error_rate=0.5).environment(
        FailingMathEnv, env_config={"num_problems": 64, "shuffle": False, **env_config}
    )


def test_failed_groups_are_left_out_counted_and_replaced(ray_session, tiny_model_path, caplog):
    # Problems in dataset order: the first round draws problems 0-7; problem 1's step raises, problem 2's
    # never returns. Their two groups are left out and problems 8 and 9 are drawn in their place.
    algo = failing_config(tiny_model_path, _raise_on=[1], _hang_on=[2]).build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    rollout = result[Metrics.ROLLOUT]
    errors = rollout[Metrics.ENV_ERRORS]
    assert errors[RAISED] == 4 and errors[TIMEOUT] == 4  # group_size 4 each
    assert errors[SERVER_DOWN] == 0
    assert rollout[Metrics.GROUPS_DROPPED_ENV_ERROR] == 2
    assert rollout[Metrics.GROUPS_GENERATED] == 10 and rollout[Metrics.GROUPS_KEPT] == 8
    assert rollout[Metrics.GENERATION_ROUNDS] == 2
    assert "left out 2 group(s) whose environment failed (raised x4, timeout x4" in caplog.text


def test_a_run_stops_naming_the_failures_past_the_error_rate(ray_session, tiny_model_path):
    algo = failing_config(tiny_model_path, _raise_on=range(64)).build_algo()
    try:
        with pytest.raises(
            RuntimeError,
            match=r"failed in \d+ of the step's \d+ episodes \(100%\), past "
            r"max_env_error_rate=0.5 \(raised: \d+\); last failure: raised: ZeroDivisionError",
        ):
            algo.train()
    finally:
        algo.stop()
