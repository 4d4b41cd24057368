"""TextArena's games of two players as multi-agent environments (`dapo_rllib.tasks.game_env.GameEnv`).

Each seat is an agent: the game's messages to a player since its last move are that agent's next
observation (the moves as the players wrote them left out: the game describes the other player's),
and its reply is the move. A refused move counts in ``invalid_moves``; TextArena lets a player retry
once, then ends the game with that player's loss. The game's rewards at the end are the agents'
(zero-sum for the games here).

Scripted opponents need the legal moves and a simple good move, read from the game's state: written
for TicTacToe-v0 (win, block, centre, corner), KuhnPoker-v0 (bet or call with a king, check or fold
with a jack) and Nim-v0 (leave a nim-sum of 0). Other two-player games run between model players.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import textarena

from dapo_rllib.tasks.game_env import PROBLEM_CONFIG, GameEnv, GameResult
from dapo_rllib.tasks.problem_env import checked_settings
from envs.textarena_env import check_game_id, game_text, start_game

DEFAULT_CONFIG: dict[str, Any] = {**PROBLEM_CONFIG, "game": "TicTacToe-v0", "game_options": {}}
TIC_TAC_TOE_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
KUHN_CARDS = "JQK"


class TextArenaVersus:
    """One TextArena game of two players in play (`dapo_rllib.tasks.game_env.TurnGame`)."""

    def __init__(self, game_id: str, options: Mapping[str, Any], seed: int):
        self.game_id = game_id
        self._game = start_game(game_id, options, seed, num_players=2)
        if not isinstance(self._game.state, textarena.TwoPlayerState):
            raise ValueError(
                f"TextArenaVersusEnv 'game'={game_id!r} is not a game of two players (its state is a "
                f"{type(self._game.state).__name__}); games of one player are `dapo_textarena`"
            )
        self.result: GameResult | None = None
        self.invalid_moves = [0, 0]

    @property
    def to_move(self) -> int:
        return int(self._game.state.current_player_id)

    def messages_for(self, seat: int) -> str:
        if seat != self.to_move:
            raise ValueError(f"{self.game_id}: player {seat} is not to move; TextArena shows the player to move only")
        return game_text(self._game)

    def play(self, seat: int, move: str) -> None:
        done, _ = self._game.step(move)
        if not done:
            # A refused move leaves the count of errors above 0 until the next accepted move.
            self.invalid_moves[seat] += self._game.state.error_count > 0
            return
        rewards, game_info = self._game.close()
        self.invalid_moves[seat] += bool(game_info.get(seat, {}).get("invalid_move"))
        reason = game_info.get(seat, {}).get("reason", "")
        self.result = GameResult(scores=(float(rewards[0]), float(rewards[1])), reason=reason)

    def legal_moves(self, seat: int) -> list[str]:
        return self._scripts()[0](self._game.state.game_state, seat)

    def heuristic_move(self, seat: int) -> str:
        return self._scripts()[1](self._game.state.game_state, seat)

    def _scripts(self) -> tuple[Callable[[dict, int], list[str]], Callable[[dict, int], str]]:
        if self.game_id not in SCRIPTS:
            raise ValueError(
                f"no scripted moves for {self.game_id!r}: its opponents must be model policies; scripted opponents "
                f"play {sorted(SCRIPTS)}"
            )
        return SCRIPTS[self.game_id]


class TextArenaVersusEnv(GameEnv):
    """A TextArena game of two players per episode (config: ``game``, ``game_options`` and GameEnv's keys)."""

    DEFAULT_CONFIG = DEFAULT_CONFIG

    def __init__(self, config: Mapping[str, Any] | None = None):
        settings = checked_settings(type(self).__name__, DEFAULT_CONFIG, config)
        self.game_id, self._options = settings["game"], settings["game_options"]
        self.data_source = f"textarena/{self.game_id}"
        check_game_id(type(self).__name__, self.game_id)
        try:
            self.new_game(0)  # a game that cannot start, or is not for two players, is refused here
        except AssertionError as error:  # TextArena's check of the number of players
            raise ValueError(
                f"TextArenaVersusEnv 'game'={self.game_id!r} is not a game of two players ({error}); games of "
                "one player are `dapo_textarena`"
            ) from None
        super().__init__({key: settings[key] for key in PROBLEM_CONFIG})

    def new_game(self, seed: int) -> TextArenaVersus:
        return TextArenaVersus(self.game_id, self._options, seed)


# ----- scripted moves, from the game's state ------------------------------------------------------
def _tic_tac_toe_cells(state: dict) -> list[str]:
    return [cell for row in state["board"] for cell in row]


def tic_tac_toe_moves(state: dict, seat: int) -> list[str]:
    return [f"[{i}]" for i, cell in enumerate(_tic_tac_toe_cells(state)) if not cell]


def tic_tac_toe_heuristic(state: dict, seat: int) -> str:
    """Complete a line of its own, else block one of the opponent's, else the centre, a corner, any cell."""
    cells = _tic_tac_toe_cells(state)
    mine, theirs = ("O", "X") if seat == 0 else ("X", "O")  # TextArena: player 0 plays O
    for mark in (mine, theirs):
        for line in TIC_TAC_TOE_LINES:
            marks = [cells[i] for i in line]
            if marks.count(mark) == 2 and marks.count("") == 1:
                return f"[{line[marks.index('')]}]"
    for cell in (4, 0, 2, 6, 8, 1, 3, 5, 7):
        if not cells[cell]:
            return f"[{cell}]"
    raise ValueError("the board is full")


def kuhn_moves(state: dict, seat: int) -> list[str]:
    return [f"[{action}]" for action in state["current_legal_action_tree"]]


def kuhn_heuristic(state: dict, seat: int) -> str:
    """With a king bet or call, with a jack check or fold, with a queen check or call."""
    legal = list(state["current_legal_action_tree"])
    card = KUHN_CARDS[state["player_cards"][seat]]
    preferences = {"K": ("bet", "call"), "J": ("check", "fold"), "Q": ("check", "call")}[card]
    return f"[{next(action for action in preferences if action in legal)}]"


def nim_moves(state: dict, seat: int) -> list[str]:
    return [f"[{pile} {count}]" for pile, size in enumerate(state["piles"]) for count in range(1, size + 1)]


def nim_heuristic(state: dict, seat: int) -> str:
    """Leave the piles with a nim-sum of 0 (the winning strategy); where that is not possible, take one from the largest."""
    piles = state["piles"]
    nim_sum = functools.reduce(lambda a, b: a ^ b, piles, 0)
    for pile, size in enumerate(piles):
        if nim_sum and size ^ nim_sum < size:
            return f"[{pile} {size - (size ^ nim_sum)}]"
    largest = max(range(len(piles)), key=piles.__getitem__)
    return f"[{largest} 1]"


SCRIPTS = {
    "TicTacToe-v0": (tic_tac_toe_moves, tic_tac_toe_heuristic),
    "KuhnPoker-v0": (kuhn_moves, kuhn_heuristic),
    "Nim-v0": (nim_moves, nim_heuristic),
}
