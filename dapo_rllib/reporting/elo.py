"""Elo ratings of a league's players from the games they played, all games at once.

Sequential Elo depends on the order the games were played in; these are the Bradley-Terry ratings
of all of them (the maximum a posteriori strengths, found by Hunter's MM iterations, Annals of
Statistics 32, 2004), on the Elo scale: a player rated 400 points above another is expected to
score 10 : 1 against it. A draw counts half a win to each side. Each player also holds
`prior_games` virtual draws against a fixed player rated `ANCHOR_RATING`, which keeps the rating of a
player that won or lost every game finite and pulls players with few games towards the anchor.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Iterable

ANCHOR_RATING = 1000.0
ELO_SCALE = 400 / math.log(10)  # rating points per unit of log-strength


def elo_ratings(
    results: Iterable[tuple[Hashable, Hashable, float]],
    *,
    anchor: Hashable | None = None,
    prior_games: float = 1.0,
    iterations: int = 1000,
    tol: float = 1e-10,
) -> dict[Hashable, float]:
    """{player: rating} from `results`, (player, opponent, player's score: 1 win, 0.5 draw, 0 loss).
    `anchor`: a player whose rating is set to `ANCHOR_RATING`, the others shifted with it (e.g. the
    random-move opponent, so that ratings compare across runs); None keeps the virtual player there."""
    if prior_games <= 0:
        raise ValueError(f"prior_games={prior_games} must be > 0: it keeps an unbeaten player's rating finite")
    wins: dict[Hashable, float] = defaultdict(float)
    games: dict[Hashable, dict[Hashable, float]] = defaultdict(lambda: defaultdict(float))
    for player, opponent, score in results:
        if score not in (0, 0.5, 1):
            raise ValueError(f"score {score!r} of {player!r} against {opponent!r}; expected 1, 0.5 or 0")
        if player == opponent:
            raise ValueError(f"{player!r} played itself: a game needs two different players")
        wins[player] += score
        wins[opponent] += 1 - score
        games[player][opponent] += 1
        games[opponent][player] += 1
    if anchor is not None and anchor not in games:
        raise ValueError(f"anchor {anchor!r} played no game; players: {sorted(map(str, games))}")
    strength = dict.fromkeys(games, 1.0)  # the virtual player's strength is 1
    for _ in range(iterations):
        updated = {
            player: (wins[player] + prior_games / 2)
            / (
                sum(count / (strength[player] + strength[other]) for other, count in games[player].items())
                + prior_games / (strength[player] + 1.0)
            )
            for player in strength
        }
        change = max(abs(math.log(updated[p] / strength[p])) for p in strength)
        strength = updated
        if change < tol:
            break
    ratings = {player: ANCHOR_RATING + ELO_SCALE * math.log(value) for player, value in strength.items()}
    shift = 0.0 if anchor is None else ANCHOR_RATING - ratings[anchor]
    return {player: rating + shift for player, rating in ratings.items()}
