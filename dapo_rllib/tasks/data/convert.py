"""Convert a file of math problems and answers into DAPO-format rows (docs/design/algorithm.md §4).

Input is ``.jsonl``, ``.parquet`` or ``.csv``, either already in the DAPO row format
(``prompt`` a list of chat messages, ``reward_model`` holding the ground truth) or with
one question and one answer field per row. Output is a ``.parquet`` file that
:func:`~dapo_rllib.tasks.data.datasets.load_math_dataset` loads back to the same problems.

Rows that cannot or should not be trained on are dropped and counted by reason
(:data:`DROP_REASONS`), with the first few row numbers as examples, in a
:class:`ConversionReport`. Row numbers count data rows from 0, as the loader's errors do.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from dapo_rllib.paths import input_path, output_path
from dapo_rllib.tasks.data.code_benchmarks import HUMANEVAL_STYLES
from dapo_rllib.tasks.data.code_tasks import is_code_task_file, load_code_tasks, write_code_tasks
from dapo_rllib.tasks.data.datasets import (
    DEFAULT_DATA_SOURCE,
    MathProblem,
    ground_truth_to_str,
    iter_utf8_lines,
    messages_key,
    parse_prompt,
    problem_to_row,
    read_jsonl_rows,
    read_parquet_rows,
)
from dapo_rllib.tasks.data.env_rows import is_env_source, write_env_rows
from dapo_rllib.tasks.data.prompts import DAPO_PROMPT_TEMPLATE, render_prompt_ids
from dapo_rllib.tasks.env_names import CODE_ENV

logger = logging.getLogger(__name__)

#: Input suffixes :func:`convert_to_dapo` reads.
INPUT_SUFFIXES = (".jsonl", ".parquet", ".csv")
#: Question fields tried, in this order, when none is named.
QUESTION_FIELD_CANDIDATES = ("problem", "question", "prompt", "query")
#: Answer fields tried, in this order, when none is named. "solution" is left out on
#: purpose: in MATH-style data it is a worked solution, not the final answer the
#: scorer compares against.
ANSWER_FIELD_CANDIDATES = ("answer", "ground_truth", "final_answer")
#: ``template`` values: wrap the question in DAPO's prompt, or use it as it is.
TEMPLATES = ("dapo", "none")

MISSING_QUESTION = "missing question"
MISSING_ANSWER = "missing answer"
MULTI_LINE_ANSWER = "multi-line answer"
DUPLICATE = "duplicate"
PROMPT_TOO_LONG = "prompt too long"
#: Why a row is dropped, in the order the checks run (and the report lists them).
DROP_REASONS = (MISSING_QUESTION, MISSING_ANSWER, MULTI_LINE_ANSWER, DUPLICATE, PROMPT_TOO_LONG)
#: Row numbers kept as examples per reason.
MAX_EXAMPLES = 5


@dataclass
class ConversionReport:
    """What :func:`convert_to_dapo` read, wrote and dropped.

    Attributes:
        input_path: The file read.
        output_path: The parquet file written.
        question_field: Column the questions came from; None for DAPO-format input.
        answer_field: Column the answers came from; None for DAPO-format input.
        rows_read: Data rows in the input.
        rows_written: Rows in the output (``rows_read`` minus all drops).
        dropped: Reason -> number of rows dropped for it.
        examples: Reason -> the first few row numbers dropped for it.
        numeric_answers_converted: Answers that were numbers, written as strings.
        conflicting_answers: Rows kept whose prompt an earlier kept row has with a
            different answer (both kept; usually a data error worth a look).
        conflicting_answer_examples: The first few of those row numbers.
    """

    input_path: Path
    output_path: Path
    question_field: str | None = None
    answer_field: str | None = None
    rows_read: int = 0
    rows_written: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[int]] = field(default_factory=dict)
    numeric_answers_converted: int = 0
    conflicting_answers: int = 0
    conflicting_answer_examples: list[int] = field(default_factory=list)

    def record_drop(self, reason: str, row_number: int) -> None:
        """Count row ``row_number`` as dropped for ``reason``."""
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        examples = self.examples.setdefault(reason, [])
        if len(examples) < MAX_EXAMPLES:
            examples.append(row_number)

    def record_conflict(self, row_number: int) -> None:
        """Count row ``row_number`` as repeating an earlier prompt with another answer."""
        self.conflicting_answers += 1
        if len(self.conflicting_answer_examples) < MAX_EXAMPLES:
            self.conflicting_answer_examples.append(row_number)

    def format(self) -> str:
        """A short human-readable report."""
        if self.question_field is None:
            source = "already in the DAPO format, prompts kept as they are"
        else:
            source = f"question field {self.question_field!r}, answer field {self.answer_field!r}"
        lines = [
            f"Conversion of {self.input_path} to {self.output_path}",
            f"  read {_rows(self.rows_read)} ({source})",
            f"  wrote {_rows(self.rows_written)}",
            f"  dropped {_rows(sum(self.dropped.values()))}" + (":" if self.dropped else ""),
        ]
        for reason in DROP_REASONS:
            if reason in self.dropped:
                lines.append(f"    {reason}: {self.dropped[reason]} ({_example_rows(self.examples[reason])})")
        if self.numeric_answers_converted:
            lines.append(f"  numeric answers written as strings: {self.numeric_answers_converted}")
        if self.conflicting_answers:
            lines.append(f"  warning: {self.conflict_summary()}")
        return "\n".join(lines)

    __str__ = format

    def conflict_summary(self) -> str:
        """One line on the rows kept despite repeating a prompt with another answer."""
        return (
            f"conflicting answers: {self.conflicting_answers} ({_example_rows(self.conflicting_answer_examples)}): "
            "rows that repeat an earlier prompt with a different answer, all kept"
        )

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values (paths as strings)."""
        report = asdict(self)
        report["input_path"] = str(self.input_path)
        report["output_path"] = str(self.output_path)
        return report


def convert_to_dapo(
    input_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    *,
    question_field: str | None = None,
    answer_field: str | None = None,
    data_source: str = DEFAULT_DATA_SOURCE,
    template: str = "dapo",
    tokenizer_path: str | os.PathLike[str] | None = None,
    max_prompt_length: int | None = None,
) -> ConversionReport:
    """Convert ``input_path`` into a DAPO-format parquet file at ``output_path``.

    Rows with a ``prompt`` list and a ``reward_model`` are taken as DAPO rows and
    kept as they are (validated, never re-templated), unless a field is named.
    Otherwise each row's question (``question_field``, or the first of
    :data:`QUESTION_FIELD_CANDIDATES` present) becomes the user message, wrapped in
    DAPO's prompt when ``template="dapo"``, and its answer (``answer_field``, or the
    first of :data:`ANSWER_FIELD_CANDIDATES` present) the ground truth.

    Dropped, each counted in the report: rows with a missing or empty question or
    answer, repeats of an earlier (prompt, answer) pair, and, when
    ``tokenizer_path`` and ``max_prompt_length`` are both given, prompts whose
    rendered length (:func:`~dapo_rllib.tasks.data.prompts.render_prompt_ids`, the chat
    template where the tokenizer has one) exceeds ``max_prompt_length`` tokens.
    Numeric answers are written as strings (:func:`ground_truth_to_str`).

    Args:
        input_path: A ``.jsonl``, ``.parquet`` or ``.csv`` file.
        output_path: The ``.parquet`` file to write; parent directories are created.
        question_field: Column holding the question text.
        answer_field: Column holding the final answer.
        data_source: ``data_source`` of converted rows (DAPO rows keep their own).
        template: ``"dapo"`` or ``"none"``.
        tokenizer_path: Local Hugging Face tokenizer (or model) directory.
        max_prompt_length: Longest prompt kept, in tokens.

    Raises:
        FileNotFoundError: ``input_path`` or ``tokenizer_path`` does not exist.
        ValueError: Bad argument, unreadable or empty input, no question or answer
            field, a malformed DAPO row, or every row dropped (the message holds
            the report).
        TypeError: A question that is not a string, or an answer that is neither a
            string nor a number.
    """
    input_path, output_path = Path(input_path), Path(output_path)
    if template not in TEMPLATES:
        raise ValueError(f"unknown template {template!r}; expected one of {TEMPLATES}")
    if not isinstance(data_source, str) or not data_source:
        raise ValueError(f"data_source must be a non-empty string (it selects the scorer), got {data_source!r}")
    if output_path.suffix.lower() != ".parquet":
        raise ValueError(f"output {output_path} must be a .parquet file, got suffix {output_path.suffix!r}")
    tokenizer = _load_length_tokenizer(tokenizer_path, max_prompt_length)

    rows = _read_rows(input_path)
    report = ConversionReport(input_path, output_path)
    extract = _row_extractor(rows, report, question_field, answer_field, template, data_source)
    report.rows_read = len(rows)
    output_rows = _convert_rows(rows, extract, report, tokenizer, max_prompt_length)
    report.rows_written = len(output_rows)
    if not output_rows:
        raise ValueError(f"every row of {input_path} was dropped; nothing written.\n{report.format()}")
    _write_parquet(output_rows, output_path)
    if report.conflicting_answers:
        logger.warning("%s: %s", input_path, report.conflict_summary())
    return report


def _row_extractor(
    rows: list[dict[str, Any]],
    report: ConversionReport,
    question_field: str | None,
    answer_field: str | None,
    template: str,
    data_source: str,
) -> Callable[[dict[str, Any], str], _Extracted]:
    """How to read the rows: as DAPO rows when they are some and no field is named, else from
    the question and answer fields (picked, and recorded in ``report``)."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    if question_field is None and answer_field is None and _is_dapo_format(rows, columns):
        return _dapo_row_extractor(data_source)
    path = report.input_path
    report.question_field = _pick_field(
        question_field, QUESTION_FIELD_CANDIDATES, columns, rows, "question", "question_field", path
    )
    report.answer_field = _pick_field(
        answer_field, ANSWER_FIELD_CANDIDATES, columns, rows, "answer", "answer_field", path
    )
    return _plain_row_extractor(report.question_field, report.answer_field, template, data_source)


def _convert_rows(
    rows: list[dict[str, Any]],
    extract: Callable[[dict[str, Any], str], _Extracted],
    report: ConversionReport,
    tokenizer,
    max_prompt_length: int | None,
) -> list[dict[str, Any]]:
    """The output rows of the rows kept, in order; each row dropped is counted in ``report``
    under its reason, and so are numeric answers and conflicting answers."""
    seen_pairs: set[tuple] = set()
    kept_answers: dict[tuple, str] = {}
    output_rows = []
    for row_number, row in enumerate(rows):
        where = f"row {row_number} of {report.input_path}"
        extracted = extract(row, where)
        if isinstance(extracted, str):
            report.record_drop(extracted, row_number)
            continue
        messages, raw_answer, row_data_source = extracted
        answer = ground_truth_to_str(raw_answer, where)
        if "\n" in answer.strip():
            # A worked solution (GSM8K's "answer" ends in "#### 42"), not a final answer: the
            # scorers compare against one line, so no response could ever score correct.
            report.record_drop(MULTI_LINE_ANSWER, row_number)
            continue
        prompt_key = messages_key(messages)
        if (prompt_key, answer) in seen_pairs:
            report.record_drop(DUPLICATE, row_number)
            continue
        # Recorded before the length check, so that repeats of a too-long prompt
        # count as duplicates rather than being tokenized again.
        seen_pairs.add((prompt_key, answer))
        if tokenizer is not None and len(render_prompt_ids(tokenizer, messages)) > max_prompt_length:
            report.record_drop(PROMPT_TOO_LONG, row_number)
            continue
        report.numeric_answers_converted += not isinstance(raw_answer, str)
        if kept_answers.setdefault(prompt_key, answer) != answer:
            report.record_conflict(row_number)
        problem = MathProblem(messages, answer, row_data_source, index=len(output_rows))
        output_rows.append(_output_row(problem, row_number))
    return output_rows


def add_convert_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of :func:`run_convert` to ``parser``."""
    parser.add_argument(
        "input",
        type=input_path,
        help="problems to convert: .jsonl, .parquet or .csv; code tasks (HumanEval, MBPP, LiveCodeBench rows, "
        ".jsonl.gz too); or env:NAME, the problems of a registered environment (env:dapo_reasoning_gym)",
    )
    parser.add_argument("output", type=output_path, help="DAPO-format .parquet file to write")
    parser.add_argument(
        "--question-field",
        default=None,
        help=f"column holding the question (default: the first of {', '.join(QUESTION_FIELD_CANDIDATES)})",
    )
    parser.add_argument(
        "--answer-field",
        default=None,
        help=f"column holding the final answer (default: the first of {', '.join(ANSWER_FIELD_CANDIDATES)})",
    )
    parser.add_argument(
        "--data-source",
        default=DEFAULT_DATA_SOURCE,
        help=f"data_source of converted rows, which selects the scorer (default: {DEFAULT_DATA_SOURCE})",
    )
    parser.add_argument(
        "--template",
        choices=TEMPLATES,
        default="dapo",
        help="dapo: wrap each question in DAPO's prompt asking for an 'Answer:' line; none: use it as it is",
    )
    parser.add_argument(
        "--tokenizer",
        type=input_path,
        default=None,
        help="the model's tokenizer, to measure prompts for --max-prompt-length: a Hugging Face model or tokenizer "
        "directory, a GGUF file or a packaged model (smollm2-135m-instruct), as model_path takes",
    )
    parser.add_argument(
        "--humaneval-style",
        choices=HUMANEVAL_STYLES,
        default="completion",
        help="HumanEval prompts: the model continues the function (completion, the benchmark's) or writes it whole (instruction)",
    )
    parser.add_argument(
        "--env-config",
        type=json.loads,
        default={},
        help='env:NAME\'s config as JSON, e.g. \'{"task": "basic_arithmetic", "split": "test", "num_problems": 200}\'',
    )
    parser.add_argument(
        "--max-prompt-length",
        type=int,
        default=None,
        help="drop prompts longer than this many tokens (with the tokenizer's chat template; needs --tokenizer)",
    )


def run_convert(args: argparse.Namespace) -> ConversionReport | Path:
    """Run :func:`convert_to_dapo` with parsed :func:`add_convert_arguments` arguments and print the report;
    a file of code tasks (a public benchmark's, :mod:`dapo_rllib.tasks.data.code_benchmarks`) is written as
    code-task rows instead."""
    if is_env_source(args.input):
        path, count = write_env_rows(args.input, args.env_config, args.output)
        print(f"{count} problems of {args.input} -> {path} (rllib evaluate --data {path}; or its env's 'dataset')")
        return path
    if is_code_task_file(args.input):
        tasks = load_code_tasks(args.input, humaneval_style=args.humaneval_style)
        path = write_code_tasks(tasks, args.output)
        sources = ", ".join(sorted({task.data_source for task in tasks}))
        print(
            f"{len(tasks)} code tasks ({sources}) -> {path} (a dataset of the {CODE_ENV} env; rllib evaluate --data {path})"
        )
        return path
    report = convert_to_dapo(
        args.input,
        args.output,
        question_field=args.question_field,
        answer_field=args.answer_field,
        data_source=args.data_source,
        template=args.template,
        tokenizer_path=args.tokenizer,
        max_prompt_length=args.max_prompt_length,
    )
    print(report.format())
    print(f"DAPO-format dataset: {report.output_path} (load with load_math_dataset, or train on it as a data file)")
    return report


# --- reading -------------------------------------------------------------------------


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """Read the input file's rows; errors name the file."""
    if not path.exists():
        raise FileNotFoundError(f"input file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        rows = read_jsonl_rows(path)
    elif suffix == ".parquet":
        rows = read_parquet_rows(path)
    elif suffix == ".csv":
        rows = _read_csv_rows(path)
    else:
        raise ValueError(f"unsupported input suffix {path.suffix!r} for {path}; supported: {', '.join(INPUT_SUFFIXES)}")
    if not rows:
        raise ValueError(f"input file {path} contains no rows")
    return rows


def _read_csv_rows(path: Path) -> list[dict[str, Any]]:
    """Read a UTF-8 csv file with a header line, every cell as text."""
    # Imported here, as pandas is only needed for csv input.
    import pandas as pd

    text = "".join(line for _, line in iter_utf8_lines(path))
    if not text.strip():
        raise ValueError(f"input file {path} is empty")
    try:
        # Every cell as the text written: type inference would turn an answer
        # "007" into 7 and "NA" into a missing value.
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ValueError(f"cannot read {path} as csv: {e}") from None
    return frame.to_dict("records")


def _load_length_tokenizer(tokenizer_path: str | os.PathLike[str] | None, max_prompt_length: int | None):
    """The tokenizer that measures prompts, or None when no length limit is asked for."""
    if (tokenizer_path is None) != (max_prompt_length is None):
        raise ValueError(
            "tokenizer_path and max_prompt_length go together (--tokenizer and --max-prompt-length): "
            f"got tokenizer_path={tokenizer_path!r}, max_prompt_length={max_prompt_length!r}"
        )
    if tokenizer_path is None:
        return None
    if isinstance(max_prompt_length, bool) or not isinstance(max_prompt_length, int) or max_prompt_length < 1:
        raise ValueError(f"max_prompt_length must be a positive int, got {max_prompt_length!r}")
    if not Path(tokenizer_path).is_dir():
        raise FileNotFoundError(
            f"tokenizer directory not found: {tokenizer_path} (expected a local Hugging Face model or tokenizer "
            "directory; `rllib data convert --tokenizer` also takes what model_path does: a GGUF file, a packaged model)"
        )
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True)


def _is_dapo_format(rows: list[dict[str, Any]], columns: list[str]) -> bool:
    """Whether the rows are DAPO rows: a ``reward_model`` column and list prompts."""
    return "reward_model" in columns and any(isinstance(row.get("prompt"), list) for row in rows)


def _pick_field(
    named: str | None,
    candidates: tuple[str, ...],
    columns: list[str],
    rows: list[dict[str, Any]],
    what: str,
    argument: str,
    path: Path,
) -> str:
    """The column to read ``what`` from: ``named``, else the first candidate holding text or numbers."""
    if named is not None:
        if named not in columns:
            raise ValueError(f"{path} has no {what} field {named!r}; columns found: {columns}")
        return named
    for candidate in candidates:
        # A "prompt" column of message lists is no question text.
        if candidate in columns and not any(isinstance(row.get(candidate), (list, dict)) for row in rows):
            return candidate
    raise ValueError(
        f"no {what} field found in {path}: looked for {', '.join(candidates)}; "
        f"columns found: {columns}; choose one with {argument}= (--{argument.replace('_', '-')} on the command line)"
        + (
            ". 'solution' is not picked automatically: in MATH-style data it is a worked solution, not the final answer"
            if what == "answer" and "solution" in columns
            else ""
        )
    )


# --- turning rows into (messages, answer, data source) --------------------------------

#: What an extractor makes of a row: (messages, raw answer, data source) when the row
#: is usable, else the reason it is dropped.
_Extracted: TypeAlias = tuple[tuple[dict, ...], Any, str] | str


def _plain_row_extractor(
    question_field: str, answer_field: str, template: str, data_source: str
) -> Callable[[dict[str, Any], str], _Extracted]:
    def extract(row: dict[str, Any], where: str) -> _Extracted:
        question, answer = row.get(question_field), row.get(answer_field)
        if _is_missing(question):
            return MISSING_QUESTION
        if _is_missing(answer):
            return MISSING_ANSWER
        if not isinstance(question, str):
            raise TypeError(
                f"{where}: question field {question_field!r} must hold text, got {type(question).__name__} {question!r}"
            )
        content = DAPO_PROMPT_TEMPLATE.format(problem=question) if template == "dapo" else question
        return ({"role": "user", "content": content},), answer, data_source

    return extract


def _dapo_row_extractor(default_data_source: str) -> Callable[[dict[str, Any], str], _Extracted]:
    def extract(row: dict[str, Any], where: str) -> _Extracted:
        prompt, reward_model = row.get("prompt"), row.get("reward_model")
        if _is_missing(prompt):
            return MISSING_QUESTION
        messages = parse_prompt(prompt, where, require_text=False)
        if all(not message["content"].strip() for message in messages):
            return MISSING_QUESTION
        if _is_missing(reward_model):
            return MISSING_ANSWER
        if not isinstance(reward_model, dict):
            raise ValueError(
                f"{where}: reward_model must be a dict with a 'ground_truth' key, "
                f"got {type(reward_model).__name__} {reward_model!r:.200}"
            )
        answer = reward_model.get("ground_truth")
        if _is_missing(answer):
            return MISSING_ANSWER
        data_source = row.get("data_source")
        if data_source is None:
            data_source = default_data_source
        elif not isinstance(data_source, str):
            raise TypeError(f"{where}: data_source must be a string, got {type(data_source).__name__} {data_source!r}")
        return messages, answer, data_source

    return extract


def _rows(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


def _is_missing(value: Any) -> bool:
    """None, NaN (a null in a float column) or blank text."""
    if isinstance(value, str):
        return not value.strip()
    return value is None or (isinstance(value, float) and math.isnan(value))


# --- writing -------------------------------------------------------------------------


def _output_row(problem: MathProblem, source_row: int) -> dict[str, Any]:
    row = problem_to_row(problem)
    row["extra_info"]["source_row"] = source_row
    return row


def _write_parquet(rows: list[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    # An explicit schema, so that every output has the same column types
    # whatever the input's were.
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    schema = pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(message)),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
            ("extra_info", pa.struct([("index", pa.int64()), ("source_row", pa.int64())])),
        ]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def _example_rows(row_numbers: list[int]) -> str:
    return "e.g. row" + ("s " if len(row_numbers) > 1 else " ") + ", ".join(map(str, row_numbers))


__all__ = [
    "ANSWER_FIELD_CANDIDATES",
    "DROP_REASONS",
    "ConversionReport",
    "INPUT_SUFFIXES",
    "QUESTION_FIELD_CANDIDATES",
    "TEMPLATES",
    "add_convert_arguments",
    "convert_to_dapo",
    "run_convert",
]
