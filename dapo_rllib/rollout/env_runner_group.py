"""Calls on DAPO's env runners: fan-out, answers checked, lost runners retried or named.

RLlib's `EnvRunnerGroup.foreach_env_runner` marks a runner that died unhealthy and leaves it out
of the results: a generation round would silently shrink, a weight update silently skip a
runner. Every call DAPO makes on its env runners goes through here instead, and either gets an
answer from each runner it asked or raises naming the ones that did not answer.

Sampling (`sample_on_env_runners`) goes further when `restart_failed_env_runners` is on: the
share of a runner that died is sampled again on the runners still in service, so a step loses
no group and counts none twice; `bring_back_env_runners` waits for the runner Ray restarts.
`ByValueEnvRunnerGroup` makes sure Ray can restart it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import ray
from ray.rllib.env.env_runner_group import EnvRunnerGroup
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from dapo_rllib.columns import Metrics
from dapo_rllib.rollout.timing import RolloutTiming

logger = logging.getLogger(__name__)


@dataclass
class SampleReport:
    """What an env runner sends back for its share of a generation round."""

    episodes: list  # the share's SingleAgentEpisodes, whole groups
    metrics: dict  # the runner's reduced MetricsLogger stats (`EnvRunner.get_metrics`)
    timing: RolloutTiming  # the round's phases on that runner


# Tries of a generation round's share before a failing env runner stops the run: a runner that
# raises dies and comes back (RLlib), so a share that kills every runner would loop for ever.
SAMPLE_ATTEMPTS = 3
# Seconds between health probes while waiting for a restarted env runner.
RESTORE_POLL_S = 1.0


class ByValueEnvRunnerGroup(EnvRunnerGroup):
    """RLlib's EnvRunnerGroup, whose remote env runners get their config by value.

    RLlib puts the config into the object store once and hands every remote runner the reference.
    Ray restarts a dead runner by running its constructor again with the same arguments, but does
    not keep a reference argument alive for that (ray-project/ray#53727): once the last reference
    is gone, the restart fails. By value, the config (about 12 KB; Ray inlines arguments under
    100 KB) travels inside the actor's creation task, which Ray keeps for as long as it may
    restart the actor.
    """

    @override(EnvRunnerGroup)
    def _make_worker(self, *, config, **kwargs):
        if isinstance(config, ray.ObjectRef):
            config = ray.get(config)
        return super()._make_worker(config=config, **kwargs)


def on_env_runners(group, func, env_runner_ids: list[int] | None = None) -> list:
    """`func(runner)` (or, for a list, `func[i]` on runner i) on the group's env runners (those
    of `env_runner_ids`, or all; the local one if there are no remote ones), in that order.

    Raises when one did not answer.
    """
    if group.num_remote_env_runners() == 0:
        return group.foreach_env_runner(func, local_env_runner=True)
    wanted = list(group.healthy_worker_ids()) if env_runner_ids is None else list(env_runner_ids)
    answers, missing = _answers(group, func, wanted)
    if missing:
        raise lost_env_runners_error(missing)
    return [answers[index] for index in wanted]


def sample_on_env_runners(
    group,
    requests: list[tuple[int, int]],
    *,
    restart_failed: bool,
    runners_in_service: Callable[[], list[int]],
    metrics: MetricsLogger,
) -> list[SampleReport]:
    """The env runners' reports for `(problem index, group id)` requests,
    each request answered exactly once.

    Spread evenly over `runners_in_service()`. A runner that dies mid-round takes nothing with it:
    its share (the same problems and group ids, so the same seeds) is sampled again on the
    runners in service; without `restart_failed` a dead runner stops the run, named.
    """
    call = partial(_sample_and_report, requests=requests)
    if group.num_remote_env_runners() == 0:
        return group.foreach_env_runner(call, local_env_runner=True)
    out, attempts = [], 0
    while True:
        attempts += 1
        ids = runners_in_service()
        shares = [share for share in np.array_split(np.arange(len(requests)), len(ids)) if len(share)]
        shares = [[requests[i] for i in share] for share in shares]
        ids = ids[: len(shares)]
        answers, missing = _answers(group, [partial(_sample_and_report, requests=share) for share in shares], ids)
        out += [answers[i] for i in ids if i in answers]
        if not missing:
            return out
        if not restart_failed or attempts == SAMPLE_ATTEMPTS:
            raise lost_env_runners_error(missing)
        requests = [request for i, share in zip(ids, shares) if i in missing for request in share]
        metrics.log_value((Metrics.ROLLOUT, Metrics.ENV_RUNNERS_LOST), len(missing), reduce="sum")
        logger.info(
            f"[DAPO] env runner(s) {missing} lost while sampling; "
            f"their {len(requests)} prompts go to the env runners in service"
        )


def bring_back_env_runners(group, *, probe_timeout_s: float, restore_timeout_s: float) -> list[int]:
    """Ids of the remote env runners brought back into service (marked healthy) by this call,
    once every runner of `group` is in service again; raises after `restore_timeout_s` seconds.

    Ray restarts a dead runner's actor at once (`max_restarts`), but its constructor starts a
    vLLM engine, which takes tens of seconds, and until it has, a call to the actor fails within
    about 2 s ("The actor is restarting") instead of waiting: RLlib's health probe, made once
    before each training step, fails every time for as many steps as the restart takes. Hence
    the wait here. First every runner in service is pinged, so that one that died since its last
    call (between steps) is found now, not by the step's sampling.
    """
    if group.num_remote_env_runners() == 0:
        return []
    group.foreach_env_runner(_ping, local_env_runner=False, timeout_seconds=probe_timeout_s)
    restored: set[int] = set()
    deadline, waiting_since = time.monotonic() + restore_timeout_s, None
    while True:
        restored.update(group.probe_unhealthy_env_runners(timeout_seconds=probe_timeout_s))
        # RLlib numbers remote env runners 1..n in the order it made them.
        missing = sorted(set(range(1, group.num_remote_env_runners() + 1)) - set(group.healthy_worker_ids()))
        if not missing:
            if waiting_since is not None:
                waited = time.monotonic() - waiting_since
                logger.info(f"[DAPO] env runner(s) {sorted(restored)} back after {waited:.1f} s")
            return sorted(restored)
        if time.monotonic() > deadline:
            timeout = f"env_runner_restore_timeout_s={restore_timeout_s}"
            raise RuntimeError(f"env runner(s) {missing} did not come back within {timeout}")
        if waiting_since is None:
            waiting_since = time.monotonic()
            logger.info(f"[DAPO] waiting for env runner(s) {missing} to restart (a new vLLM engine) ...")
        time.sleep(RESTORE_POLL_S)


def lost_env_runners_error(missing: list[int]) -> RuntimeError:
    return RuntimeError(
        f"env runner(s) {missing} did not answer (died or raised: see the error "
        "logged above). DAPO does not go on with fewer runners than it asked; "
        "`.fault_tolerance(restart_failed_env_runners=True)` replaces dead ones and samples their share again."
    )


def _answers(group, func, env_runner_ids: list[int]) -> tuple[dict[int, Any], list[int]]:
    """({env runner id: answer}, ids of those that did not answer) of `func` on remote env runners."""
    calls = [partial(_with_index, f) for f in func] if isinstance(func, list) else partial(_with_index, func)
    try:
        answers = dict(group.foreach_env_runner(calls, local_env_runner=False, remote_worker_ids=env_runner_ids))
    except ray.exceptions.RayActorError as error:
        # Without fault tolerance RLlib raises at the first dead runner, after marking it unhealthy.
        dead = sorted(set(env_runner_ids) - set(group.healthy_worker_ids()))
        if not dead:
            raise
        raise lost_env_runners_error(dead) from error
    return answers, sorted(set(env_runner_ids) - set(answers))


def _with_index(func, env_runner):
    return env_runner.worker_index, func(env_runner)


def _ping(env_runner) -> bool:
    return True


def _sample_and_report(env_runner, requests: list[tuple[int, int]]) -> SampleReport:
    episodes = env_runner.sample(requests=requests)
    return SampleReport(episodes, env_runner.get_metrics(), env_runner.last_sample_timing)
