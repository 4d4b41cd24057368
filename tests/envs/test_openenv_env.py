"""`dapo_openenv` against real OpenEnv server processes on 127.0.0.1: the guess-the-number server of
envs/openenv_servers/guess_number.py, started by the environment (`server_command`) or reached by URL.

Games: numbers 1 to 10; the secret of seed s is `random.Random(s).randint(1, 10)` (seed 3: 4, seed 0: 7).
A server takes about 7 s to start here (importing openenv-core), so servers are shared by module fixtures and
each test that needs a server of its own says why.

The helpers (`guess_command`, `kill_server`, `unused_url`) are for other tests too: a training run whose server is
killed mid-run, for one.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from dapo_rllib.columns import Metrics
from dapo_rllib.tasks.env_failures import MALFORMED, SERVER_DOWN, EnvFailure
from envs.openenv_env import OpenEnvEnv
from envs.openenv_servers import launcher
from envs.openenv_servers.guess_number import GuessNumberAdapter, GuessObservation
from envs.openenv_servers.session import REQUEST_TIMEOUT
from tests.support.runs import SMALL_MULTI_TURN_STEPS, tiny_config

pytestmark = pytest.mark.engine  # the tests start environment server processes

RULES = (
    "I am thinking of a whole number from 1 to 10. Guess it: write your guess in square brackets, for example [5]. "
    "After each guess I tell you whether my number is higher or lower."
)


def guess_command(*options: str) -> list[str]:
    """The command line of a guess-the-number server of numbers 1 to 10, with more `options` (`--step-delay-s`)."""
    return [
        sys.executable,
        "-m",
        "envs.openenv_servers.guess_number",
        "--port",
        "{port}",
        "--max-number",
        "10",
        *options,
    ]


def kill_server(env: OpenEnvEnv) -> int:
    """SIGKILL the server process `env` started (it must be running), and wait until it is gone: its pid."""
    pid = env._server.pid
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)  # still there (or not yet reaped: then it is a zombie, which serves nothing)
        except ProcessLookupError:
            break
        if _zombie(pid):
            break
        time.sleep(0.05)
    return pid


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def unused_url() -> str:
    """The URL of a port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def play(env: OpenEnvEnv, problem_index: int, guesses: list[str]) -> list[tuple]:
    """A twin's episode of `problem_index` with these turns: the reset's messages, then each step's result."""
    twin = env.spawn()
    messages, _ = twin.reset(options={"problem_index": problem_index})
    return [messages] + [twin.step(guess) for guess in guesses]


@pytest.fixture(scope="module")
def env():
    env = OpenEnvEnv({"server_command": guess_command(), "num_problems": 8})
    yield env
    env.close()


def test_a_game_gives_hints_until_the_number_is_found(env):
    twin = env.spawn()
    messages, info = twin.reset(options={"problem_index": 3})
    assert messages == [{"role": "user", "content": RULES}]
    assert info == {
        "problem_index": 3,
        "ground_truth": "",
        "data_source": "openenv/guess_number",
        "epoch": 0,
        "tools": [],
    }
    lower = twin.step("My guess is [5], not [1]... well, [5] of 10")  # the last bracketed number
    assert lower[:4] == ([{"role": "user", "content": "Lower: my number is less than 5."}], 0.0, False, False)
    assert (lower[4]["score"], lower[4]["acc"], lower[4]["pred"]) == (-1.0, False, "5")
    no_guess = [{"role": "user", "content": "Write your guess in square brackets, for example [5]."}]
    assert twin.step("no idea")[:2] == (no_guess, 0.0)
    assert twin.step({"role": "assistant", "content": "[3]", "tool_calls": []})[0] == [
        {"role": "user", "content": "Higher: my number is more than 3."}
    ]
    found = twin.step("It is 4")  # no brackets: the last number
    assert found[:4] == ([], 1.0, True, False)
    assert (found[4]["acc"], found[4]["pred"], found[4]["data_source"]) == (True, "4", "openenv/guess_number")
    with pytest.raises(RuntimeError, match="without an active episode"):
        twin.step("[4]")


def test_finish_rates_the_last_guess_of_an_unfinished_game_as_wrong(env):
    twin = env.spawn()
    twin.reset(options={"problem_index": 0})
    twin.step("[9]")
    reward, info = twin.finish()
    assert (reward, info["acc"], info["pred"], info["score_timed_out"]) == (-1.0, False, "9", False)


def test_problem_i_is_seed_i_and_the_same_seed_is_the_same_game(env):
    assert env.problem(5).reset_kwargs == {"seed": 5}
    test_split = OpenEnvEnv({"server_command": guess_command(), "split": "test", "num_problems": 2})
    assert test_split.problem(1).reset_kwargs == {"seed": 1_000_000_001}
    guesses = ["[5]", "[8]", "[6]", "[7]"]  # seed 0's secret is 7
    first, second = play(env, 0, guesses), play(env, 0, guesses)
    assert first == second
    assert [step[0] for step in first[1:]] == [
        [{"role": "user", "content": "Higher: my number is more than 5."}],
        [{"role": "user", "content": "Lower: my number is less than 8."}],
        [{"role": "user", "content": "Higher: my number is more than 6."}],
        [],
    ]


def test_twins_play_at_once_each_its_own_game(env):
    # 16 episodes of two games on a pool, as the env runner steps them: each keeps its own game on the server.
    problems = [0, 3] * 8
    with ThreadPoolExecutor(8) as pool:
        games = list(pool.map(lambda i: play(env, i, ["[5]", "[6]", "[7]"] if i == 0 else ["[5]", "[4]"]), problems))
    # seed 0's secret is 7 (found at the third guess), seed 3's is 4 (at the second)
    ends = {(i, tuple(step[2] for step in game[1:])) for i, game in zip(problems, games)}
    assert ends == {(0, (False, False, True)), (3, (False, True))}


def test_url_mode_plays_on_a_server_already_running(env):
    by_url = OpenEnvEnv({"url": env.server_url, "num_problems": 8})
    assert play(by_url, 3, ["[4]"])[1][:3] == ([], 1.0, True)
    by_url.close()  # not its server: it keeps running
    assert play(env, 3, ["[4]"])[1][:3] == ([], 1.0, True)


def test_nothing_listening_at_the_url_is_server_down_at_once():
    env = OpenEnvEnv({"url": unused_url()})
    start = time.monotonic()
    with pytest.raises(EnvFailure, match="cannot reach") as failure:
        env.spawn().reset(options={"problem_index": 0})
    assert failure.value.kind == SERVER_DOWN
    assert time.monotonic() - start < 1.0  # 0.0003 s here: the connection is refused at once


def test_a_server_command_that_exits_is_server_down_naming_its_log():
    env = OpenEnvEnv({"server_command": [sys.executable, "-c", "import sys; sys.exit(3)", "{port}"]})
    start = time.monotonic()
    with pytest.raises(EnvFailure, match="exited with code 3 before answering") as failure:
        env.spawn().reset(options={"problem_index": 0})
    assert failure.value.kind == SERVER_DOWN and str(env._server.log_path) in str(failure.value)
    assert time.monotonic() - start < 5.0  # 0.2 s here: the time Python takes to start and exit


class BoardObservation(GuessObservation):
    board: list[list[str]]


class OtherGameAdapter:
    """An adapter of another game's observations, pointed at the guess-the-number server by mistake."""

    data_source = "openenv/other_game"
    observation_type = BoardObservation

    def messages(self, observation):
        return [{"role": "user", "content": str(observation.board)}]

    def action(self, text):
        return {"move": text}

    def outcome(self, observation):
        return {"score": -1.0, "acc": False, "pred": None}


def test_an_observation_the_adapter_cannot_read_is_malformed(env):
    wrong = OpenEnvEnv({"url": env.server_url, "adapter": OtherGameAdapter})
    with pytest.raises(EnvFailure, match="(?s)not a BoardObservation.*board.*Field required") as failure:
        wrong.spawn().reset(options={"problem_index": 0})
    assert failure.value.kind == MALFORMED


def test_a_server_that_does_not_speak_openenv_is_malformed():
    url = unused_url()
    port = url.rsplit(":", 1)[1]
    # Python's file server answers the WebSocket handshake on /ws with an HTTP error.
    plain = subprocess.Popen(
        [sys.executable, "-m", "http.server", port, "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(int(port))
        with pytest.raises(EnvFailure, match="does not speak OpenEnv's WebSocket protocol") as failure:
            OpenEnvEnv({"url": url}).spawn().reset(options={"problem_index": 0})
        assert failure.value.kind == MALFORMED
    finally:
        plain.kill()
        plain.wait()


def _wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port} after 10 s")


def test_a_slow_server_fails_the_step_within_the_request_timeout():
    env = OpenEnvEnv({"server_command": guess_command("--step-delay-s", "3"), "request_timeout_s": 1.0})
    try:
        twin = env.spawn()
        twin.reset(options={"problem_index": 0})
        start = time.monotonic()
        with pytest.raises(EnvFailure, match="no answer .* within 1.0 s") as failure:
            twin.step("[5]")
        assert failure.value.kind == REQUEST_TIMEOUT
        assert time.monotonic() - start < 2.0  # 1.00 s here
    finally:
        env.close()


def test_a_killed_server_fails_the_episode_in_flight_and_the_next_reset_restarts_it(caplog):
    env = OpenEnvEnv({"server_command": guess_command(), "num_problems": 8})  # its own: this test kills it
    try:
        twin = env.spawn()
        twin.reset(options={"problem_index": 3})
        killed = kill_server(env)
        with pytest.raises(EnvFailure) as failure:
            twin.step("[5]")
        assert failure.value.kind == SERVER_DOWN
        assert play(env, 3, ["[4]"])[1][:3] == ([], 1.0, True)
        assert env._server.pid != killed
        assert f"exited with code {-signal.SIGKILL}; starting another" in caplog.text
    finally:
        env.close()


def test_the_server_starts_at_the_first_reset_logs_to_a_file_and_stops_with_the_environment():
    env = OpenEnvEnv({"server_command": guess_command(), "num_problems": 8})
    assert env._server.pid is None  # building the environment (as the driver does) starts nothing
    play(env, 3, ["[4]"])
    pid, log = env._server.pid, env._server.log_path
    assert log.read_text().startswith("--- ") and "starting" in log.read_text()
    env.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_shared_server_is_one_process_and_whoever_comes_next_restarts_it_after_its_owner_left(tmp_path, monkeypatch):
    # The machine's record of shared servers, fresh: no earlier run's record decides which path the test takes.
    monkeypatch.setattr(launcher, "STATE_DIR", tmp_path / "openenv_state")
    command = guess_command("--max-sessions", "17")  # a command of this test's own: shared servers are per command
    owner = OpenEnvEnv({"server_command": command, "share_server": True})
    other = OpenEnvEnv({"server_command": command, "share_server": True})
    try:
        assert other.server_url == owner.server_url
        assert (owner._server.pid is None) != (other._server.pid is None)  # one of them started it
        first, second = (owner, other) if owner._server.pid else (other, owner)
        first.close()
        with pytest.raises(EnvFailure) as failure:
            play(second, 3, [])
        assert failure.value.kind == SERVER_DOWN
        assert play(second, 3, ["[4]"])[1][:3] == ([], 1.0, True)
        assert second._server.pid is not None
    finally:
        owner.close()
        other.close()


@pytest.mark.parametrize(
    "config, error",
    [
        ({}, "exactly one of 'server_command'"),
        ({"url": "http://127.0.0.1:1", "server_command": ["x", "{port}"]}, "exactly one of 'server_command'"),
        ({"server_command": ["python", "--port", "8000"]}, "with '{port}' where the port goes"),
        ({"server_command": "python -m server --port {port}"}, "expected a list of str"),
        ({"server_command": ["no-such-program-here", "{port}"]}, "program 'no-such-program-here' not found"),
        ({"url": "127.0.0.1:8000"}, "expected 'http://host:port'"),
        ({"url": "http://127.0.0.1:1", "share_server": True}, "applies to 'server_command' only"),
        (
            {"url": "http://127.0.0.1:1", "adapter": "envs.openenv_servers.guess_number"},
            "expected 'package.module:Class'",
        ),
        ({"url": "http://127.0.0.1:1", "adapter": "envs.openenv_servers.guess_number:Nope"}, "cannot be loaded"),
        ({"url": "http://127.0.0.1:1", "request_timeout_s": 0}, "'request_timeout_s'=0; expected a positive number"),
        ({"url": "http://127.0.0.1:1", "max_concurrent_requests": 0}, "'max_concurrent_requests'=0; expected a posi"),
        ({"url": "http://127.0.0.1:1", "split": "validation"}, "'split'='validation'"),
        ({"url": "http://127.0.0.1:1", "server_url": "x"}, r"unknown OpenEnvEnv config keys \['server_url'\]"),
    ],
)
def test_bad_config_is_refused_naming_the_setting(config, error):
    with pytest.raises((ValueError, TypeError), match=error):
        OpenEnvEnv(config)


def test_an_adapter_without_the_protocol_is_refused():
    with pytest.raises(TypeError, match="lacks .*'observation_type'"):
        OpenEnvEnv({"url": "http://127.0.0.1:1", "adapter": "envs.openenv_servers.guess_number:GuessAction"})


class KillingGuessAdapter(GuessNumberAdapter):
    """The guess-number adapter, which SIGKILLs the server `KILL_NEXT` holds before the next move it makes: a
    kill that lands mid-episode, between a reset and a step, in the env runner's own process."""

    def action(self, text: str):
        env = KILL_NEXT.pop() if KILL_NEXT else None
        if env is not None:
            kill_server(env)
        return super().action(text)


KILL_NEXT: list[OpenEnvEnv] = []


def test_dapo_trains_on_the_server_and_goes_on_when_it_is_killed_mid_run(ray_session, tiny_model_path, caplog):
    # max_env_error_rate: the kill fails every episode of the round it lands in.
    config = tiny_config(tiny_model_path, **SMALL_MULTI_TURN_STEPS, max_env_error_rate=0.9).environment(
        OpenEnvEnv,
        env_config={"server_command": guess_command(), "num_problems": 40, "adapter": KillingGuessAdapter},
    )
    algo = config.build_algo()
    env = algo.env_runner.env  # num_env_runners=0: the local env runner's, whose twins share its server
    try:
        result = algo.train()
        rollout = result[Metrics.ROLLOUT]
        # The tiny model seldom finds the number at once: most episodes are played over several turns.
        assert 1 < rollout[Metrics.TURNS_MEAN] <= rollout[Metrics.TURNS_MAX] <= 3
        assert rollout[Metrics.ENV_TOKENS_MEAN] > 0
        assert rollout[Metrics.ENV_ERRORS][SERVER_DOWN] == 0
        first_pid = env._server.pid

        KILL_NEXT.append(env)
        rollout = algo.train()[Metrics.ROLLOUT]
        # The round the kill landed in failed; its groups were replaced by a round on the restarted server.
        assert rollout[Metrics.ENV_ERRORS][SERVER_DOWN] >= 1 and rollout[Metrics.GROUPS_DROPPED_ENV_ERROR] >= 1
        assert rollout[Metrics.GROUPS_KEPT] == 4 and rollout[Metrics.GENERATION_ROUNDS] >= 2
        assert env._server.pid not in (None, first_pid)
        assert "whose environment failed (server_down" in caplog.text

        result = algo.train()
        assert result[Metrics.ROLLOUT][Metrics.ENV_ERRORS][SERVER_DOWN] == 0
        assert np.isfinite(result["learners"]["default_policy"][Metrics.POLICY_LOSS])
    finally:
        algo.stop()
