"""Tests for dapo_rllib.tasks.rewards.math_dapo.

Every expected value below was worked out by hand from the reference scorer,
verl/utils/reward_score/math_dapo.py (volcengine/verl), step by step: last 300
characters -> last ``Answer\\s*:\\s*([^\\n]+)`` match -> normalize_final_answer on both
sides -> exact string comparison. Comments name the step (or quirk) that decides
each case.
"""

from __future__ import annotations

import pytest

from dapo_rllib.tasks.rewards.math_dapo import compute_score, normalize_final_answer

PROMPTISH = "Let me work through this step by step.\nSo the total is 540.\n"


def assert_scored(result: dict, correct: bool, pred: str) -> None:
    """Check the whole result dict, including the +1/-1 mapping and value types."""
    assert set(result) == {"score", "acc", "pred"}
    assert result["acc"] is correct
    assert isinstance(result["score"], float)
    assert result["score"] == (1.0 if correct else -1.0)
    assert result["pred"] == pred


# --- basic right / wrong -------------------------------------------------------------


def test_correct_answer_scores_plus_one() -> None:
    assert_scored(compute_score(PROMPTISH + "Answer: 540", "540"), True, "540")


def test_wrong_answer_scores_minus_one() -> None:
    assert_scored(compute_score(PROMPTISH + "Answer: 541", "540"), False, "541")


def test_only_answer_line_counts_not_the_reasoning() -> None:
    # "540" appears in the reasoning, but the extracted answer is the Answer: line.
    assert_scored(compute_score(PROMPTISH + "Answer: 17", "540"), False, "17")


# --- reference quirks ----------------------------------------------------------------


def test_trailing_period_is_kept_and_scored_wrong() -> None:
    # Quirk: nothing strips a trailing ".", and "540." is not all digits, so the
    # prediction stays "540." and differs from "540".
    assert_scored(compute_score("Answer: 540.", "540"), False, "540.")


def test_period_inside_dollars_is_fine() -> None:
    # The ".$" -> "$" substitution removes a period right before a closing dollar.
    assert_scored(compute_score("Answer: $540.$", "540"), True, "540")


def test_period_after_dollars_is_discarded() -> None:
    # The $...$ rewrite keeps only the first dollar pair and drops what surrounds it,
    # so unlike "Answer: 540." the trailing period vanishes here.
    assert_scored(compute_score("Answer: $540$.", "540"), True, "540")


def test_bare_boxed_without_answer_line_is_invalid() -> None:
    # Quirk: the default mode only looks for "Answer:"; a \boxed{} alone is ignored.
    result = compute_score("Therefore the result is \\boxed{540}.", "540")
    assert_scored(result, False, "[INVALID]")


def test_answer_without_colon_is_invalid() -> None:
    # The pattern needs the colon: "The answer is 540" does not match.
    assert_scored(compute_score("The answer is 540", "540"), False, "[INVALID]")


def test_everything_after_the_colon_is_the_prediction() -> None:
    # "Final Answer: The final answer is 12" captures the whole sentence; with spaces
    # removed it becomes "Thefinalansweris12", which is not "12".
    result = compute_score("Final Answer: The final answer is 12", "12")
    assert_scored(result, False, "Thefinalansweris12")


def test_answer_on_the_line_after_the_colon_is_found() -> None:
    # The \s* after the colon also matches newlines, so the capture starts on the
    # next non-blank line.
    assert_scored(compute_score("Answer:\n\n12\n", "12"), True, "12")


def test_invalid_ground_truth_matches_missing_answer() -> None:
    # Quirk: with no Answer: line the prediction is the literal "[INVALID]", which
    # the normaliser leaves unchanged, so a ground truth "[INVALID]" is "correct".
    assert_scored(compute_score("no answer here", "[INVALID]"), True, "[INVALID]")


# --- which Answer: line --------------------------------------------------------------


def test_last_answer_line_wins() -> None:
    text = "Answer: 12\nWait, I made a mistake.\nAnswer: 540"
    assert_scored(compute_score(text, "540"), True, "540")


def test_last_answer_line_wins_even_when_it_is_wrong() -> None:
    text = "Answer: 540\nHmm, let me recheck.\nAnswer: 12"
    assert_scored(compute_score(text, "540"), False, "12")


@pytest.mark.parametrize("text", ["answer : 12", "ANSWER:12", "aNsWeR\t:  12", "final answer: 12"])
def test_answer_marker_is_case_insensitive_and_whitespace_tolerant(text: str) -> None:
    assert_scored(compute_score(text, "12"), True, "12")


# --- the 300-character window --------------------------------------------------------


def test_answer_before_last_300_chars_is_ignored() -> None:
    # The answer line is followed by 300 characters of text, so it lies entirely
    # outside the window.
    text = "Answer: 540\n" + "x" * 300
    assert_scored(compute_score(text, "540"), False, "[INVALID]")


def test_answer_exactly_inside_window_is_seen() -> None:
    # "Answer: 540\n" is 12 characters; 12 + 288 = 300, so the "A" is the first
    # character of the window. The long prefix is cut away.
    line = "Answer: 540\n"
    text = "y" * 5000 + line + "x" * (300 - len(line))
    assert_scored(compute_score(text, "540"), True, "540")


def test_answer_cut_by_window_edge_is_lost() -> None:
    # One more filler character pushes the "A" out: the window starts with
    # "nswer: 540", which no longer matches the pattern.
    line = "Answer: 540\n"
    text = "y" * 5000 + line + "x" * (300 - len(line) + 1)
    assert_scored(compute_score(text, "540"), False, "[INVALID]")


def test_last_match_wins_within_window_after_long_prefix() -> None:
    # The long prefix is cut off; both answers lie inside the 300-char window and the
    # later one wins.
    text = "z" * 1000 + "Answer: 1\n" + "x" * 100 + "\nAnswer: 2"
    assert_scored(compute_score(text, "2"), True, "2")


def test_huge_response_is_scored_from_its_tail() -> None:
    # A multi-megabyte response costs no more regex work than 300 characters.
    text = ("Answer: 999\n" + "$\\text{" * 10) * 20_000 + "\nAnswer: 7"
    assert_scored(compute_score(text, "7"), True, "7")


# --- normalisation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "ground_truth", "pred"),
    [
        # Commas are dropped when the rest is all digits (thousands separators) ...
        ("1,000", "1000", "1000"),
        # ... on the ground-truth side too.
        ("1000", "1,000", "1000"),
        # \boxed{...} is unwrapped.
        ("\\boxed{12}", "12", "12"),
        # $...$ is unwrapped.
        ("$12$", "12", "12"),
        # Only the text after the last "=" is kept.
        ("x = 12", "12", "12"),
        ("$x = y = 12$", "12", "12"),  # -> " 12$": the lone "$" is removed later
        # \text{...} is unwrapped.
        ("\\text{12}", "12", "12"),
        # Unit words are deleted after spaces are removed: "12cm" -> "12".
        ("12 cm", "12", "12"),
        ("12 \\text{ cm}", "12", "12"),  # -> "12\text{cm}" -> "12\text{}" -> "12"
        ("12 \\text{m}", "12", "12"),  # "\text{m}" -> "\text{}" -> deleted
        ("12 degrees", "12", "12"),
        ("90^\\circ", "90", "90"),
        ("45 \\mbox{ minutes}", "45", "45"),  # mbox -> text, "minutes" deleted, unwrapped
        # Brace shorthand is expanded on either side.
        ("\\frac12", "\\frac{1}{2}", "\\frac{1}{2}"),
        ("\\sqrt2", "\\sqrt{2}", "\\sqrt{2}"),
        # \! thin space after a thousands comma is deleted.
        ("1,\\!000", "1000", "1000"),
        # Escaped dollar signs are deleted.
        ("\\$5", "5", "5"),
    ],
)
def test_normalisation_makes_equivalent_forms_match(answer: str, ground_truth: str, pred: str) -> None:
    assert_scored(compute_score(f"Work.\nAnswer: {answer}", ground_truth), True, pred)


@pytest.mark.parametrize(
    ("answer", "ground_truth", "pred"),
    [
        # "apples" is not in the list of removed unit words.
        ("5 apples", "5", "5apples"),
        # A comma is only dropped when everything else is a digit.
        ("1,000.5", "1000.5", "1,000.5"),
        # The digit check runs before the final strip: a CRLF line ending leaves
        # "1,000\r", which is not all digits, so the comma survives.
        ("1,000\r", "1000", "1,000"),
    ],
)
def test_normalisation_leaves_other_forms_alone(answer: str, ground_truth: str, pred: str) -> None:
    assert_scored(compute_score(f"Answer: {answer}\n", ground_truth), False, pred)


def test_crlf_line_ending_is_stripped_for_plain_integers() -> None:
    # [^\n]+ captures the "\r", but the final strip removes it.
    assert_scored(compute_score("Answer: 1000\r\n", "1000"), True, "1000")


def test_comma_separated_list_collapses_to_one_number() -> None:
    # Quirk: "1,2" is all digits once commas go, so it becomes "12" and equals 12.
    assert_scored(compute_score("Answer: 1,2", "12"), True, "12")


def test_unit_words_are_cut_out_of_other_words() -> None:
    # Quirk: plain substring deletion removes "gm" from "\sigma". Both sides are
    # mangled the same way, so the answer still matches, but the pred shows it.
    assert_scored(compute_score("Answer: \\sigma", "\\sigma"), True, "\\sia")


def test_first_dollar_pair_only() -> None:
    # Only the first $...$ pair survives: "$3$ and $4$" -> "3".
    assert_scored(compute_score("Answer: $3$ and $4$", "3"), True, "3")


def test_normalize_final_answer_examples() -> None:
    assert normalize_final_answer("  x = \\boxed{1,234} ") == "1234"
    assert normalize_final_answer("an answer of 7") == "answerof7"  # "an " deleted
    assert normalize_final_answer("$\\frac1$") == "\\frac{1}{}"  # frac sees the "$"


# --- strict_box_verify mode ----------------------------------------------------------


def test_strict_box_uses_last_box_and_raw_comparison() -> None:
    text = "First \\boxed{1}, then finally \\boxed{540}"
    assert_scored(compute_score(text, "540", strict_box_verify=True), True, "540")


def test_strict_box_does_not_normalise() -> None:
    # No normalisation in strict mode: " 540 " (with spaces) is not "540".
    result = compute_score("\\boxed{ 540 }", "540", strict_box_verify=True)
    assert_scored(result, False, " 540 ")


def test_strict_box_handles_nested_braces() -> None:
    result = compute_score("so \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}", strict_box_verify=True)
    assert_scored(result, True, "\\frac{1}{2}")


def test_strict_box_ignores_answer_line() -> None:
    result = compute_score("Answer: 540", "540", strict_box_verify=True)
    assert_scored(result, False, "[INVALID]")


def test_strict_box_only_searches_last_100_chars() -> None:
    result = compute_score("\\boxed{540}" + "x" * 100, "540", strict_box_verify=True)
    assert_scored(result, False, "[INVALID]")


def test_strict_box_unclosed_last_box_hides_earlier_one() -> None:
    # The search starts at the *last* "\boxed{"; it never closes, so no answer, even
    # though an earlier complete box exists.
    result = compute_score("\\boxed{5} or \\boxed{6", "5", strict_box_verify=True)
    assert_scored(result, False, "[INVALID]")


def test_pause_tokens_index_moves_strict_window() -> None:
    text = "x" * 50 + "\\boxed{7}" + "y" * 150  # 209 chars, box at 50..58
    # Default window (last 100 chars) misses the box.
    assert compute_score(text, "7", strict_box_verify=True)["pred"] == "[INVALID]"
    # Last pause index 150 -> window starts at 150 - 100 = 50, where the box starts.
    result = compute_score(text, "7", strict_box_verify=True, pause_tokens_index=[0, 0, 0, 150])
    assert_scored(result, True, "7")


def test_pause_tokens_index_is_relative_to_300_char_window() -> None:
    # Quirk: the index is applied after truncation to 300 chars. The box sits at
    # offset 1050 of the full response; an index of 1150 (start 1050) would find it
    # in the full text, but slicing the 300-char window at 1050 gives "".
    text = "z" * 1050 + "\\boxed{7}" + "y" * 150
    result = compute_score(text, "7", strict_box_verify=True, pause_tokens_index=[0, 0, 0, 1150])
    assert_scored(result, False, "[INVALID]")
    # In window coordinates the box is at 1050 - (1209 - 300) = 141; index 241 finds it.
    result = compute_score(text, "7", strict_box_verify=True, pause_tokens_index=[0, 0, 0, 241])
    assert_scored(result, True, "7")


def test_pause_tokens_index_must_have_four_entries() -> None:
    with pytest.raises(ValueError, match="4"):
        compute_score("\\boxed{7}", "7", strict_box_verify=True, pause_tokens_index=[150])


# --- input validation ----------------------------------------------------------------


@pytest.mark.parametrize(("bad", "type_name"), [(540, "int"), (None, "NoneType"), (b"540", "bytes")])
def test_non_str_ground_truth_raises_type_error(bad: object, type_name: str) -> None:
    with pytest.raises(TypeError) as excinfo:
        compute_score("Answer: 540", bad)  # type: ignore[arg-type]
    message = str(excinfo.value)
    assert "ground_truth" in message
    assert type_name in message
    assert "string" in message


@pytest.mark.parametrize(
    ("bad", "type_name"),
    [(None, "NoneType"), (["Answer: 540"], "list"), (b"Answer: 540", "bytes")],
)
def test_non_str_solution_raises_type_error(bad: object, type_name: str) -> None:
    with pytest.raises(TypeError) as excinfo:
        compute_score(bad, "540")  # type: ignore[arg-type]
    message = str(excinfo.value)
    assert "solution_str" in message
    assert type_name in message
    assert "string" in message
