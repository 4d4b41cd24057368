"""The game loop: games of two players driven move by move, the model playing some seats and scripts the others.

Each model seat is an episode of its own (`turn_loop.EpisodeRollout`, on the game's environment twin): its
prompt is the first message the game shows that seat, its turns are the moves it sampled, and the messages
the game shows it between its moves (the other player's move, the position after it) are the environment's
tokens after its previous turn. So each agent's sequence for the learner holds its own sampled tokens, in the
loss, and everything else as environment tokens, exactly as the model saw them.

Every round, scripted seats to move play first (their moves cost no generation), until a model seat is to
move in every running game; then the model moves in all of them in one batched generation
(`TurnLoop.generate_turn`), and the games take the moves on worker threads with a deadline
(`dapo_rllib.rollout.env_calls`). A game ends by its rules, or is cut when the seat to move has had
``max_turns`` turns or would pass its token budget: then `GameEnv.finish` scores a draw. A game whose
environment fails ends every model seat's episode with the failure (`EpisodeRollout.fail`). A seat that never
moved (the other player ended the game first) has no turn: it has nothing to train on.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ray.rllib.core import DEFAULT_MODULE_ID

from dapo_rllib.columns import Info
from dapo_rllib.contracts import check_score_result
from dapo_rllib.rollout.timing import RolloutTiming
from dapo_rllib.rollout.turn_loop import EndReason, EpisodeRollout, TurnLoop
from dapo_rllib.tasks.chat_turns import TurnRenderer
from dapo_rllib.tasks.env_failures import EnvFailure
from dapo_rllib.tasks.game_env import GameEnv

#: A scripted player: (the game's environment, its agent, the game's random generator) -> its move.
Script = Callable[[GameEnv, str, random.Random], str]
#: The script that plays a random legal move: the Elo ratings' anchor (`reporting.eval_metrics.versus_ratings`).
RANDOM_SCRIPT = "random_legal"
SCRIPTS: dict[str, Script] = {
    RANDOM_SCRIPT: lambda env, agent, rng: env.random_move(agent, rng),
    "heuristic": lambda env, agent, rng: env.heuristic_move(agent),
}


@dataclass(frozen=True)
class GameStart:
    """A game to play: its position, who plays each agent and its seeds.

    Attributes:
        problem_index: The position's index in the environment's split.
        seat_streams: The agents the model plays, each with its seed stream (`vllm_engine.request_seed`).
        scripts: The other agents, each with its script's name (`SCRIPTS`).
        script_seed: Seeds the scripts' random moves.
        policies: The policy of each model seat not played by the trained policy (a league snapshot).
    """

    problem_index: int
    seat_streams: Mapping[str, tuple[int, ...]]
    scripts: Mapping[str, str] = field(default_factory=dict)
    script_seed: int = 0
    policies: Mapping[str, str] = field(default_factory=dict)


@dataclass
class GameRollout:
    """One game in progress: its environment twin, its model seats' episodes and whose move it is."""

    env: GameEnv
    seats: dict[str, EpisodeRollout]
    scripts: Mapping[str, str]
    rng: random.Random
    to_move: str = ""
    end: EndReason | None = None
    scored: bool = False  # the seats have their final infos
    pending: dict[str, list[dict]] = field(default_factory=dict)  # shown to a model seat since its last move
    closing: dict[str, list[int]] = field(default_factory=dict)  # ids that close a seat's last turn

    def cut(self, reason: EndReason) -> None:
        self.end = reason
        for seat in self.seats.values():
            seat.end = reason

    def fail(self, failure: EnvFailure) -> None:
        self.end, self.scored = EndReason.ENV_ERROR, True
        for seat in self.seats.values():
            seat.fail(failure)

    def score(self, scores: Mapping[str, tuple[float, Mapping[str, Any]]]) -> None:
        """Each model seat's reward (on its last turn) and scored info."""
        self.scored = True
        for agent, seat in self.seats.items():
            reward, info = scores[agent]
            seat.final_info = check_score_result(info, f"{type(self.env).__name__} ended a game with info")
            if seat.turns:
                seat.turns[-1].reward += float(reward)


class GameLoop:
    """Runs games to their end, a round of moves at a time.

    Args:
        turns: The model's side: its generation, decoding, environment calls, `max_turns` and token budget
            (both per seat).
        renderer: Renders the games' messages for the model.
        prompt_ids: A seat's first messages -> (their ids, cut to the prompt length; whether they were cut).
    """

    def __init__(
        self, turns: TurnLoop, renderer: TurnRenderer, prompt_ids: Callable[[list[dict]], tuple[list[int], bool]]
    ):
        self.turns, self.renderer, self.prompt_ids = turns, renderer, prompt_ids

    def start(self, env: GameEnv, starts: Sequence[GameStart]) -> list[GameRollout]:
        """A game for each of `starts`, each on a twin of `env`, reset side by side; one whose reset failed has
        ended."""
        games = []
        for start in starts:
            twin = env.spawn()
            seats = {
                agent: EpisodeRollout(
                    twin,
                    start.problem_index,
                    [],
                    stream,
                    self.renderer,
                    policy=start.policies.get(agent, DEFAULT_MODULE_ID),
                )
                for agent, stream in start.seat_streams.items()
            }
            games.append(GameRollout(twin, seats, start.scripts, random.Random(start.script_seed)))
        resets = self.turns.env_calls.map(
            lambda k: games[k].env.reset(options={Info.PROBLEM_INDEX: starts[k].problem_index}), range(len(games))
        )
        for game, reset in zip(games, resets):
            if isinstance(reset, EnvFailure):
                game.fail(reset)
            else:
                self._show(game, reset[0])
        return games

    def run(self, games: Sequence[GameRollout]) -> RolloutTiming:
        """Play `games` to their end; returns the wall times of the model's moves and of the games' steps."""
        timing = RolloutTiming()
        while active := [game for game in games if game.end is None]:
            while scripted := [game for game in active if game.end is None and game.to_move in game.scripts]:
                self._step(scripted, [self._script_move(game) for game in scripted], timing)
            movers = [game for game in active if game.end is None and self._ready(game)]
            if movers:
                seats = [game.seats[game.to_move] for game in movers]
                completions = self.turns.generate_turn(seats, timing)
                moves = [self.turns.model_message(seat, done) for seat, done in zip(seats, completions)]
                for game, seat, completion in zip(movers, seats, completions):
                    seat.budget_spent |= (
                        completion.finish_reason == "length" or seat.response_length >= self.turns.budget
                    )
                    stopped_at_string = isinstance(completion.stop_reason, str)
                    game.closing[game.to_move] = self.renderer.end_of_turn_ids() if stopped_at_string else []
                self._step(movers, [lambda move=move: move for move in moves], timing)
                for game, seat in zip(movers, seats):
                    if game.end is None and seat.budget_spent:
                        game.cut(EndReason.BUDGET)
            self._finish_cut_games([game for game in active if game.end is not None and not game.scored], timing)
        return timing

    def _script_move(self, game: GameRollout) -> Callable[[], str]:
        agent = game.to_move
        script = SCRIPTS[game.scripts[agent]]
        return lambda: script(game.env, agent, game.rng)

    def _ready(self, game: GameRollout) -> bool:
        """Render what the model seat to move has been shown (its prompt, or the ids after its last turn); the
        game is cut instead where the seat has had its turns or the ids would spend its budget."""
        seat = game.seats[game.to_move]
        messages = game.pending.pop(game.to_move, [])
        if not seat.turns:
            seat.prompt_ids, seat.prompt_truncated = self.prompt_ids(messages)
            return True
        if len(seat.turns) >= self.turns.max_turns:
            game.cut(EndReason.MAX_TURNS)
            return False
        env_ids = game.closing.pop(game.to_move) + self.renderer.turn_ids(messages)
        # The model must have room for at least one token after the game's.
        if seat.response_length + len(env_ids) >= self.turns.budget:
            seat.budget_spent = True
            game.cut(EndReason.BUDGET)
            return False
        seat.turns[-1].env_ids = env_ids
        seat.response_length += len(env_ids)
        return True

    def _step(self, games: Sequence[GameRollout], moves: Sequence[Callable[[], str]], timing: RolloutTiming) -> None:
        """Each game's move by its agent to move (computed in the call, so a script failing fails its game)."""
        start = time.perf_counter()
        agents = [game.to_move for game in games]
        results = self.turns.env_calls.map(lambda k: games[k].env.step({agents[k]: moves[k]()}), range(len(games)))
        timing.scoring_s += time.perf_counter() - start
        for game, result in zip(games, results):
            if isinstance(result, EnvFailure):
                game.fail(result)
                continue
            observations, rewards, terminated, truncated, infos = _checked_game_step(game.env, result)
            if terminated.get("__all__") or truncated.get("__all__"):
                game.cut(EndReason.ENV)
                game.score({agent: (rewards[agent], infos[agent]) for agent in game.seats})
            else:
                self._show(game, observations)

    def _show(self, game: GameRollout, observations: Mapping[str, list[dict]]) -> None:
        """The agent to move next, and its messages, kept for a model seat until it moves."""
        if len(observations) != 1:
            raise TypeError(
                f"{type(game.env).__name__} returned observations for {sorted(observations)}: a game of turns "
                "shows the agent to move alone"
            )
        ((agent, messages),) = observations.items()
        game.to_move = agent
        if agent in game.seats:
            game.pending.setdefault(agent, []).extend(messages)
        elif agent not in game.scripts:
            raise ValueError(f"{type(game.env).__name__}: agent {agent!r} is to move but nobody plays it")

    def _finish_cut_games(self, games: Sequence[GameRollout], timing: RolloutTiming) -> None:
        """Score each game the loop cut (`GameEnv.finish`: a draw)."""
        start = time.perf_counter()
        for game, result in zip(games, self.turns.env_calls.map(lambda game: game.env.finish(), games)):
            if isinstance(result, EnvFailure):
                game.fail(result)
            else:
                game.score(result)
        timing.scoring_s += time.perf_counter() - start


def _checked_game_step(env: GameEnv, result: Any) -> tuple:
    """What a game's ``step`` returned, checked to be RLlib's multi-agent step (five dicts)."""
    if not (isinstance(result, tuple) and len(result) == 5 and all(isinstance(part, Mapping) for part in result)):
        raise TypeError(
            f"{type(env).__name__}.step() must return five dicts (observations, rewards, terminateds, truncateds, "
            f"infos), got {result!r}"
        )
    return result
