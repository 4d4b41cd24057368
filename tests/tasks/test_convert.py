"""Tests for converting user files of problems and answers into DAPO-format parquet."""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from transformers import AutoTokenizer

from dapo_rllib.cli.main import main
from dapo_rllib.tasks.data import (
    DAPO_PROMPT_TEMPLATE,
    MathProblem,
    add_convert_arguments,
    convert_to_dapo,
    load_math_dataset,
    problem_to_row,
    render_prompt_ids,
    run_convert,
    write_jsonl,
)
from tests.support.paths import AIME_2024


def _user(content: str) -> tuple[dict, ...]:
    return ({"role": "user", "content": content},)


def _dapo(question: str) -> tuple[dict, ...]:
    return _user(DAPO_PROMPT_TEMPLATE.format(problem=question))


def _loaded(path: Path) -> list[tuple[tuple[dict, ...], str, str]]:
    return [(p.messages, p.ground_truth, p.data_source) for p in load_math_dataset(path)]


# --- plain question/answer files ---------------------------------------------------------------


MIXED_ROWS = [
    {"problem": "What is 2 + 2?", "answer": "4"},  # 0 kept
    {"problem": "What is 2 + 2?", "answer": "4"},  # 1 duplicate of 0
    {"problem": "What is 3 + 3?", "answer": 6},  # 2 kept, numeric
    {"problem": "What is 5 + 5?"},  # 3 missing answer
    {"problem": "What is 6 + 6?", "answer": "  "},  # 4 blank answer
    {"problem": "What is 2 + 2?", "answer": "5"},  # 5 kept, conflicts with 0
    {"problem": "", "answer": "1"},  # 6 missing question
    {"problem": "Half of 1?", "answer": 0.5},  # 7 kept, numeric
    {"problem": "What is 3 + 3?", "answer": 6.0},  # 8 duplicate of 2 once written as "6"
    {"problem": "Ten times 54?", "answer": 540.0},  # 9 kept, numeric, written "540"
]


def test_jsonl_drops_counts_and_round_trip(tmp_path, caplog):
    source, output = tmp_path / "mixed.jsonl", tmp_path / "out" / "sub" / "mixed.parquet"
    write_jsonl(MIXED_ROWS, source)
    with caplog.at_level(logging.WARNING, logger="dapo_rllib.tasks.data"):
        report = convert_to_dapo(source, output)

    assert (report.question_field, report.answer_field) == ("problem", "answer")
    assert (report.rows_read, report.rows_written) == (10, 5)
    assert report.dropped == {"duplicate": 2, "missing answer": 2, "missing question": 1}
    assert report.examples == {"duplicate": [1, 8], "missing answer": [3, 4], "missing question": [6]}
    assert report.numeric_answers_converted == 3
    assert (report.conflicting_answers, report.conflicting_answer_examples) == (1, [5])
    assert report.rows_written + sum(report.dropped.values()) == report.rows_read
    assert any("conflicting answers: 1 (e.g. row 5)" in r.getMessage() for r in caplog.records)
    assert report.format() == (
        f"Conversion of {source} to {output}\n"
        "  read 10 rows (question field 'problem', answer field 'answer')\n"
        "  wrote 5 rows\n"
        "  dropped 5 rows:\n"
        "    missing question: 1 (e.g. row 6)\n"
        "    missing answer: 2 (e.g. rows 3, 4)\n"
        "    duplicate: 2 (e.g. rows 1, 8)\n"
        "  numeric answers written as strings: 3\n"
        "  warning: conflicting answers: 1 (e.g. row 5): rows that repeat an earlier prompt with a "
        "different answer, all kept"
    )
    assert str(report) == report.format()
    assert json.loads(json.dumps(report.to_dict()))["output_path"] == str(output)

    table = pq.read_table(output)
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    rows = table.to_pylist()
    assert [row["extra_info"] for row in rows] == [
        {"index": i, "source_row": source_row} for i, source_row in enumerate([0, 2, 5, 7, 9])
    ]
    assert {row["ability"] for row in rows} == {"MATH"}
    assert _loaded(output) == [
        (_dapo("What is 2 + 2?"), "4", "math_dapo"),
        (_dapo("What is 3 + 3?"), "6", "math_dapo"),
        (_dapo("What is 2 + 2?"), "5", "math_dapo"),
        (_dapo("Half of 1?"), "0.5", "math_dapo"),
        (_dapo("Ten times 54?"), "540", "math_dapo"),
    ]


def test_csv_keeps_cells_as_written(tmp_path):
    source = tmp_path / "excel.csv"
    # A byte-order mark (as spreadsheet programs write), a quoted question with a comma
    # and a line break, an answer that type inference would turn into 7, and "NA".
    text = (
        "question,final_answer,solution\r\n"
        '"Compute 3 + 4, then write it with three digits.\nWhat do you get?",007,"3 + 4 = 7"\r\n'
        "What is NA backwards?,AN,\r\n"
        "What is 1 + 1?,,it is 2\r\n"
    )
    source.write_bytes(b"\xef\xbb\xbf" + text.encode())
    report = convert_to_dapo(source, tmp_path / "excel.parquet", data_source="custom", template="none")
    assert (report.question_field, report.answer_field) == ("question", "final_answer")
    assert report.dropped == {"missing answer": 1} and report.examples == {"missing answer": [2]}
    assert report.numeric_answers_converted == 0
    assert _loaded(tmp_path / "excel.parquet") == [
        (_user("Compute 3 + 4, then write it with three digits.\nWhat do you get?"), "007", "custom"),
        (_user("What is NA backwards?"), "AN", "custom"),
    ]


def test_parquet_float_answer_column(tmp_path):
    source = tmp_path / "floats.parquet"
    # One missing answer turns pandas' answer column into floats, with NaN for the gap.
    frame = pd.DataFrame({"problem": ["A?", "B?", "C?"], "answer": [540, None, 0.5], "level": [1, 2, 3]})
    assert frame["answer"].dtype == "float64"
    frame.to_parquet(source)
    report = convert_to_dapo(source, tmp_path / "out.parquet")
    assert report.dropped == {"missing answer": 1} and report.examples["missing answer"] == [1]
    assert report.numeric_answers_converted == 2
    assert [answer for _, answer, _ in _loaded(tmp_path / "out.parquet")] == ["540", "0.5"]


@pytest.mark.parametrize(
    ("template", "content"),
    [("dapo", DAPO_PROMPT_TEMPLATE.format(problem="Find {x} if x = 2.")), ("none", "Find {x} if x = 2.")],
)
def test_templates(tmp_path, template, content):
    source = tmp_path / "one.jsonl"
    write_jsonl([{"query": "Find {x} if x = 2.", "ground_truth": "2"}], source)
    convert_to_dapo(source, tmp_path / "one.parquet", template=template)
    assert _loaded(tmp_path / "one.parquet") == [(_user(content), "2", "math_dapo")]


def test_string_prompt_column_is_a_question_field(tmp_path):
    source = tmp_path / "prompt.jsonl"
    write_jsonl([{"prompt": "What is 1 + 1?", "answer": "2"}], source)
    report = convert_to_dapo(source, tmp_path / "prompt.parquet")
    assert report.question_field == "prompt"
    assert _loaded(tmp_path / "prompt.parquet") == [(_dapo("What is 1 + 1?"), "2", "math_dapo")]


def test_solution_is_not_taken_as_the_answer(tmp_path):
    source = tmp_path / "math.jsonl"
    write_jsonl([{"problem": "What is 1 + 1?", "solution": "1 + 1 = 2, so \\boxed{2}.", "level": 1}], source)
    with pytest.raises(ValueError) as excinfo:
        convert_to_dapo(source, tmp_path / "math.parquet")
    message = str(excinfo.value)
    assert "no answer field found" in message and "math.jsonl" in message
    assert "['problem', 'solution', 'level']" in message
    assert "'solution' is not picked automatically" in message
    assert "answer_field=" in message and "--answer-field" in message

    report = convert_to_dapo(source, tmp_path / "math.parquet", answer_field="solution")
    assert report.answer_field == "solution" and report.rows_written == 1


def test_named_fields_must_exist(tmp_path):
    source = tmp_path / "qa.jsonl"
    write_jsonl([{"q": "What is 1 + 1?", "a": "2"}], source)
    with pytest.raises(ValueError, match=r"no question field found .*columns found: \['q', 'a'\]; choose one"):
        convert_to_dapo(source, tmp_path / "qa.parquet", answer_field="a")
    with pytest.raises(ValueError, match=r"qa\.jsonl has no answer field 'answer'; columns found: \['q', 'a'\]"):
        convert_to_dapo(source, tmp_path / "qa.parquet", question_field="q", answer_field="answer")
    report = convert_to_dapo(source, tmp_path / "qa.parquet", question_field="q", answer_field="a")
    assert report.rows_written == 1


@pytest.mark.parametrize(
    ("row", "error", "message"),
    [
        ({"problem": "Is 2 even?", "answer": True}, TypeError, r"row 1 of .*got bool True"),
        ({"problem": 12, "answer": "12"}, TypeError, r"row 1 of .*question field 'problem' must hold text, got int 12"),
    ],
)
def test_bad_values_name_the_row(tmp_path, row, error, message):
    source = tmp_path / "bad.jsonl"
    write_jsonl([{"problem": "What is 1 + 1?", "answer": "2"}, row], source)
    with pytest.raises(error, match=message):
        convert_to_dapo(source, tmp_path / "bad.parquet")


def test_everything_dropped_is_an_error_with_the_report(tmp_path):
    source = tmp_path / "no_answers.jsonl"
    write_jsonl([{"problem": "A?", "answer": None}, {"problem": "B?", "answer": ""}], source)
    output = tmp_path / "no_answers.parquet"
    with pytest.raises(
        ValueError, match=r"(?s)every row of .*no_answers\.jsonl was dropped.*missing answer: 2 \(e\.g\. rows 0, 1\)"
    ):
        convert_to_dapo(source, output)
    assert not output.exists()


# --- prompt length -----------------------------------------------------------------------------


def test_too_long_prompts_are_dropped(tmp_path, tiny_model_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path, local_files_only=True)
    short, long = "What is 1 + 1?", "What is 1 + 1? " * 20
    limit = len(render_prompt_ids(tokenizer, _dapo(short)))
    assert len(render_prompt_ids(tokenizer, _dapo(long))) > limit
    source = tmp_path / "lengths.jsonl"
    rows = [{"problem": long, "answer": "2"}, {"problem": short, "answer": "2"}, {"problem": long, "answer": "2"}]
    write_jsonl(rows, source)
    report = convert_to_dapo(
        source, tmp_path / "lengths.parquet", tokenizer_path=tiny_model_path, max_prompt_length=limit
    )
    # The repeat of the too-long row is a duplicate: each row has one reason.
    assert report.dropped == {"prompt too long": 1, "duplicate": 1}
    assert report.examples == {"prompt too long": [0], "duplicate": [2]}
    assert _loaded(tmp_path / "lengths.parquet") == [(_dapo(short), "2", "math_dapo")]


def test_the_tokenizer_is_any_model_source_model_path_takes(tmp_path, monkeypatch, capsys, smollm2_path):
    """`--tokenizer smollm2-135m-instruct` (a packaged model, as `model_path` takes it) measures with that model's
    tokenizer, from its converted directory, as the command is typed."""
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path, local_files_only=True)
    short, long = "What is 1 + 1?", "What is 1 + 1? " * 20
    limit = len(render_prompt_ids(tokenizer, _dapo(short)))
    monkeypatch.chdir(tmp_path)
    write_jsonl([{"problem": long, "answer": "2"}, {"problem": short, "answer": "2"}], tmp_path / "in.jsonl")
    args = ["data", "convert", "in.jsonl", "out.parquet", "--tokenizer", "smollm2-135m-instruct"]
    assert main([*args, "--max-prompt-length", str(limit)]) == 0
    assert "prompt too long: 1 (e.g. row 0)" in capsys.readouterr().out
    assert _loaded(tmp_path / "out.parquet") == [(_dapo(short), "2", "math_dapo")]


def test_length_counts_the_chat_template_only_where_there_is_one(tmp_path, tiny_model_path, plain_tokenizer_path):
    chat = AutoTokenizer.from_pretrained(tiny_model_path, local_files_only=True)
    plain = AutoTokenizer.from_pretrained(plain_tokenizer_path, local_files_only=True)
    messages = _dapo("What is 1 + 1?")
    plain_length = len(render_prompt_ids(plain, messages))
    assert len(render_prompt_ids(chat, messages)) > plain_length

    source = tmp_path / "one.jsonl"
    write_jsonl([{"problem": "What is 1 + 1?", "answer": "2"}], source)
    kept = convert_to_dapo(
        source, tmp_path / "plain.parquet", tokenizer_path=plain_tokenizer_path, max_prompt_length=plain_length
    )
    assert kept.rows_written == 1 and kept.dropped == {}
    with pytest.raises(ValueError, match=r"prompt too long: 1 \(e\.g\. row 0\)"):
        convert_to_dapo(
            source, tmp_path / "chat.parquet", tokenizer_path=tiny_model_path, max_prompt_length=plain_length
        )


# --- DAPO-format input -------------------------------------------------------------------------


def test_dapo_rows_are_kept_as_they_are(tmp_path):
    system_and_user = (
        {"role": "system", "content": "You are a careful mathematician."},
        {"role": "user", "content": "No template here. What is 2 + 3?"},
    )
    rows = [
        problem_to_row(MathProblem(system_and_user, "5", "aime", 0)),
        {"prompt": list(_user("What is 1 + 1?")), "reward_model": {"ground_truth": 2}},  # no data_source
        {"prompt": list(_user("What is 9 + 9?")), "reward_model": {"ground_truth": None}},
    ]
    source = tmp_path / "dapo.jsonl"
    write_jsonl(rows, source)
    report = convert_to_dapo(source, tmp_path / "dapo.parquet", data_source="fallback", template="dapo")
    assert report.question_field is None and report.answer_field is None
    assert "already in the DAPO format" in report.format()
    assert report.dropped == {"missing answer": 1} and report.numeric_answers_converted == 1
    assert _loaded(tmp_path / "dapo.parquet") == [
        (system_and_user, "5", "aime"),
        (_user("What is 1 + 1?"), "2", "fallback"),
    ]


@pytest.mark.parametrize(
    ("bad_row", "message"),
    [
        ({"prompt": [{"role": "user"}], "reward_model": {"ground_truth": "3"}}, "each prompt message must be a dict"),
        ({"prompt": "What is 1 + 2?", "reward_model": {"ground_truth": "3"}}, "prompt must be a non-empty list"),
        ({"prompt": list(_user("What is 1 + 2?")), "reward_model": "3"}, "reward_model must be a dict .* got str '3'"),
    ],
)
def test_malformed_dapo_row_is_an_error(tmp_path, bad_row, message):
    source = tmp_path / "dapo.jsonl"
    good = {"prompt": list(_user("What is 1 + 1?")), "reward_model": {"ground_truth": "2"}}
    write_jsonl([good, bad_row], source)
    with pytest.raises(ValueError, match=rf"row 1 of .*dapo\.jsonl: {message}"):
        convert_to_dapo(source, tmp_path / "dapo.parquet")


def test_repeated_dapo_file_is_deduplicated_to_its_unique_rows(tmp_path):
    problems = [MathProblem(_dapo(f"What is {i} + {i}?"), str(2 * i), "math_dapo", i) for i in range(5)]
    source = tmp_path / "dapo-math-like.parquet"
    # Like the public DAPO-Math-17K file: the whole set of unique rows, 100 times over.
    pd.DataFrame([problem_to_row(p) for p in problems] * 100).to_parquet(source)
    report = convert_to_dapo(source, tmp_path / "dedup.parquet")
    assert (report.rows_read, report.rows_written) == (500, 5)
    assert report.dropped == {"duplicate": 495} and report.examples["duplicate"] == [5, 6, 7, 8, 9]
    assert report.conflicting_answers == 0
    assert load_math_dataset(tmp_path / "dedup.parquet") == problems


def test_aime_converts_to_its_30_problems(tmp_path):
    report = convert_to_dapo(AIME_2024, tmp_path / "aime.parquet")
    assert (report.rows_read, report.rows_written, report.dropped) == (960, 30, {"duplicate": 930})
    expected = [replace(p, copies=1) for p in load_math_dataset(AIME_2024)]
    assert load_math_dataset(tmp_path / "aime.parquet") == expected


# --- unreadable input and bad arguments ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.jsonl", b"", "contains no rows"),
        ("blank.jsonl", b"\n\n", "contains no rows"),
        ("empty.csv", b"", "is empty"),
        ("header_only.csv", b"problem,answer\n", "contains no rows"),
        ("empty.parquet", b"", "is an empty file"),
        ("not_parquet.parquet", b"problem,answer\nA?,1\n", "cannot read .* as parquet"),
        ("ragged.csv", b'problem,answer\n"A?,1\n', "cannot read .* as csv"),
    ],
)
def test_empty_or_unreadable_input_names_the_file(tmp_path, name, content, message):
    source = tmp_path / name
    source.write_bytes(content)
    with pytest.raises(ValueError, match=rf"{message}") as excinfo:
        convert_to_dapo(source, tmp_path / "out.parquet")
    assert name in str(excinfo.value)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_non_utf8_input_names_file_and_line(tmp_path, suffix):
    source = tmp_path / f"latin1{suffix}"
    if suffix == ".jsonl":
        text = '{"problem": "A?", "answer": "1"}\n{"problem": "Caf\u00e9?", "answer": "2"}\n'
    else:
        text = "problem,answer\nA?,1\nCaf\u00e9?,2\n"
    source.write_bytes(text.encode("latin-1"))
    line, byte = (2, 17) if suffix == ".jsonl" else (3, 4)
    with pytest.raises(
        ValueError, match=rf"line {line} of .*latin1\{suffix} is not valid UTF-8 \(byte 0xe9 at byte {byte} of"
    ):
        convert_to_dapo(source, tmp_path / "out.parquet")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"data_source": ""}, ValueError, "data_source must be a non-empty string"),
        ({"template": "chatml"}, ValueError, r"unknown template 'chatml'; expected one of \('dapo', 'none'\)"),
        ({"output_path": "out.jsonl"}, ValueError, r"must be a \.parquet file, got suffix '\.jsonl'"),
        ({"tokenizer_path": "tok"}, ValueError, "go together"),
        ({"max_prompt_length": 10}, ValueError, "go together"),
        ({"tokenizer_path": "missing_dir", "max_prompt_length": 10}, FileNotFoundError, "missing_dir"),
        ({"tokenizer_path": ".", "max_prompt_length": 0}, ValueError, "positive int, got 0"),
        ({"input_path": "problems.txt"}, ValueError, r"unsupported input suffix '\.txt'.*\.jsonl, \.parquet, \.csv"),
        ({"input_path": "nope.jsonl"}, FileNotFoundError, "nope.jsonl"),
    ],
)
def test_bad_arguments(tmp_path, monkeypatch, kwargs, error, message):
    monkeypatch.chdir(tmp_path)
    write_jsonl([{"problem": "A?", "answer": "1"}], tmp_path / "in.jsonl")
    (tmp_path / "problems.txt").write_text("A? 1\n")
    arguments = {"input_path": "in.jsonl", "output_path": "out.parquet", **kwargs}
    with pytest.raises(error, match=message):
        convert_to_dapo(arguments.pop("input_path"), arguments.pop("output_path"), **arguments)
    assert not (tmp_path / "out.parquet").exists()


# --- command line ------------------------------------------------------------------------------


def test_command_line(tmp_path, capsys, tiny_model_path):
    source, output = tmp_path / "in.csv", tmp_path / "data" / "out.parquet"
    source.write_text("query,answer\nWhat is 1 + 1?,2\nWhat is 1 + 1?,2\n")
    parser = argparse.ArgumentParser(prog="rllib convert")
    add_convert_arguments(parser)
    args = parser.parse_args(
        [
            str(source),
            str(output),
            "--template",
            "none",
            "--data-source",
            "arith",
            "--tokenizer",
            tiny_model_path,
            "--max-prompt-length",
            "64",
        ]
    )
    report = run_convert(args)
    printed = capsys.readouterr().out
    assert report.format() in printed and str(output) in printed
    assert "duplicate: 1 (e.g. row 1)" in printed
    assert _loaded(output) == [(_user("What is 1 + 1?"), "2", "arith")]
    with pytest.raises(SystemExit):
        parser.parse_args([str(source), str(output), "--template", "chatml"])


def test_worked_solutions_in_the_answer_field_are_dropped_not_kept_unscorable(tmp_path):
    # GSM8K's "answer" is a worked solution ending in "#### N": no one-line answer can match it.
    source = tmp_path / "gsm8k.jsonl"
    write_jsonl(
        [
            {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"},
            {"question": "What is 2 + 2?", "answer": "4\n"},
        ],
        source,
    )
    report = convert_to_dapo(source, tmp_path / "gsm8k.parquet")
    assert report.dropped == {"multi-line answer": 1} and report.examples == {"multi-line answer": [0]}
    assert "multi-line answer: 1 (e.g. row 0)" in report.format()
    assert [p.ground_truth for p in load_math_dataset(tmp_path / "gsm8k.parquet")] == ["4\n"]
