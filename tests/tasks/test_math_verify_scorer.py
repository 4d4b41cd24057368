"""Tests for dapo_rllib.tasks.rewards.math_verify_scorer (symbolic answer checking)."""

from __future__ import annotations

import pytest

from dapo_rllib.tasks.rewards import math_dapo
from dapo_rllib.tasks.rewards.math_verify_scorer import RESPONSE_WINDOW_CHARS, compute_score

REASONING = "Let me work through this step by step.\nSo the total is 540.\n"


def assert_scored(result: dict, correct: bool, pred: str | None) -> None:
    """Check the whole result dict, including the +1/-1 mapping and value types."""
    assert set(result) == {"score", "acc", "pred"}
    assert result["acc"] is correct
    assert isinstance(result["score"], float)
    assert result["score"] == (1.0 if correct else -1.0)
    assert result["pred"] == pred


@pytest.mark.parametrize(
    ("answer", "ground_truth", "pred"),
    [
        ("0.5", "\\frac{1}{2}", "1/2"),
        ("\\frac{1}{2}", "0.5", "1/2"),
        ("\\dfrac{3}{4}", "0.75", "3/4"),
        ("50\\%", "\\frac{1}{2}", "1/2"),
        ("\\sqrt{12}", "2\\sqrt{3}", "2*sqrt(3)"),
        ("2\\sqrt{3}", "$\\sqrt{12}$", "2*sqrt(3)"),
        ("(1, 2]", "\\left(1,2\\right]", "Interval.Lopen(1, 2)"),
        ("\\{2, 1\\}", "\\{1,2\\}", "{1, 2}"),
        ("x = 5", "5", "5"),
        ("1,000", "1000", "1000"),
    ],
)
def test_equivalent_forms_on_the_answer_line_are_correct(answer, ground_truth, pred):
    assert_scored(compute_score(f"{REASONING}Answer: {answer}", ground_truth), True, pred)


def test_boxed_answer_without_answer_line_is_correct():
    response = REASONING + "Hence the result is $\\boxed{\\frac{\\sqrt{3}}{2}}$."
    assert_scored(compute_score(response, "\\frac{\\sqrt{3}}{2}"), True, "sqrt(3)/2")
    # The reference scorer needs the Answer: line; this is where the two differ.
    assert math_dapo.compute_score(response, "\\frac{\\sqrt{3}}{2}")["acc"] is False


def test_answer_line_forms_that_math_dapo_rejects():
    # math_dapo keeps the trailing period and scores "540." wrong; math-verify reads 540.
    assert_scored(compute_score(REASONING + "Answer: 540.", "540"), True, "540")
    assert_scored(compute_score(REASONING + "**Answer:** $540$", "540"), True, "540")
    assert_scored(compute_score(REASONING + "final answer: \\boxed{540}", "540"), True, "540")


def test_last_answer_line_wins_over_earlier_ones_and_boxes():
    response = "Answer: 3\nWait, I made an error: \\boxed{3}.\nAnswer: 4"
    assert_scored(compute_score(response, "4"), True, "4")
    assert_scored(compute_score(response, "3"), False, "4")


def test_unparsable_answer_line_falls_back_to_the_response():
    # An empty Answer: line yields nothing, so the boxed answer above it is used.
    assert_scored(compute_score("So \\boxed{12}.\nAnswer: \n", "12"), True, "12")


@pytest.mark.parametrize(
    ("response", "ground_truth", "pred"),
    [
        (REASONING + "Answer: 541", "540", "541"),
        (REASONING + "Answer: \\frac{1}{3}", "0.3333", "1/3"),
        (REASONING + "Answer: [1, 2]", "(1,2]", "Interval(1, 2)"),
        (REASONING + "Answer: 2\\sqrt{2}", "2\\sqrt{3}", "2*sqrt(2)"),
    ],
)
def test_wrong_answers_score_minus_one(response, ground_truth, pred):
    assert_scored(compute_score(response, ground_truth), False, pred)


@pytest.mark.parametrize("response", ["", "I do not know.", "Answer:", "Answer: \n"])
def test_no_answer_gives_pred_none(response):
    assert_scored(compute_score(response, "540"), False, None)


def test_equal_answers_give_equal_preds():
    forms = ["Answer: 0.5", "Answer: \\frac{1}{2}", "Answer: $\\frac12$", "The answer is $\\boxed{0.5}$."]
    assert {compute_score(form, "1")["pred"] for form in forms} == {"1/2"}
    radicals = ["Answer: \\sqrt{12}", "Answer: 2\\sqrt{3}", "\\boxed{2 \\sqrt{3}}"]
    assert {compute_score(form, "1")["pred"] for form in radicals} == {"2*sqrt(3)"}


def test_only_the_tail_window_is_read():
    padding = " and so on." * (RESPONSE_WINDOW_CHARS // 11)
    padding += "." * (RESPONSE_WINDOW_CHARS - 1 - len(padding))
    assert_scored(compute_score("7" + padding, "7"), True, "7")
    # One more character and the answer lies outside the window.
    assert_scored(compute_score("7." + padding, "7"), False, None)


def test_megabyte_response_is_scored_by_its_tail():
    assert_scored(compute_score("1+" * 1_000_000 + "\nAnswer: 7", "7"), True, "7")


def test_bad_arguments():
    with pytest.raises(TypeError, match="bytes"):
        compute_score(b"Answer: 1", "1")
    with pytest.raises(TypeError, match="int"):
        compute_score("Answer: 1", 1)
    with pytest.raises(ValueError, match="ground truth ''"):
        compute_score("Answer: 1", "")
