"""Who plays each seat of a game: the config's `policy_mapping_fn`, asked once per request.

RLlib maps an agent to a policy with ``policy_mapping_fn(agent_id, episode, **kwargs)``. The env runner asks
it for both agents of each request, on an empty `MultiAgentEpisode` whose id names the request
(``"r<request id>"``) and whose ``custom_data["seat"]`` is the seat the trained side takes in it (the
request id modulo 2: seats alternate, so that both are trained alike). The answer must be a known policy:
a trained one, or a scripted opponent (`dapo_rllib.rollout.game_loop.SCRIPTS`); anything else is an error
naming it. The answer follows from the request alone, so a request sampled again on another env runner
plays the same matchup.

In a league (`league_size` >= 1) the request's episode also carries the league's draw
(``custom_data["league"]``, a `LeagueDraw`) and the snapshot drawn for the request
(``custom_data["league_opponent"]``): `versus_league` puts the trained policy at the request's seat and a
snapshot drawn for the request at the other, so that a request replayed anywhere meets the same snapshot.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

from dapo_rllib.tasks.game_env import AGENTS

SEAT = "seat"  # custom_data key of the request's episode: the seat the trained side takes
LEAGUE = "league"  # custom_data key of the request's episode: the league's `LeagueDraw` (a league run only)
LEAGUE_OPPONENT = "league_opponent"  # custom_data key: the snapshot the league drew for the request

MappingFn = Callable[..., str]


@dataclass(frozen=True)
class LeagueDraw:
    """The league's snapshots, the odds of drawing each as an opponent (as the driver last set them) and the
    run's seed: a request's draw follows from these and its id alone."""

    odds: Mapping[str, float]
    seed: int

    def draw(self, request_id: int) -> str:
        """The snapshot request `request_id` plays."""
        rng = random.Random(f"league/{self.seed}/{request_id}")  # a string seed is the same in every process
        return rng.choices(list(self.odds), weights=list(self.odds.values()))[0]


def request_episode(request_id: int, league: LeagueDraw | None = None) -> MultiAgentEpisode:
    """The empty episode a request's matchup is decided on."""
    episode = MultiAgentEpisode(id_=f"r{request_id}")
    episode.custom_data[SEAT] = request_id % 2
    if league is not None:
        episode.custom_data[LEAGUE] = league
        episode.custom_data[LEAGUE_OPPONENT] = league.draw(request_id)
    return episode


def matchup_for(
    request_id: int, mapping_fn: MappingFn, known: Collection[str], league: LeagueDraw | None = None
) -> dict[str, str]:
    """{agent: policy id} of request `request_id`, by `mapping_fn`, each checked to be in `known` or `league`."""
    episode = request_episode(request_id, league)
    known = {*known, *(league.odds if league is not None else ())}
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


def versus_league(agent_id: str, episode: MultiAgentEpisode, **kwargs) -> str:
    """The trained policy at the request's seat, a league snapshot drawn for the request at the other (the
    league's `league_opponent_sampling`: uniform or PFSP)."""
    if agent_id == AGENTS[episode.custom_data[SEAT]]:
        return DEFAULT_MODULE_ID
    if LEAGUE_OPPONENT not in episode.custom_data:
        raise ValueError("policy_mapping_fn=versus_league draws from a league: set league_size >= 1 in .training()")
    return episode.custom_data[LEAGUE_OPPONENT]
