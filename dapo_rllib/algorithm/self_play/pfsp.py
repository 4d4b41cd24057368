"""Which league opponent to play next: uniformly, or by prioritized fictitious self-play (PFSP).

PFSP (Vinyals et al., 2019, "Grandmaster level in StarCraft II", Nature 575) draws an opponent in
proportion to a weight of the learner's win rate against it, `(1 - p_win) ** exponent` ("hard"): the
opponents it still loses to come up most, those it always beats almost never. Pure: win rates in,
probabilities out.
"""

from __future__ import annotations

from collections.abc import Sequence

OPPONENT_SAMPLING = ("uniform", "pfsp")
UNSEEN_WIN_RATE = 0.5  # an opponent not played yet counts as an even match


def opponent_probabilities(win_rates: Sequence[float | None], mode: str, exponent: float = 2.0) -> list[float]:
    """The probability of drawing each opponent, given the learner's win rate against each (None: not
    played yet, counted as `UNSEEN_WIN_RATE`). `mode`: "uniform" or "pfsp". When every PFSP weight is 0
    (the learner beats them all every time) the draw is uniform: there is still a league to play."""
    if mode not in OPPONENT_SAMPLING:
        raise ValueError(f"opponent sampling {mode!r}; expected one of {OPPONENT_SAMPLING}")
    if not win_rates:
        raise ValueError("no opponents to draw from: the league is empty")
    if exponent <= 0:
        raise ValueError(f"exponent={exponent} must be > 0")
    rates = [UNSEEN_WIN_RATE if rate is None else rate for rate in win_rates]
    bad = [rate for rate in rates if not 0 <= rate <= 1]
    if bad:
        raise ValueError(f"win rates {bad} are not in [0, 1]")
    weights = [(1 - rate) ** exponent for rate in rates] if mode == "pfsp" else [1.0] * len(rates)
    total = sum(weights)
    if total == 0:
        return [1 / len(rates)] * len(rates)
    return [weight / total for weight in weights]
