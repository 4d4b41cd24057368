"""The league's pure math: PFSP's opponent draw and the Elo table, with literals."""

import math
import random

import pytest

from dapo_rllib.algorithm.self_play.pfsp import opponent_probabilities
from dapo_rllib.reporting.elo import ANCHOR_RATING, elo_ratings


def test_pfsp_draws_the_opponents_the_learner_still_loses_to():
    # Weights (1 - p)^2: 0.25, 0.01, 0.25 (unseen: 0.5), 0; total 0.51.
    probabilities = opponent_probabilities([0.5, 0.9, None, 1.0], "pfsp", exponent=2)
    assert probabilities == pytest.approx([0.25 / 0.51, 0.01 / 0.51, 0.25 / 0.51, 0.0])
    assert opponent_probabilities([0.5, 0.9, None, 1.0], "uniform") == [0.25] * 4


def test_pfsp_is_uniform_when_the_learner_beats_every_opponent():
    assert opponent_probabilities([1.0, 1.0], "pfsp") == [0.5, 0.5]


@pytest.mark.parametrize(
    "win_rates, mode, exponent, message",
    [
        ([0.5], "elo", 2, "opponent sampling 'elo'; expected one of"),
        ([], "pfsp", 2, "the league is empty"),
        ([1.5], "pfsp", 2, r"win rates \[1.5\] are not in \[0, 1\]"),
        ([0.5], "pfsp", 0, "exponent=0 must be > 0"),
    ],
)
def test_pfsp_bad_input_is_a_clear_error(win_rates, mode, exponent, message):
    with pytest.raises(ValueError, match=message):
        opponent_probabilities(win_rates, mode, exponent)


def test_three_wins_in_four_games_is_190_points():
    # Bradley-Terry: A scores 3 : 1, so strength A / strength B = 3 and the gap is 400 log10(3) = 190.85.
    results = [("A", "B", 1), ("A", "B", 1), ("A", "B", 1), ("B", "A", 1)]
    ratings = elo_ratings(results, prior_games=1e-6)
    assert ratings["A"] - ratings["B"] == pytest.approx(400 * math.log10(3), abs=0.01)


def test_a_draw_is_half_a_win_and_equal_players_sit_at_the_anchor():
    ratings = elo_ratings([("A", "B", 0.5), ("B", "A", 1), ("A", "B", 1)])
    assert ratings == pytest.approx({"A": ANCHOR_RATING, "B": ANCHOR_RATING})


def test_ratings_do_not_depend_on_the_order_of_the_games():
    rng = random.Random(0)
    results = [(rng.choice("ABC"), "R", rng.choice([0, 0.5, 1])) for _ in range(40)]
    results += [("A", "B", 1), ("C", "A", 0.5), ("B", "C", 0)]
    shuffled = rng.sample(results, len(results))
    assert elo_ratings(shuffled, anchor="R") == pytest.approx(elo_ratings(results, anchor="R"))


def test_the_anchor_is_pinned_and_an_unbeaten_player_stays_finite():
    ratings = elo_ratings([("snapshot", "random", 1)] * 5 + [("learner", "snapshot", 1)], anchor="random")
    assert ratings["random"] == ANCHOR_RATING
    assert ratings["random"] < ratings["snapshot"] < ratings["learner"] < math.inf


@pytest.mark.parametrize(
    "results, kwargs, message",
    [
        ([("A", "B", 2)], {}, "score 2 of 'A' against 'B'; expected 1, 0.5 or 0"),
        ([("A", "A", 1)], {}, "'A' played itself"),
        ([("A", "B", 1)], {"anchor": "random"}, "anchor 'random' played no game; players: "),
        ([("A", "B", 1)], {"prior_games": 0}, "prior_games=0 must be > 0"),
    ],
)
def test_elo_bad_input_is_a_clear_error(results, kwargs, message):
    with pytest.raises(ValueError, match=message):
        elo_ratings(results, **kwargs)
