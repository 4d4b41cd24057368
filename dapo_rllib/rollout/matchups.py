"""Who plays each seat of a game: the config's `policy_mapping_fn`, asked once per request.

RLlib maps an agent to a policy with ``policy_mapping_fn(agent_id, episode, **kwargs)``. The env runner asks
it for both agents of each request, on an empty `MultiAgentEpisode` whose id names the request
(``"r<request id>"``) and whose ``custom_data["seat"]`` is the seat the trained side takes in it (the
request id modulo 2: seats alternate, so that both are trained alike). The answer must be a known policy:
a trained one, or a scripted opponent (`dapo_rllib.rollout.game_loop.SCRIPTS`); anything else is an error
naming it. The answer follows from the request alone, so a request sampled again on another env runner
plays the same matchup.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

from dapo_rllib.tasks.game_env import AGENTS

SEAT = "seat"  # custom_data key of the request's episode: the seat the trained side takes

MappingFn = Callable[..., str]


def request_episode(request_id: int) -> MultiAgentEpisode:
    """The empty episode a request's matchup is decided on."""
    episode = MultiAgentEpisode(id_=f"r{request_id}")
    episode.custom_data[SEAT] = request_id % 2
    return episode


def matchup_for(request_id: int, mapping_fn: MappingFn, known: Collection[str]) -> dict[str, str]:
    """{agent: policy id} of request `request_id`, by `mapping_fn`, each checked to be in `known`."""
    episode = request_episode(request_id)
    matchup = {}
    for agent in AGENTS:
        policy = mapping_fn(agent, episode, worker=None)  # RLlib's default takes the (old stack's) worker
        if policy not in known:
            raise ValueError(
                f"policy_mapping_fn returned {policy!r} for agent {agent!r} (request {request_id}); known policies: "
                f"{sorted(known)}"
            )
        matchup[agent] = policy
    return matchup


def shared_self_play(agent_id: str, episode: MultiAgentEpisode, **kwargs) -> str:
    """One policy plays both seats (SPIRAL's self-play): the role is in each seat's prompt."""
    return DEFAULT_MODULE_ID


def versus(opponent: str, trained: str = DEFAULT_MODULE_ID) -> MappingFn:
    """`trained` at the request's seat, `opponent` (a scripted one, another policy) at the other."""

    def mapping_fn(agent_id: str, episode: MultiAgentEpisode, **kwargs) -> str:
        return trained if agent_id == AGENTS[episode.custom_data[SEAT]] else opponent

    return mapping_fn
