"""Games of two players as RLlib multi-agent environments: a seat per agent, a move per model turn.

A problem is a starting position: problem i of the training split is the game started with seed i, of
the test split with seed ``TEST_SEED_OFFSET + i``, so that a group's episodes start alike. Agents
``player_0`` and ``player_1`` take turns, ``player_0`` first. RLlib's turn-based protocol
(`ray.rllib.env.multi_agent_env.MultiAgentEnv`): ``reset`` gives the observation of the agent to
move, each ``step`` takes that agent's move and gives the next agent's observation. An observation is
the chat messages the agent has not seen yet: the rules and the position at first, then the other
player's move and what it left. When the game ends both agents get their reward and a scored info
(``outcome`` win/draw/loss, ``invalid_moves``), as a single-agent game's last step does; a game the
env runner cuts (turns, tokens) is ended by :meth:`GameEnv.finish`: a draw.

The rules live in a :class:`TurnGame`, one object per game in play (the built-in take-away game:
`dapo_rllib.tasks.games.take_away`); scripted opponents move with its ``legal_moves`` and
``heuristic_move``.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ray.rllib.env.multi_agent_env import MultiAgentEnv

from dapo_rllib.columns import Info, Outcome
from dapo_rllib.contracts import ResetInfo, ScoreInfo, score_info
from dapo_rllib.tasks.problem_env import PROBLEM_CONFIG, DrawOrder, chat_spaces, checked_settings

SEATS = (0, 1)
AGENTS = tuple(f"player_{seat}" for seat in SEATS)
#: The test split's seeds start this far above the training split's.
TEST_SEED_OFFSET = 2**31
#: Games in a split when `num_problems` is None.
DEFAULT_SPLIT_SIZES = {"train": 1000, "test": 200}
#: The reward of a game cut before it ended: a draw for both.
UNFINISHED_SCORES = (0.0, 0.0)


@dataclasses.dataclass(frozen=True)
class GameResult:
    """How a game ended: each seat's reward and why."""

    scores: tuple[float, float]
    reason: str


@dataclasses.dataclass(frozen=True)
class Position:
    """A starting position, as an episode's info names it."""

    ground_truth: str  # "<game>#<seed>": a game has no reference answer; this names the position
    data_source: str


class TurnGame(Protocol):
    """One game in play, its players seats 0 and 1."""

    to_move: int  # the seat whose move it is
    result: GameResult | None  # None while the game goes on
    invalid_moves: list[int]  # per seat: moves the game refused

    def messages_for(self, seat: int) -> str:
        """What `seat` has not seen yet (the rules and the position, then the other's moves), as one text."""

    def play(self, seat: int, move: str) -> None:
        """`seat` plays `move`, the model's whole reply; the game reads the move from it by its rules."""

    def legal_moves(self, seat: int) -> list[str]:
        """The moves `seat` may play now, written as a reply."""

    def heuristic_move(self, seat: int) -> str:
        """A good move for `seat`, by a simple rule of the game."""


def agent_seat(agent: str) -> int:
    if agent not in AGENTS:
        raise ValueError(f"unknown agent {agent!r}; the agents are {list(AGENTS)}")
    return AGENTS.index(agent)


def split_seeds(owner: str, split: str, num_problems: int | None) -> list[int]:
    """The seeds of a split's games: 0, 1, ... for "train", from `TEST_SEED_OFFSET` for "test"."""
    if split not in DEFAULT_SPLIT_SIZES:
        raise ValueError(f"{owner} 'split'={split!r}; expected one of {sorted(DEFAULT_SPLIT_SIZES)}")
    first = TEST_SEED_OFFSET if split == "test" else 0
    return list(range(first, first + (num_problems or DEFAULT_SPLIT_SIZES[split])))


class GameEnv(MultiAgentEnv):
    """A two-player game per episode, over the seeded positions of a split.

    A subclass sets ``new_game`` (a seed -> a :class:`TurnGame`: a class or a method), ``game_id`` and
    ``data_source``. Config keys: split,
    num_problems (None: 1,000 train games, 200 test games), shuffle and seed (the draw order, as
    :class:`dapo_rllib.tasks.problem_env.ProblemEnv`'s).
    """

    DEFAULT_CONFIG: Mapping[str, Any] = PROBLEM_CONFIG
    tools: tuple = ()  # a move is text: no tools
    new_game: Callable[[int], TurnGame]
    game_id: str
    data_source: str

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__()
        settings = checked_settings(type(self).__name__, self.DEFAULT_CONFIG, config)
        self._seeds = split_seeds(type(self).__name__, settings["split"], settings["num_problems"])
        self._shuffle, self._seed = bool(settings["shuffle"]), settings["seed"]
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        observation_space, action_space = chat_spaces()
        self.observation_spaces = dict.fromkeys(AGENTS, observation_space)
        self.action_spaces = dict.fromkeys(AGENTS, action_space)
        self._game: TurnGame | None = None
        self._problem_index: int | None = None
        self._last_moves: list[str | None] = [None, None]

    def spawn(self) -> GameEnv:
        """A twin for one more game at a time, sharing the positions."""
        twin = copy.copy(self)
        twin._game, twin._problem_index, twin._last_moves, twin.agents = None, None, [None, None], []
        return twin

    @property
    def num_problems(self) -> int:
        return len(self._seeds)

    def problem(self, i: int) -> Position:
        """Position `i` of the split."""
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.num_problems:
            raise ValueError(f"{type(self).__name__}: position index {i!r} is not in [0, {self.num_problems})")
        return Position(f"{self.game_id}#{self._seeds[i]}", self.data_source)

    def new_draw_order(self) -> DrawOrder:
        """The order of the positions from the start, as the config defines it (the trainer's)."""
        return DrawOrder(self.num_problems, self._shuffle, self._seed)

    @property
    def game(self) -> TurnGame:
        if self._game is None:
            raise RuntimeError(f"{type(self).__name__}: no game in play; call reset() first")
        return self._game

    # ----- an episode: one game -----------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start the game of position `options["problem_index"]`: the first mover's observation, and each
        agent's info (the position)."""
        index = (options or {}).get(Info.PROBLEM_INDEX)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.num_problems:
            raise ValueError(
                f"{type(self).__name__}.reset() needs options={{'problem_index': i}} with 0 <= i < "
                f"{self.num_problems}, got {index!r}"
            )
        self._problem_index = index
        self._game = self.new_game(self._seeds[index])
        self._last_moves = [None, None]
        self.agents = list(AGENTS)
        position = self.problem(index)
        info: ResetInfo = {
            Info.PROBLEM_INDEX: index,
            Info.GROUND_TRUTH: position.ground_truth,
            Info.DATA_SOURCE: position.data_source,
            Info.EPOCH: 0,
            Info.TOOLS: [],
        }
        return self._observation(), {agent: dict(info) for agent in AGENTS}

    def step(self, action_dict: Mapping[str, str]):
        """The move of the agent to move; the next agent's observation, or both agents' rewards at the end."""
        game = self.game
        mover = AGENTS[game.to_move]
        if game.result is not None or set(action_dict) != {mover}:
            raise ValueError(
                f"{type(self).__name__}.step() takes the move of {mover!r} alone "
                f"({'the game is over' if game.result else 'its turn'}), got moves of {sorted(action_dict)}"
            )
        move = action_dict[mover]
        self._last_moves[game.to_move] = move
        game.play(game.to_move, move)
        if game.result is None:
            return self._observation(), {}, {"__all__": False}, {"__all__": False}, {}
        return self._end(game.result)

    def finish(self) -> dict[str, tuple[float, ScoreInfo]]:
        """End a game the env runner cut before it was over: a draw. {agent: (reward, scored info)}."""
        _, rewards, _, _, infos = self._end(GameResult(UNFINISHED_SCORES, "not finished within the episode's turns"))
        return {agent: (rewards[agent], infos[agent]) for agent in AGENTS}

    def legal_moves(self, agent: str) -> list[str]:
        return self.game.legal_moves(agent_seat(agent))

    def heuristic_move(self, agent: str) -> str:
        return self.game.heuristic_move(agent_seat(agent))

    def random_move(self, agent: str, rng: random.Random) -> str:
        return rng.choice(self.legal_moves(agent))

    def _observation(self) -> dict[str, list[dict[str, str]]]:
        seat = self.game.to_move
        return {AGENTS[seat]: [{"role": "user", "content": self.game.messages_for(seat)}]}

    def _end(self, result: GameResult):
        game, position = self.game, self.problem(self._problem_index)
        rewards, infos = {}, {}
        for seat, agent in enumerate(AGENTS):
            score = result.scores[seat]
            outcome = (
                Outcome.WIN
                if score > result.scores[1 - seat]
                else Outcome.LOSS
                if score < result.scores[1 - seat]
                else Outcome.DRAW
            )
            rating = {
                Info.SCORE: score,
                Info.ACC: outcome == Outcome.WIN,
                Info.PRED: self._last_moves[seat],
                Info.INVALID_MOVES: game.invalid_moves[seat],
                Info.OUTCOME: str(outcome),
                "reason": result.reason,
            }
            rewards[agent] = score
            infos[agent] = score_info(rating, ground_truth=position.ground_truth, data_source=position.data_source)
        self._game, self.agents = None, []
        done = dict.fromkeys([*AGENTS, "__all__"], True)
        return {}, rewards, done, dict.fromkeys([*AGENTS, "__all__"], False), infos
