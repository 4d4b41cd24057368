"""Sampling and validation on games of two players (`dapo_rllib.tasks.game_env.GameEnv`), for `VLLMEnvRunner`.

A request ``(position index, request id)`` plays `group_size` games of the position. Who plays each agent
is the config's `policy_mapping_fn`, asked per request (`dapo_rllib.rollout.matchups`): RLlib's
default maps every agent to the one policy, which is shared self-play; `versus("heuristic")` puts a
scripted opponent at the seat the trained side does not take. Each seat the trained policy plays yields a
group, of the same position and seat (group id ``2 * request id + seat``), each episode holding that seat's
moves; its role (``"<game>/<agent>"``) keys the role-conditioned baselines (adv_estimator="rae").

In a league run the env runner also holds the league (`league`, a `LeagueDraw` the driver sets) and serves its
snapshots as LoRA adapters beside the trained policy's: `versus_league` draws a snapshot per request, and a
game's two model seats sample from their own adapters in the same batch. Only the trained policy's seats are
trained on; each episode names its opponent and its outcome (`Extras.OPPONENT`, `Extras.OUTCOME`), which the
league counts.

Validation plays each held-out position against each scripted opponent and each league snapshot, the model at
either seat (seat-swapped), and reports the win rate per opponent as the data source
``"<source>/vs_<opponent>"``.
"""

from __future__ import annotations

import functools

from ray.rllib.core import DEFAULT_MODULE_ID

from dapo_rllib.columns import Extras, Info
from dapo_rllib.contracts import EvalRecord
from dapo_rllib.reporting.eval_metrics import versus_source
from dapo_rllib.rollout.game_loop import SCRIPTS, GameLoop, GameStart
from dapo_rllib.rollout.matchups import LeagueDraw, matchup_for
from dapo_rllib.rollout.timing import RolloutTiming
from dapo_rllib.rollout.turn_loop import EpisodeRollout, TurnLoop
from dapo_rllib.rollout.vllm_engine import EVAL_STREAM, SCRIPT_STREAM, TRAIN_STREAM, request_seed
from dapo_rllib.tasks.game_env import AGENTS, GameEnv, agent_seat


class GameSampling:
    """The games of an env runner: its config (RLlib's multi-agent settings and seed), the games per request
    (`group_size`), its model loops, the renderer and prompt fitting it uses, and the league it draws
    opponents from (None: no league)."""

    def __init__(self, config, group_size: int, train_loop: TurnLoop, eval_loop: TurnLoop, renderer, fitted_prompt):
        self.config, self.group_size = config, group_size
        prompt_ids = functools.partial(fitted_prompt, renderer)
        self._train = GameLoop(train_loop, renderer, prompt_ids)
        self._eval = GameLoop(eval_loop, renderer, prompt_ids)
        self._known = set(SCRIPTS) | set(config.policies or {DEFAULT_MODULE_ID})
        self.league: LeagueDraw | None = None

    @property
    def snapshots(self) -> list[str]:
        """The league's snapshots, oldest first."""
        return [] if self.league is None else list(self.league.odds)

    def matchup(self, request_id: int) -> dict[str, str]:
        """{agent: policy} of a request; only one trained policy plays here (DEFAULT_MODULE_ID)."""
        matchup = matchup_for(request_id, self.config.policy_mapping_fn, self._known, self.league)
        others = {policy for policy in matchup.values() if policy not in SCRIPTS} - {DEFAULT_MODULE_ID}
        if others - set(self.snapshots):
            raise ValueError(
                f"policy_mapping_fn maps agents to {sorted(others)}: games train one policy, {DEFAULT_MODULE_ID!r}, "
                f"against itself, a scripted opponent ({sorted(SCRIPTS)}) or a league snapshot for now"
            )
        return matchup

    def groups_per_request(self) -> int:
        """Groups a request yields: one per seat the trained policy plays (as request 0's matchup says)."""
        return sum(policy == DEFAULT_MODULE_ID for policy in self.matchup(0).values())

    def sample(
        self, env: GameEnv, requests: list[tuple[int, int]]
    ) -> tuple[list, list[int], list[dict], RolloutTiming]:
        """Play the requests' games: (the trained seats' episodes that moved, their group ids, their extra
        values, the timing)."""
        matchups = {request_id: self.matchup(request_id) for _, request_id in requests}
        starts = [
            self._start(index, matchups[request_id], (TRAIN_STREAM, request_id, k))
            for index, request_id in requests
            for k in range(self.group_size)
        ]
        games = self._train.start(env, starts)
        timing = self._train.run(games)
        rollouts, ids, values = [], [], []
        for n, game in enumerate(games):
            request_id = requests[n // self.group_size][1]
            for agent, seat in game.seats.items():
                # A seat that never moved has nothing to train on; a snapshot's seat is not trained.
                if seat.turns and seat.policy == DEFAULT_MODULE_ID:
                    rollouts.append(seat)
                    ids.append(2 * request_id + agent_seat(agent))
                    opponent = matchups[request_id][AGENTS[1 - agent_seat(agent)]]
                    outcome = str(seat.final_info.get(Info.OUTCOME, ""))
                    values.append(
                        {Extras.ROLE: f"{env.game_id}/{agent}", Extras.OPPONENT: opponent, Extras.OUTCOME: outcome}
                    )
        return rollouts, ids, values, timing

    def evaluate(self, env: GameEnv, positions: list[int], num_samples: int) -> tuple[list[EvalRecord], RolloutTiming]:
        """`num_samples` games of each position against each scripted opponent and each league snapshot at each
        seat: a record per (position, opponent) with the model's outcomes at both seats."""
        opponents = [*SCRIPTS, *self.snapshots]
        starts = [
            self._start(
                index, {trained: DEFAULT_MODULE_ID, other: opponent}, (EVAL_STREAM, index, o, agent_seat(trained), k)
            )
            for index in positions
            for o, opponent in enumerate(opponents)
            for trained, other in (AGENTS, AGENTS[::-1])
            for k in range(num_samples)
        ]
        games = self._eval.start(env, starts)
        timing = self._eval.run(games)
        per_record = 2 * num_samples
        records = []
        for r in range(len(games) // per_record):
            index, opponent = positions[r // len(opponents)], opponents[r % len(opponents)]
            seats = [game.seats[_trained_agent(game)] for game in games[r * per_record : (r + 1) * per_record]]
            records.append(_record(env, index, opponent, seats))
        return records, timing

    def _start(self, index: int, matchup: dict[str, str], stream: tuple[int, ...]) -> GameStart:
        seats = {agent: (*stream, agent_seat(agent)) for agent, policy in matchup.items() if policy not in SCRIPTS}
        scripts = {agent: policy for agent, policy in matchup.items() if policy in SCRIPTS}
        snapshots = {agent: policy for agent, policy in matchup.items() if policy in self.snapshots}
        return GameStart(index, seats, scripts, request_seed(self.config.seed, SCRIPT_STREAM, *stream), snapshots)


def _trained_agent(game) -> str:
    """The agent the trained policy plays in a validation game (it plays one)."""
    return next(agent for agent, seat in game.seats.items() if seat.policy == DEFAULT_MODULE_ID)


def _record(env: GameEnv, index: int, opponent: str, seats: list[EpisodeRollout]) -> EvalRecord:
    position = env.problem(index)
    return EvalRecord.from_infos(
        [seat.final_info for seat in seats],
        problem_index=index,
        data_source=versus_source(position.data_source, opponent),
        ground_truth=position.ground_truth,
        length=[seat.response_length for seat in seats],
        truncated=[seat.truncated for seat in seats],
        prompt_truncated=any(seat.prompt_truncated for seat in seats),
        turns=[len(seat.turns) for seat in seats],
    )
