"""Where a multi-turn step's time goes with a server-backed environment, against the same game in-process.

    python bench/env_server.py [--steps 8] [--smoke]

Two environments play the same guess-the-number game (envs/openenv_servers/guess_number.py, numbers 1 to 10)
through the same `OpenEnvEnv` code and adapter; only the transport differs:

    server      `dapo_openenv` with `server_command`: the game's OpenEnv server in its own process, one
                WebSocket session per episode, JSON both ways
    in_process  `OpenEnvEnv` whose session calls the server's `GuessNumberEnvironment` in this process (the
                payloads openenv-core's server would send, built by its own `serialize_observation`)

Part 1, calls alone: N episodes at once (1, 16, 64) each play games of a reset and 5 steps (guesses of 0,
outside 1..10, so that no game ends early), every call through `EnvCalls` as the turn loop makes them (at most
16 at once, each with the turn loop's deadline). Reported: reset and step calls per second over the whole run
(the episodes' `finish`, which closes the session, included in the time) and each kind's latency, p50 and p95.

Part 2, share of a training step: DAPO training steps of the tiny model on each environment (group_size 4,
8 prompts, up to 4 turns, one env runner actor), the first step not counted (it starts the server and warms
the engine up). From each result: the iteration time, `timing/generation_s`, `timing/scoring_s` (the
turn loop's environment steps that rated answers, and `finish`; a game's steps have no tool calls, so all
of its steps land there), the update and the weight sync. Resets are timed by no timer; they are in `other`
(the iteration less the timers).

The turn loop runs a turn's environment steps after that turn's generation of every running episode, so
`scoring_s` is all on the step's critical path: overlapping the next turn's generation of other episodes with
these calls could save at most `scoring_s` a step (and no more than the generation they would hide behind).

A full run writes bench/results/env_server.json and env_server.md; `--smoke` (CI) runs every part briefly
(one setting of part 1, one short step each in part 2) and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import ray
from openenv.core.env_server import serialize_observation
from ray.tune.registry import register_env

import dapo_rllib  # noqa: F401  (registers DAPO and the environments; vLLM's environment defaults)
from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.columns import Info, Metrics, tag
from dapo_rllib.models.tiny.cache import ensure_tiny_model
from dapo_rllib.reporting.tensorboard import readable_scalars
from dapo_rllib.rollout.env_calls import EnvCalls
from dapo_rllib.rollout.turn_loop import ENV_STEP_THREADS, TurnSettings
from dapo_rllib.tasks.env_failures import EnvFailure
from dapo_rllib.tasks.problem_env import ProblemEnv
from envs.openenv_env import OpenEnvEnv
from envs.openenv_servers.guess_number import GuessAction, GuessNumberEnvironment

RESULTS = Path(__file__).resolve().parent / "results"
MAX_NUMBER = 10
SERVER_COMMAND = [
    sys.executable,
    *("-m", "envs.openenv_servers.guess_number", "--port", "{port}", "--max-number", str(MAX_NUMBER)),
]
# The server's start is not measured; on a busy machine importing openenv-core can take past the default 60 s.
SERVER_CONFIG = {"server_command": SERVER_COMMAND, "startup_timeout_s": 300.0}
IN_PROCESS_ENV = "bench_guess_number_in_process"
NUM_PROBLEMS = 40
GUESSES_PER_GAME = 5
WRONG_GUESS = "My guess: [0]"  # below every secret: the game answers "Higher: ..." and goes on
CONCURRENT_EPISODES = (1, 16, 64)
# Reset and step calls per setting of part 1: enough for stable percentiles, a few seconds per setting.
CALLS_PER_SETTING = 1536
PROMPTS, SMOKE_PROMPTS = 8, 2  # prompts a training step (of group_size 4 episodes each)

# Each timer of part 2 and its TensorBoard tag, in the order of a step.
TIMERS = {
    name: tag(Metrics.TIMING, name)
    for name in (Metrics.GENERATION_S, Metrics.TOOL_S, Metrics.SCORING_S, Metrics.UPDATE_S, Metrics.WEIGHT_SYNC_S)
}
ITERATION = tag(Metrics.TIMING, Metrics.ITERATION_S)
TURNS = tag(Metrics.ROLLOUT, Metrics.TURNS_MEAN)


# ----- the in-process twin of the server ---------------------------------------------------------------
class InProcessSession:
    """`ServerSession`'s reset/step on a `GuessNumberEnvironment` in this process: the payloads the server
    would answer, without the socket and the JSON."""

    def __init__(self):
        self._game = GuessNumberEnvironment(max_number=MAX_NUMBER)

    def reset(self, **kwargs: Any) -> dict[str, Any]:
        return serialize_observation(self._game.reset(**kwargs))

    def step(self, action: dict[str, Any]) -> dict[str, Any]:
        return serialize_observation(self._game.step(GuessAction.model_validate(action)))

    def close(self) -> None:
        """Nothing to close: the game is garbage once the episode drops it."""


class InProcessGuessEnv(OpenEnvEnv):
    """`dapo_openenv` with its session played in this process: the same problems, adapter and observation
    checks as on the server. OpenEnvEnv's config needs a server; the `url` given is never contacted."""

    def __init__(self, config: dict[str, Any] | None = None):
        super().__init__({**(config or {}), "url": "http://127.0.0.1:9"})

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        # OpenEnvEnv.reset, with an in-process session where it opens a WebSocket one.
        self._end_episode()
        _, info = ProblemEnv.reset(self, seed=seed, options=options)
        game = self._problems[info[Info.PROBLEM_INDEX]]
        self._session = InProcessSession()
        self._observation = self._play(lambda session: session.reset(**game.reset_kwargs))
        return self._adapter.messages(self._observation), info


def make_env(kind: str) -> OpenEnvEnv:
    config = {"num_problems": NUM_PROBLEMS}
    if kind == "server":
        return OpenEnvEnv({**config, **SERVER_CONFIG})
    return InProcessGuessEnv(config)


# ----- part 1: calls alone ----------------------------------------------------------------------------
def timed(latencies: list[float], call: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`call`, appending each call's seconds to `latencies` (list.append is atomic: the calls run on threads)."""

    def run(item):
        start = time.perf_counter()
        result = call(item)
        latencies.append(time.perf_counter() - start)
        return result

    return run


def all_succeeded(results: Sequence[Any]) -> None:
    failures = [r for r in results if isinstance(r, EnvFailure)]
    if failures:
        raise RuntimeError(f"{len(failures)} of {len(results)} environment calls failed, the first: {failures[0]}")


def start_game(game: int) -> Callable[[tuple[int, OpenEnvEnv]], Any]:
    """The reset of twin k for game `game`: each twin a different problem, each game the next one."""
    return lambda item: item[1].reset(options={Info.PROBLEM_INDEX: (game + item[0]) % NUM_PROBLEMS})


def play_games(env: OpenEnvEnv, episodes: int, games: int) -> dict[str, Any]:
    """`episodes` twins play `games` games each, side by side, every call through EnvCalls: calls/s and
    latencies of the resets and steps."""
    calls = EnvCalls(ENV_STEP_THREADS, TurnSettings().env_timeout_s)
    twins = list(enumerate(env.spawn() for _ in range(episodes)))
    resets, steps = [], []
    start = time.perf_counter()
    for game in range(games):
        all_succeeded(calls.map(timed(resets, start_game(game)), twins))
        for _ in range(GUESSES_PER_GAME):
            all_succeeded(calls.map(timed(steps, lambda item: item[1].step(WRONG_GUESS)), twins))
        all_succeeded(calls.map(lambda item: item[1].finish(), twins))
    seconds = time.perf_counter() - start
    return {
        "episodes": episodes,
        "games": games * episodes,
        "calls": len(resets) + len(steps),
        "seconds": seconds,
        "calls_per_s": (len(resets) + len(steps)) / seconds,
        **percentiles_ms("reset", resets),
        **percentiles_ms("step", steps),
    }


def percentiles_ms(kind: str, seconds: list[float]) -> dict[str, float]:
    p50, p95 = np.percentile(np.array(seconds) * 1000, [50, 95])
    return {f"{kind}_p50_ms": float(p50), f"{kind}_p95_ms": float(p95)}


def measure_calls(smoke: bool) -> list[dict[str, Any]]:
    settings = CONCURRENT_EPISODES[1:2] if smoke else CONCURRENT_EPISODES
    calls_per_game = 1 + GUESSES_PER_GAME
    rows = []
    print(f"{'env':>10} {'episodes':>8} {'calls/s':>8} {'reset p50/p95 ms':>17} {'step p50/p95 ms':>16}")
    for kind in ("server", "in_process"):
        env = make_env(kind)
        if kind == "server":
            print(f"starting the server: {' '.join(SERVER_COMMAND)}", flush=True)
            env.server_url  # started here, not in the first measured reset
        for episodes in settings:
            games = 1 if smoke else max(1, CALLS_PER_SETTING // (episodes * calls_per_game))
            row = {"env": kind, **play_games(env, episodes, games)}
            rows.append(row)
            print(
                f"{kind:>10} {episodes:>8} {row['calls_per_s']:>8.0f} "
                f"{row['reset_p50_ms']:>8.2f}/{row['reset_p95_ms']:<8.2f} {row['step_p50_ms']:>7.2f}/{row['step_p95_ms']:<8.2f}",
                flush=True,
            )
        env.close()
    return rows


# ----- part 2: share of a training step ---------------------------------------------------------------
def training_config(kind: str, smoke: bool) -> DAPOConfig:
    """Multi-turn DAPO steps of the tiny model on the game: a realistic batch, every group trained."""
    prompts = SMOKE_PROMPTS if smoke else PROMPTS
    env_name, env_config = ("dapo_openenv", SERVER_CONFIG) if kind == "server" else (IN_PROCESS_ENV, {})
    return (
        DAPOConfig()
        .training(
            model_path=str(ensure_tiny_model()),
            group_size=4,
            train_batch_size_prompts=prompts,
            gen_batch_size_prompts=prompts,
            minibatch_size_prompts=min(4, prompts),
            max_turns=4,
            max_prompt_length=128,
            max_response_length=128,
            overlong_buffer_len=0,
            dynamic_sampling=False,
            lr=3e-4,
        )
        .environment(env_name, env_config={**env_config, "num_problems": NUM_PROBLEMS})
        .env_runners(num_env_runners=1)
        .evaluation(val_before_train=False)
        .debugging(seed=0)
    )


def step_timings(kind: str, steps: int, smoke: bool) -> list[dict[str, float]]:
    """Each training step's timers (the first, warm-up step left out unless smoke runs just one)."""
    print(f"{kind}: building the algorithm", flush=True)
    algo = training_config(kind, smoke).build_algo()
    rows = []
    try:
        for step in range(0 if smoke else -1, steps):
            scalars = readable_scalars(algo.train())
            row = {"iteration_s": scalars[ITERATION], **{n: scalars.get(t, 0.0) for n, t in TIMERS.items()}}
            row["other_s"] = row["iteration_s"] - sum(row[n] for n in TIMERS)
            row["turns_mean"] = scalars[TURNS]
            print(
                f"{kind:>10} step {step + 1 if step >= 0 else 'warm-up'}: "
                + " ".join(f"{name} {value:.2f}" for name, value in row.items()),
                flush=True,
            )
            if step >= 0:
                rows.append(row)
    finally:
        algo.stop()
    return rows


def step_summary(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each timer's mean over the steps; the environment steps' share of the iteration and of the rollout (the
    update's time swings with the machine's load, the rollout's less); and the most that overlapping the next
    turn's generation with them could save: they cannot hide behind more generation than there is."""
    mean = {name: float(np.mean([r[name] for r in rows])) for name in rows[0]}
    env_s = mean[Metrics.SCORING_S] + mean[Metrics.TOOL_S]
    mean["env_share"] = env_s / mean["iteration_s"]
    mean["env_share_of_rollout"] = env_s / (env_s + mean[Metrics.GENERATION_S])
    mean["overlap_saves_at_most_s"] = min(env_s, mean[Metrics.GENERATION_S])
    return mean


# ----- the report ---------------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")), "unknown")
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "load_avg_1m": os.getloadavg()[0]}


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def markdown(calls: list[dict], steps: dict[str, dict[str, float]], setup: dict[str, Any]) -> str:
    lines = [
        "Environment calls alone, through `EnvCalls` (reset + 5 steps a game):",
        "",
        "| environment | episodes at once | calls/s | reset p50 / p95 ms | step p50 / p95 ms |",
        "|---|---|---|---|---|",
    ]
    for r in calls:
        lines.append(
            f"| {r['env']} | {r['episodes']} | {r['calls_per_s']:.0f} | {r['reset_p50_ms']:.2f} / "
            f"{r['reset_p95_ms']:.2f} | {r['step_p50_ms']:.2f} / {r['step_p95_ms']:.2f} |"
        )
    lines += [
        "",
        f"Training steps of the tiny model (group_size 4, {setup['prompts']} prompts, up to 4 turns), mean of "
        f"{setup['steps']} steps{'' if setup['smoke'] else ' after a warm-up step'}, seconds:",
        "",
        "| environment | iteration | generation | env steps (scoring_s) | update | weight sync | other | "
        "env share of iteration | of rollout | turns/episode |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, s in steps.items():
        lines.append(
            f"| {kind} | {s['iteration_s']:.2f} | {s[Metrics.GENERATION_S]:.2f} | {s[Metrics.SCORING_S]:.3f} | "
            f"{s[Metrics.UPDATE_S]:.2f} | {s[Metrics.WEIGHT_SYNC_S]:.2f} | {s['other_s']:.2f} | "
            f"{s['env_share']:.1%} | {s['env_share_of_rollout']:.1%} | {s['turns_mean']:.2f} |"
        )
    m = setup["machine"]
    lines += [
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, CPU only; load average (1 min) {m['load_avg_1m']:.1f} at the "
        f"start, {setup['load_avg_1m_after']:.1f} at the end.",
    ]
    return "\n".join(lines) + "\n"


def overlap_bound(steps: dict[str, dict[str, float]]) -> str:
    return "; ".join(
        f"{kind}: at most {s['overlap_saves_at_most_s']:.3f} s of {s['iteration_s']:.2f} s a step "
        f"({s['overlap_saves_at_most_s'] / s['iteration_s']:.1%})"
        for kind, s in steps.items()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="training steps measured per environment")
    parser.add_argument("--smoke", action="store_true", help="each part briefly, nothing written (CI)")
    args = parser.parse_args()
    setup = {
        "machine": machine(),
        "steps": 1 if args.smoke else args.steps,
        "prompts": SMOKE_PROMPTS if args.smoke else PROMPTS,
        "smoke": args.smoke,
    }

    print("part 1: environment calls alone", flush=True)
    calls = measure_calls(args.smoke)

    print("part 2: training steps", flush=True)
    # A cluster of its own (address="local"), not one that another job on this machine started.
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    register_env(IN_PROCESS_ENV, InProcessGuessEnv)
    steps = {kind: step_summary(step_timings(kind, setup["steps"], args.smoke)) for kind in ("server", "in_process")}
    ray.shutdown()
    setup["load_avg_1m_after"] = os.getloadavg()[0]

    print(markdown(calls, steps, setup))
    print(f"overlapping the next turn's generation with the environment steps could save: {overlap_bound(steps)}")
    if not args.smoke:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "env_server.json").write_text(json.dumps({"setup": setup, "calls": calls, "steps": steps}, indent=1))
        (RESULTS / "env_server.md").write_text(markdown(calls, steps, setup))
        print(f"wrote {RESULTS / 'env_server.json'} and env_server.md")


if __name__ == "__main__":
    main()
