"""Take-away, the built-in two-player game: small enough for the tiny model, with a known best play.

One pile of stones (7 to 15, from the game's seed). The players take turns taking 1, 2 or 3 stones,
writing the move in square brackets (``[2]``); whoever takes the last stone wins. Best play leaves
the opponent a multiple of 4 (the heuristic opponent plays it): the first player wins unless the
pile starts at 8 or 12. A move that is not a bracketed 1-3 no larger than the pile loses the game on
the spot, as most text games treat a move they refuse in self-play (SPIRAL ends the game).
"""

from __future__ import annotations

import random
import re

from dapo_rllib.tasks.game_env import SEATS, GameEnv, GameResult

MIN_PILE, MAX_PILE = 7, 15
MAX_TAKE = 3
MOVE = re.compile(r"\[\s*(\d+)\s*\]")
RULES = (
    "You are {player} in Take-away against {opponent}. There is one pile of stones; the players take turns "
    "taking 1, 2 or 3 stones from it, and whoever takes the last stone wins. Write your move as the number of "
    "stones in square brackets, e.g. [2]. Any other move loses the game."
)


class TakeAway:
    """One game of take-away (`dapo_rllib.tasks.game_env.TurnGame`), started from `seed`."""

    def __init__(self, seed: int):
        self.pile = random.Random(seed).randint(MIN_PILE, MAX_PILE)
        self.to_move = 0
        self.result: GameResult | None = None
        self.invalid_moves = [0, 0]
        # What each seat has not seen yet: the rules and the pile at first, then the other's moves.
        self._unseen = [[self._rules(seat)] for seat in SEATS]
        self._unseen[0].append(self._pile_line())

    def _rules(self, seat: int) -> str:
        return RULES.format(player=f"Player {seat}", opponent=f"Player {1 - seat}")

    def _pile_line(self) -> str:
        return f"{self.pile} stone{'s are' if self.pile > 1 else ' is'} left. Your move."

    def messages_for(self, seat: int) -> str:
        """The text `seat` has not seen yet, as one message (then it has)."""
        text, self._unseen[seat] = "\n".join(self._unseen[seat]), []
        return text

    def play(self, seat: int, move: str) -> None:
        """`seat` plays `move` (the model's whole reply: its last bracketed number counts)."""
        if self.result is not None or seat != self.to_move:
            raise ValueError(f"Player {seat} cannot move now: {'the game is over' if self.result else 'not its turn'}")
        taken = parse_move(move)
        if taken is None or not 1 <= taken <= min(MAX_TAKE, self.pile):
            self.invalid_moves[seat] += 1
            why = f"Player {seat} made an invalid move ({taken if taken is not None else 'no [number]'})"
            self.result = GameResult(scores=_win_for(1 - seat), reason=why)
            return
        self.pile -= taken
        if self.pile == 0:
            self.result = GameResult(scores=_win_for(seat), reason=f"Player {seat} took the last stone")
            return
        self.to_move = 1 - seat
        self._unseen[self.to_move].append(f"Player {seat} took {taken}. {self._pile_line()}")

    def legal_moves(self, seat: int) -> list[str]:
        return [f"[{k}]" for k in range(1, min(MAX_TAKE, self.pile) + 1)]

    def heuristic_move(self, seat: int) -> str:
        """Best play: leave a multiple of 4; from a multiple of 4 (a lost position) take 1."""
        return f"[{self.pile % (MAX_TAKE + 1) or 1}]"


def parse_move(text: str) -> int | None:
    """The last bracketed number of a reply, or None."""
    found = MOVE.findall(text)
    return int(found[-1]) if found else None


def _win_for(seat: int) -> tuple[float, float]:
    return (1.0, -1.0) if seat == 0 else (-1.0, 1.0)


class TakeAwayEnv(GameEnv):
    """Take-away as a multi-agent environment (`dapo_rllib.tasks.game_env.GameEnv`): a game per episode."""

    new_game = TakeAway
    game_id = "TakeAway"
    data_source = "take_away"
