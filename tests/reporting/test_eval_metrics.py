"""avg@k, pass@k and maj@k on small inputs whose answers can be worked out by hand."""

import dataclasses
import itertools

import pytest

from dapo_rllib.columns import Metrics, Outcome
from dapo_rllib.reporting.elo import elo_ratings
from dapo_rllib.reporting.eval_metrics import ProblemSamples, k_values, majority_correct, pass_at_k, summarize


def samples(acc, pred=None, source="math_dapo", length=None, truncated=None, timed_out=None):
    n = len(acc)
    return ProblemSamples(
        data_source=source,
        acc=acc,
        pred=pred or [("right" if a else "wrong") for a in acc],
        length=length or [10] * n,
        truncated=truncated or [False] * n,
        timed_out=timed_out or [False] * n,
    )


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (4, 1, 2, 1 - 3 / 6),  # C(3,2)/C(4,2)
        (5, 2, 2, 1 - 3 / 10),  # C(3,2)/C(5,2)
        (4, 0, 3, 0.0),
        (4, 2, 3, 1.0),  # fewer wrong samples than k: some draw is always right
        (32, 8, 1, 8 / 32),  # pass@1 is the mean accuracy
    ],
)
def test_pass_at_k_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize("n, c", [(6, 1), (6, 3), (7, 2), (8, 5)])
def test_pass_at_k_is_the_fraction_of_k_subsets_with_a_correct_sample(n, c):
    outcomes = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(outcomes, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


@pytest.mark.parametrize("n, c, k", [(4, 5, 1), (4, 1, 0), (4, 1, 5), (4, -1, 1)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match=f"n={n}, c={c}, k={k}"):
        pass_at_k(n, c, k)


def test_majority_vote():
    assert majority_correct(["7", "7", "8", None], [True, True, False, False])
    assert not majority_correct(["8", "8", "7", None], [False, False, True, False])
    # Samples without an answer do not vote: one "7" beats three blanks.
    assert majority_correct([None, None, "7", None], [False, False, True, False])
    assert not majority_correct([None, None], [False, False])
    # A tie goes to the answer seen first.
    assert not majority_correct(["8", "7", "7", "8"], [False, True, True, False])
    assert majority_correct(["7", "8", "7", "8"], [True, False, True, False])


def test_k_values():
    assert k_values(1) == [1]
    assert k_values(32) == [1, 2, 4, 8, 16, 32]
    assert k_values(6) == [1, 2, 4, 6]


def test_summarize_per_data_source():
    problems = [
        # aime: 4 samples each; problem 1 right 3/4 (majority right), problem 2 right 1/4 (majority wrong)
        samples(
            [True, True, True, False], source="aime", length=[10, 20, 30, 40], truncated=[False, False, False, True]
        ),
        samples(
            [True, False, False, False],
            pred=["5", "6", "6", None],
            source="aime",
            timed_out=[False, False, False, True],
        ),
        samples([False, False], source="arithmetic"),
    ]
    metrics = summarize(problems)
    assert set(metrics) == {"aime", "arithmetic"}
    aime = metrics["aime"]
    assert aime["avg@4"] == pytest.approx((3 / 4 + 1 / 4) / 2)
    assert aime["pass@1"] == pytest.approx(aime["avg@4"])
    assert aime["pass@2"] == pytest.approx((1.0 + (1 - 3 / 6)) / 2)
    assert aime["pass@4"] == 1.0
    assert aime["maj@4"] == 0.5
    assert aime["response_length_mean"] == pytest.approx((10 + 20 + 30 + 40 + 4 * 10) / 8)
    assert aime["truncation_ratio"] == pytest.approx(1 / 8)
    assert aime["scoring_timeouts"] == 1
    assert (aime["num_problems"], aime["num_samples"]) == (2, 8)
    assert metrics["arithmetic"] == pytest.approx(
        {
            "avg@2": 0.0,
            "pass@1": 0.0,
            "pass@2": 0.0,
            "maj@2": 0.0,
            "response_length_mean": 10.0,
            "truncation_ratio": 0.0,
            "scoring_timeouts": 0,
            "num_problems": 1,
            "num_samples": 2,
        }
    )


def test_summarize_reports_turns_and_tool_use_where_episodes_had_turns_or_tools():
    with_tools = [
        ProblemSamples(
            "tools", [True, False], ["1", "2"], [5, 9], [False] * 2, [False] * 2, turns=[3, 1], tool_calls=[2, 0]
        ),
        ProblemSamples(
            "tools", [True, True], ["1", "1"], [5, 5], [False] * 2, [False] * 2, turns=[2, 2], tool_calls=[1, 1]
        ),
    ]
    metrics = summarize(with_tools)["tools"]
    assert metrics["turns_mean"] == pytest.approx((3 + 1 + 2 + 2) / 4)
    assert metrics["tool_use"] == pytest.approx(3 / 4)  # three of the four samples called a tool
    assert "first_answer_acc" not in metrics
    assert "turns_mean" not in summarize([samples([True])])["math_dapo"]
    one_turn = dataclasses.replace(samples([True, False]), turns=[1, 1], tool_calls=[0, 0], first_acc=[True, False])
    assert "turns_mean" not in summarize([one_turn])["math_dapo"]  # single-step: nothing to add
    retried = ProblemSamples("repair", [True, True], ["P", "P"], [9, 9], [False] * 2, [False] * 2, turns=[1, 2])
    retried = dataclasses.replace(retried, tool_calls=[0, 0], first_acc=[True, False])
    repair = summarize([retried])["repair"]
    # Both right in the end (avg@2 1.0); the second was wrong at first: first answers 1 of 2 right.
    assert (repair["avg@2"], repair["first_answer_acc"]) == (1.0, 0.5)


def test_summarize_refuses_mixed_sample_counts():
    with pytest.raises(ValueError, match=r"'aime' has problems with different sample counts \[2, 3\]"):
        summarize([samples([True, False], source="aime"), samples([True, False, True], source="aime")])


def test_problem_samples_need_one_value_per_sample():
    with pytest.raises(ValueError, match="same, non-zero number"):
        ProblemSamples(
            "aime", acc=[True, False], pred=["1"], length=[1, 2], truncated=[False, False], timed_out=[False, False]
        )


def test_problems_with_broken_tests_are_counted():
    broken = ProblemSamples(
        "code", [False, False], [None, None], [3, 3], [False, False], [False, False], broken_task="why"
    )
    fine = ProblemSamples("code", [True, False], ["P", "F"], [3, 3], [False, False], [False, False])
    metrics = summarize([broken, fine])["code"]
    # Its samples count as wrong: avg@2 = (0/2 + 1/2) / 2
    assert (metrics[Metrics.BROKEN_TASKS], metrics["avg@2"]) == (1, 0.25)
    assert Metrics.BROKEN_TASKS not in summarize([fine])["code"]


def test_summarize_reports_a_games_invalid_moves_and_the_episodes_whose_environment_failed():
    def game(acc, invalid_moves, env_errors=()):
        record = ProblemSamples("game", acc, [None] * 2, [9, 9], [False] * 2, [False] * 2, turns=[3, 2])
        return dataclasses.replace(record, invalid_moves=invalid_moves, env_errors=list(env_errors))

    metrics = summarize([game([True, False], [0, 3]), game([False, False], [1, 0], ["", "server_down"])])["game"]
    assert metrics["invalid_moves"] == pytest.approx((0 + 3 + 1 + 0) / 4)
    assert metrics["env_errors"] == 1  # scored wrong, counted
    assert "invalid_moves" not in summarize([samples([True])])["math_dapo"]


def test_a_game_against_fixed_opponents_reports_its_draws_and_the_elo_ratings():
    def versus(opponent, outcomes):
        n = len(outcomes)
        acc = [outcome == Outcome.WIN for outcome in outcomes]
        return ProblemSamples(
            f"nim/vs_{opponent}", acc, [None] * n, [5] * n, [False] * n, [False] * n, outcomes=outcomes
        )

    even = summarize([versus("random_legal", ["win", "loss"]), versus("random_legal", ["draw", "draw"])], elo_anchor="random_legal")  # fmt: skip
    # A win, a loss and two draws: 2 of 4 points, even with the anchor, so both are at the anchor's rating.
    assert even["nim"] == pytest.approx({"elo": 1000.0, "elo/random_legal": 1000.0})
    assert even["nim/vs_random_legal"]["avg@2"] == 0.25  # wins: (1/2 + 0/2) / 2
    assert even["nim/vs_random_legal"]["draw_rate"] == 0.5  # 2 of 4

    games = [versus("random_legal", ["win", "win", "win", "loss"]), versus("heuristic", ["loss", "loss", "draw", ""])]
    ratings = summarize(games, elo_anchor="random_legal")["nim"]
    # The game whose environment failed ("") has no result: 7 games rated, a draw half a point.
    played = [("model", "random_legal", 1)] * 3 + [("model", "random_legal", 0)]
    played += [("model", "heuristic", 0)] * 2 + [("model", "heuristic", 0.5)]
    expected = elo_ratings(played, anchor="random_legal")
    assert ratings == pytest.approx({"elo": expected["model"], "elo/random_legal": 1000.0, "elo/heuristic": expected["heuristic"]})  # fmt: skip
    assert ratings["elo/heuristic"] > ratings["elo"] > 1000.0  # it beat the random mover and lost to best play
    # An anchor that did not play: the prior's virtual player stays at 1000.
    assert summarize(games, elo_anchor="nobody")["nim"]["elo"] == pytest.approx(elo_ratings(played)["model"])
    assert "nim" not in summarize([samples([True])]) and "draw_rate" not in summarize([samples([True])])["math_dapo"]
