"""Tests for the DAPO-format loader and the arithmetic generator."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pandas as pd
import pytest

from dapo_rllib.tasks.data import (
    ARITHMETIC_PROMPT_TEMPLATE,
    DAPO_PROMPT_TEMPLATE,
    MathProblem,
    generate_arithmetic_problems,
    ground_truth_to_str,
    load_math_dataset,
    parse_arithmetic_question,
    problem_to_row,
    write_jsonl,
)
from tests.support.paths import AIME_2024

TEMPLATE_HEAD, TEMPLATE_TAIL = DAPO_PROMPT_TEMPLATE.split("{problem}")


def _row(content: str = "What is 1 + 1?", ground_truth: object = "2") -> dict:
    return {
        "data_source": "math_dapo",
        "prompt": [{"role": "user", "content": content}],
        "ability": "MATH",
        "reward_model": {"ground_truth": ground_truth, "style": "rule"},
        "extra_info": {"index": 0},
    }


# --- DAPO-format files -------------------------------------------------------


def test_aime_loads_30_distinct_problems_in_dapo_format():
    problems = load_math_dataset(AIME_2024)
    assert len(problems) == 30
    assert [p.index for p in problems] == list(range(30))
    assert len({p.prompt_text for p in problems}) == 30
    for p in problems:
        assert p.data_source == "math_dapo"
        assert isinstance(p.ground_truth, str) and p.ground_truth.isdigit()
        assert isinstance(p.messages, tuple) and len(p.messages) == 1
        message = p.messages[0]
        assert type(message) is dict and message["role"] == "user"
        assert type(message["content"]) is str
        assert p.prompt_text.startswith(TEMPLATE_HEAD) and p.prompt_text.endswith(TEMPLATE_TAIL)
    # Row 0 of the file is the "largest possible real part" problem (answer 540).
    assert problems[0].ground_truth == "540"


def test_aime_problems_count_their_32_copies():
    problems = load_math_dataset(AIME_2024)
    assert [p.copies for p in problems] == [32] * 30
    assert sum(p.copies for p in problems) == len(pd.read_parquet(AIME_2024)) == 960


def test_copies_count_repeats_per_problem(tmp_path):
    rows = [_row("A", "1"), _row("B", "2"), _row("A", "1"), _row("A", "3"), _row("A", "1")]
    path = tmp_path / "d.jsonl"
    write_jsonl(rows, path)
    assert [(p.prompt_text, p.ground_truth, p.copies) for p in load_math_dataset(path)] == [
        ("A", "1", 3),
        ("B", "2", 1),
        ("A", "3", 1),
    ]


def test_copies_take_part_in_equality_and_hash():
    once = generate_arithmetic_problems("test", 1)[0]
    same = MathProblem(once.messages, once.ground_truth, once.data_source, once.index)
    twice = replace(once, copies=2)
    assert once.copies == 1 and once == same and hash(once) == hash(same)
    assert once != twice
    assert len({once, same, twice}) == 2


def test_aime_dedup_count_is_logged(caplog):
    with caplog.at_level(logging.DEBUG, logger="dapo_rllib.tasks.data"):
        load_math_dataset(AIME_2024)
    assert any("930 duplicates removed" in r.getMessage() for r in caplog.records)


def test_dedup_keeps_first_occurrence_order_and_distinguishes_answers(tmp_path):
    rows = [_row("A", "1"), _row("B", "2"), _row("A", "1"), _row("A", "3"), _row("B", "2")]
    path = tmp_path / "d.jsonl"
    write_jsonl(rows, path)
    problems = load_math_dataset(path)
    assert [(p.prompt_text, p.ground_truth) for p in problems] == [("A", "1"), ("B", "2"), ("A", "3")]


def test_jsonl_round_trip_is_exact(tmp_path):
    original = load_math_dataset(AIME_2024) + generate_arithmetic_problems("test", 5)
    # Re-index as one dataset: the index is the position after deduplication.
    original = [MathProblem(p.messages, p.ground_truth, p.data_source, i) for i, p in enumerate(original)]
    path = tmp_path / "sub" / "round_trip.jsonl"
    write_jsonl([problem_to_row(p) for p in original], path)
    assert load_math_dataset(path) == original


def test_parquet_round_trip_and_missing_data_source_defaults(tmp_path):
    problems = generate_arithmetic_problems("train", 4)
    rows = [problem_to_row(p) for p in problems]
    path = tmp_path / "d.parquet"
    pd.DataFrame(rows).to_parquet(path)
    assert load_math_dataset(path) == problems

    pd.DataFrame(rows).drop(columns=["data_source"]).to_parquet(path)
    assert {p.data_source for p in load_math_dataset(path)} == {"math_dapo"}


def test_missing_file(tmp_path):
    path = tmp_path / "nope.parquet"
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        load_math_dataset(path)


def test_unsupported_suffix(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("a,b\n")
    with pytest.raises(ValueError, match=r"'\.csv'.*\.parquet.*\.jsonl"):
        load_math_dataset(path)


def test_empty_jsonl(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(ValueError, match="empty.jsonl"):
        load_math_dataset(path)


def test_empty_parquet_file_and_zero_rows(tmp_path):
    path = tmp_path / "empty.parquet"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match="empty.parquet"):
        load_math_dataset(path)
    pd.DataFrame({"prompt": [], "reward_model": []}).to_parquet(path)
    with pytest.raises(ValueError, match="empty.parquet"):
        load_math_dataset(path)


def test_parquet_missing_column(tmp_path):
    path = tmp_path / "no_rm.parquet"
    pd.DataFrame([_row()]).drop(columns=["reward_model"]).to_parquet(path)
    with pytest.raises(ValueError) as excinfo:
        load_math_dataset(path)
    message = str(excinfo.value)
    assert "'reward_model'" in message and "no_rm.parquet" in message and "extra_info" in message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("540", "540"),
        (" 1/2 ", " 1/2 "),
        (42, "42"),
        (-7, "-7"),
        (540.0, "540"),
        (-3.0, "-3"),
        (0.5, "0.5"),
        (0.1, "0.1"),
        (2.25e-7, "2.25e-07"),
    ],
)
def test_ground_truth_to_str(value, expected):
    assert ground_truth_to_str(value, "row 0 of f.jsonl") == expected


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (None, ValueError, "missing"),
        (float("nan"), ValueError, "missing"),
        (float("inf"), ValueError, "finite"),
        (True, TypeError, "got bool True"),
        ([540], TypeError, r"got list \[540\]"),
    ],
)
def test_ground_truth_to_str_rejects(value, error, message):
    with pytest.raises(error, match=rf"^row 3 of f\.jsonl: .*{message}"):
        ground_truth_to_str(value, "row 3 of f.jsonl")


def test_int_ground_truth_is_converted_and_logged(tmp_path, caplog):
    path = tmp_path / "int_gt.jsonl"
    write_jsonl([_row(), _row("What is 40 + 2?", 42), _row("What is 0.5 + 0?", 0.5)], path)
    with caplog.at_level(logging.WARNING, logger="dapo_rllib.tasks.data"):
        problems = load_math_dataset(path)
    assert [p.ground_truth for p in problems] == ["2", "42", "0.5"]
    assert any("Converted 2 numeric ground truths" in r.getMessage() for r in caplog.records)


def test_float_ground_truth_column_parquet(tmp_path):
    # A pandas float column (as exported by a careless pipeline): 540 is stored as 540.0.
    path = tmp_path / "float_gt.parquet"
    pd.DataFrame([_row("A", 540.0), _row("B", 0.5), _row("C", 1e3)]).to_parquet(path)
    assert [p.ground_truth for p in load_math_dataset(path)] == ["540", "0.5", "1000"]


def test_bool_ground_truth_is_an_error(tmp_path):
    path = tmp_path / "bool_gt.jsonl"
    write_jsonl([_row(), _row("Is 2 even?", True)], path)
    with pytest.raises(TypeError, match=r"row 1\b.*string or a number, got bool True"):
        load_math_dataset(path)


def test_missing_ground_truth_names_the_row(tmp_path):
    path = tmp_path / "none_gt.parquet"
    pd.DataFrame([_row(ground_truth="2"), _row("B", None)]).to_parquet(path)
    with pytest.raises(ValueError, match=r"row 1 of .*none_gt\.parquet: ground truth is missing"):
        load_math_dataset(path)


def test_non_utf8_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    lines = [json.dumps(_row("A")), json.dumps(_row("B")), json.dumps(_row("Caf\u00e9"), ensure_ascii=False)]
    path.write_bytes("\n".join(lines).encode("latin-1"))
    with pytest.raises(ValueError, match=r"line 3 of .*latin1\.jsonl is not valid UTF-8 \(byte 0xe9"):
        load_math_dataset(path)


def test_jsonl_with_byte_order_mark_loads(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(_row("A")).encode() + b"\n")
    assert [p.prompt_text for p in load_math_dataset(path)] == ["A"]


@pytest.mark.parametrize(
    "prompt",
    [[], "What is 1 + 1?", [{"role": "user"}], [{"role": "user", "content": 3}], None],
)
def test_bad_prompt(tmp_path, prompt):
    path = tmp_path / "bad_prompt.jsonl"
    row = _row()
    row["prompt"] = prompt
    write_jsonl([_row(), row], path)
    with pytest.raises(ValueError, match=r"row 1\b.*prompt"):
        load_math_dataset(path)


def test_bad_reward_model(tmp_path):
    path = tmp_path / "bad_rm.jsonl"
    row = _row()
    row["reward_model"] = {"style": "rule"}
    write_jsonl([row], path)
    with pytest.raises(ValueError, match=r"row 0\b.*ground_truth"):
        load_math_dataset(path)


def test_bad_json_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_row()) + "\n" + '{"prompt": [oops\n')
    with pytest.raises(ValueError, match=r"line 2 of .*bad\.jsonl"):
        load_math_dataset(path)


def test_non_object_json_line(tmp_path):
    path = tmp_path / "list.jsonl"
    path.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="line 1 .*expected a JSON object"):
        load_math_dataset(path)


def test_problems_are_hashable():
    problems = generate_arithmetic_problems("test", 10)
    assert len(set(problems)) == 10


# --- Arithmetic generator ----------------------------------------------------


def _questions(problems: list[MathProblem]) -> set[str]:
    return {p.prompt_text for p in problems}


def test_arithmetic_splits_are_disjoint_and_complete():
    train = generate_arithmetic_problems("train")
    test = generate_arithmetic_problems("test")
    assert not _questions(train) & _questions(test)
    assert len(train) + len(test) == 2 * 100 * 10  # a in [0, 99], op in {+, -}, b in [0, 9]
    assert len(_questions(train)) == len(train) and len(_questions(test)) == len(test)
    assert 150 <= len(test) <= 250  # about a tenth


def test_arithmetic_is_deterministic_and_seed_changes_order():
    assert generate_arithmetic_problems("train", 50) == generate_arithmetic_problems("train", 50)
    first = generate_arithmetic_problems("test", seed=0)
    other = generate_arithmetic_problems("test", seed=1)
    assert [p.prompt_text for p in first] != [p.prompt_text for p in other]
    assert _questions(first) == _questions(other)


def test_arithmetic_num_problems_is_a_prefix():
    full = generate_arithmetic_problems("train", seed=3)
    assert generate_arithmetic_problems("train", 7, seed=3) == full[:7]


def test_arithmetic_ground_truth_and_format():
    for p in generate_arithmetic_problems("train", 300) + generate_arithmetic_problems("test", 150):
        a, op, b = parse_arithmetic_question(p.prompt_text)
        assert 0 <= a <= 99 and 0 <= b <= 9
        assert p.ground_truth == str(a + b if op == "+" else a - b)
        assert p.data_source == "arithmetic"
        assert p.messages == (
            {"role": "user", "content": ARITHMETIC_PROMPT_TEMPLATE.format(problem=f"What is {a} {op} {b}?")},
        )


def test_arithmetic_question_helpers():
    question = parse_arithmetic_question("What is 47 + 8?")
    assert tuple(question) == (47, "+", 8)
    assert f"{question.expression} = {question.result}" == "47 + 8 = 55"
    assert parse_arithmetic_question("What is 3 - 7?").result == -4


@pytest.mark.parametrize(
    "text", ["What is 2 * 3?", "Find x.", "What is 1 + 1? What is 2 + 2?", "What is 100 + 1?", "What is 5 + 10?"]
)
def test_parse_arithmetic_question_rejects_other_text(text):
    with pytest.raises(ValueError):
        parse_arithmetic_question(text)


def test_arithmetic_bad_arguments():
    n_test = len(generate_arithmetic_problems("test"))
    with pytest.raises(ValueError, match=f"num_problems={n_test + 1}.*{n_test}"):
        generate_arithmetic_problems("test", n_test + 1)
    with pytest.raises(ValueError, match="'validation'"):
        generate_arithmetic_problems("validation")
