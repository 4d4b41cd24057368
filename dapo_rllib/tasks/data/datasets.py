"""Math problem datasets in the DAPO row format (docs/design/algorithm.md §4).

A row (parquet or jsonl) looks like::

    {"data_source": "math_dapo",
     "prompt": [{"role": "user", "content": "Solve the following ..."}],
     "ability": "MATH",
     "reward_model": {"ground_truth": "540", "style": "rule-lighteval/MATH_v2"},
     "extra_info": {"index": 2, ...}}

Only ``prompt`` and ``reward_model.ground_truth`` matter for training; the
loader turns each distinct (prompt, ground truth) pair into a
:class:`MathProblem`. To turn a file of plain questions and answers into this
format, see :mod:`dapo_rllib.tasks.data.convert`.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import numbers
import os
import reprlib
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

_ELIDING_REPR = reprlib.Repr()
_ELIDING_REPR.maxstring = _ELIDING_REPR.maxother = 120
#: ``repr`` with long strings and containers elided, for error messages.
short_repr = _ELIDING_REPR.repr

logger = logging.getLogger(__name__)

#: A loaded item with an ``index`` and ``copies`` (MathProblem, CodeTask).
ProblemT = TypeVar("ProblemT")

#: Columns every row must have; everything else is optional.
REQUIRED_COLUMNS = ("prompt", "reward_model")
#: ``data_source`` of rows that do not name one (DAPO-Math-17K's own value).
DEFAULT_DATA_SOURCE = "math_dapo"
#: File suffixes :func:`read_rows` understands.
SUPPORTED_SUFFIXES = (".parquet", ".jsonl", ".jsonl.gz")


@dataclass(frozen=True)
class MathProblem:
    """One math problem: the chat prompt and the reference answer.

    Attributes:
        messages: The prompt as chat messages, each ``{"role": str, "content": str}``.
        ground_truth: The reference answer, compared as a string by the scorer.
        data_source: Which scorer applies (e.g. ``"math_dapo"``, ``"arithmetic"``).
        index: Position of the problem in its dataset after deduplication.
        copies: How many rows of its file held this (prompt, ground truth) pair:
            the AIME 2024 eval file repeats each problem 32 times, for avg@32.
    """

    messages: tuple[dict, ...]
    ground_truth: str
    data_source: str
    index: int
    copies: int = 1

    def __hash__(self) -> int:
        # The generated hash would fail on the (unhashable) message dicts;
        # hashing their items keeps problems usable in sets and as dict keys.
        return hash((messages_key(self.messages), self.ground_truth, self.data_source, self.index, self.copies))

    @property
    def prompt_text(self) -> str:
        """Content of the last user message (the last message if none is from the user)."""
        for message in reversed(self.messages):
            if message["role"] == "user":
                return message["content"]
        return self.messages[-1]["content"]


def load_math_dataset(path: str | os.PathLike[str]) -> list[MathProblem]:
    """Load a DAPO-format ``.parquet`` or ``.jsonl`` file as a list of problems.

    Duplicate rows (same prompt messages and same ground truth) are merged
    into the first occurrence, whose ``copies`` counts them; the number merged
    is logged. DAPO-Math-17K repeats its prompts ~100 times by accident, and the
    AIME 2024 eval file repeats each of its 30 problems 32 times on purpose (for
    avg@32), so both load as their distinct problems.

    A numeric ground truth (an int, or a float from a float column) is turned
    into its string form by :func:`ground_truth_to_str`; the number converted
    is logged as a warning.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: Unsupported suffix, empty file, missing required column,
            malformed row, a prompt with no text, a missing or blank ground
            truth, a malformed JSON line or a
            line that is not UTF-8.
        TypeError: A ground truth that is neither a string nor a number, or a
            data source that is not a string.
    """
    path = Path(path)
    rows = read_rows(path, "math dataset")

    columns = list(dict.fromkeys(key for row in rows for key in row))
    for column in REQUIRED_COLUMNS:
        if column not in columns:
            raise ValueError(
                f"math dataset {path} has no {column!r} column (required: "
                f"{', '.join(REQUIRED_COLUMNS)}); columns found: {columns}"
            )

    parsed: list[tuple[tuple, MathProblem]] = []
    numeric_ground_truths = 0
    for row_number, row in enumerate(rows):
        where = f"row {row_number} of {path}"
        messages = parse_prompt(row.get("prompt"), where)
        raw_ground_truth = _reward_model_ground_truth(row.get("reward_model"), where)
        ground_truth = ground_truth_to_str(raw_ground_truth, where)
        numeric_ground_truths += not isinstance(raw_ground_truth, str)
        data_source = row.get("data_source", DEFAULT_DATA_SOURCE)
        if not isinstance(data_source, str):
            raise TypeError(f"{where}: data_source must be a string, got {type(data_source).__name__} {data_source!r}")
        parsed.append(
            ((messages_key(messages), ground_truth), MathProblem(messages, ground_truth, data_source, index=0))
        )
    if numeric_ground_truths:
        logger.warning(
            "Converted %d numeric ground truths in %s to strings (the scorer compares strings)",
            numeric_ground_truths,
            path,
        )
    return merge_repeats(parsed, "problems", path)


def merge_repeats(keyed: list[tuple[Hashable, ProblemT]], noun: str, path: Path) -> list[ProblemT]:
    """The distinct items of ``(key, item)`` pairs, first occurrences in order, each with its
    ``index`` among them and ``copies``, the number of pairs with its key; logged."""
    first: dict[Hashable, ProblemT] = {}
    copies: Counter[Hashable] = Counter()
    for key, item in keyed:
        copies[key] += 1
        first.setdefault(key, item)
    merged = [replace(item, index=index, copies=copies[key]) for index, (key, item) in enumerate(first.items())]
    logger.debug(
        "Loaded %d %s from %s (%d rows, %d duplicates removed)",
        len(merged),
        noun,
        path,
        len(keyed),
        len(keyed) - len(merged),
    )
    return merged


def ground_truth_to_str(value: Any, where: str) -> str:
    """Return a ground truth as the string the scorer compares.

    Strings are returned unchanged. Numbers, which parquet/pandas float and int
    columns and hand-written JSON produce, become their plain decimal form: an
    int or an integral float gives the integer string (``540.0`` -> ``"540"``,
    since ``"540.0"`` would never equal a model's ``Answer: 540``), any other
    float its shortest round-tripping form (``0.5`` -> ``"0.5"``).

    Args:
        value: The raw ground truth.
        where: Where it comes from (e.g. ``"row 3 of data.jsonl"``), for errors.

    Raises:
        ValueError: ``value`` is missing (None, NaN, or blank text) or infinite.
        TypeError: ``value`` is a bool or not a string or a number.
    """
    if isinstance(value, str):
        if not value.strip():
            # A blank reference would score an empty "Answer:" line as correct.
            raise ValueError(f"{where}: ground truth is empty (got {value!r}); expected the reference answer")
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise ValueError(f"{where}: ground truth is missing (got {value!r}); expected a string or a number")
    # bool is an int subclass, but True is no answer to a math problem.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{where}: ground truth must be a string or a number, got {type(value).__name__} {_short(value)}"
        )
    if isinstance(value, numbers.Integral):
        return str(int(value))
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{where}: ground truth must be a finite number, got {number!r}")
    return str(int(number)) if number.is_integer() else repr(number)


def problem_to_row(problem: MathProblem) -> dict:
    """Convert a problem back to a DAPO-format row (inverse of the loader).

    Loading rows written from distinct problems gives the same problems back,
    ``index`` included, since the index is the position after deduplication.
    """
    return {
        "data_source": problem.data_source,
        "prompt": [dict(message) for message in problem.messages],
        "ability": "MATH",
        "reward_model": {"ground_truth": problem.ground_truth, "style": "rule"},
        "extra_info": {"index": problem.index},
    }


def write_jsonl(rows: Iterable[dict], path: str | os.PathLike[str]) -> None:
    """Write ``rows`` as JSON lines (UTF-8), creating parent directories."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_rows(path: Path, what: str) -> list[dict[str, Any]]:
    """Read the rows of a ``.parquet`` or ``.jsonl`` file; errors name the file.

    Args:
        path: The file.
        what: What the file holds, for errors (e.g. ``"math dataset"``, ``"code task"``).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: Unsupported suffix, empty file, no rows, a file that is not parquet,
            a parquet string that is not UTF-8, or a jsonl line that is not UTF-8, not
            JSON, or not a JSON object.
    """
    if not path.exists():
        raise FileNotFoundError(f"{what} file not found: {path}")
    suffix = next((suffix for suffix in SUPPORTED_SUFFIXES if path.name.lower().endswith(suffix)), None)
    if suffix is None:
        raise ValueError(
            f"unsupported {what} file suffix {path.suffix!r} for {path}; "
            f"supported suffixes: {', '.join(SUPPORTED_SUFFIXES)}"
        )
    rows = read_parquet_rows(path) if suffix == ".parquet" else read_jsonl_rows(path)
    if not rows:
        raise ValueError(f"{what} file {path} contains no rows")
    return rows


def first_row(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The first row of a dataset file, to tell what kind of file it is; None where `path` is not a readable
    dataset file (a missing file, another suffix, no rows)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return read_rows(path, "dataset")[0]
    except ValueError:
        return None


def read_parquet_rows(path: Path) -> list[dict[str, Any]]:
    """Read a parquet file as plain Python rows.

    Raises:
        ValueError: The file is empty or not parquet, or a string is not UTF-8.
    """
    # Imported here so that jsonl-only users do not pay for pyarrow's import.
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.stat().st_size == 0:
        raise ValueError(f"{path} is an empty file")
    try:
        table = pq.read_table(path)
    except pa.ArrowException as e:
        raise ValueError(f"cannot read {path} as parquet: {e}") from None
    # to_pylist() yields plain lists/dicts/str, unlike pandas, which would
    # hand back list columns as numpy object arrays.
    try:
        return table.to_pylist()
    except UnicodeDecodeError as error:
        # Arrow does not check string columns on read; name the cell, not just the byte.
        column, row = _first_non_utf8_cell(table)
        raise ValueError(
            f"column {column!r}, row {row} of {path} is not valid UTF-8 (byte 0x{error.object[error.start]:02x}); "
            "expected UTF-8 strings"
        ) from None


def _first_non_utf8_cell(table: Any) -> tuple[str | None, int | None]:
    """``(column, row)`` of the first cell of ``table`` that does not decode as UTF-8."""
    for name in table.column_names:
        column = table.column(name)
        try:
            column.to_pylist()
        except UnicodeDecodeError:
            for row in range(len(column)):
                try:
                    column.slice(row, 1).to_pylist()
                except UnicodeDecodeError:
                    return name, row
    return None, None


def read_jsonl_rows(path: Path) -> list[dict[str, Any]]:
    """Read a jsonl file (one JSON object per line; blank lines are skipped).

    Raises:
        ValueError: A line is not UTF-8, not JSON, or not a JSON object.
    """
    rows = []
    for line_number, line in iter_utf8_lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"malformed JSON on line {line_number} of {path}: {e.msg}") from None
        if not isinstance(row, dict):
            raise ValueError(
                f"line {line_number} of {path} is a JSON {type(row).__name__}, "
                "expected a JSON object (one row per line)"
            )
        rows.append(row)
    return rows


def iter_utf8_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line number from 1, line)`` of a UTF-8 text file, line endings kept.

    Decoding line by line (no UTF-8 character contains a newline byte) is what
    lets a bad byte be reported with its line number.

    Raises:
        ValueError: A line is not valid UTF-8.
    """
    # gzip: how HumanEval ships (HumanEval.jsonl.gz)
    with gzip.open(path, "rb") if path.name.lower().endswith(".gz") else path.open("rb") as f:
        for line_number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"line {line_number} of {path} is not valid UTF-8 (byte 0x{raw[e.start]:02x} "
                    f"at byte {e.start + 1} of the line); expected a UTF-8 text file"
                ) from None
            if line_number == 1:
                # Spreadsheet programs start UTF-8 files with a byte-order mark, which
                # would otherwise stick to the first column name or break the JSON.
                line = line.removeprefix("\ufeff")
            yield line_number, line


def parse_prompt(prompt: Any, where: str, *, require_text: bool = True) -> tuple[dict, ...]:
    """Validate a row's prompt and return its messages as ``{"role", "content"}`` dicts.

    Args:
        prompt: The row's prompt value.
        where: Where it comes from (e.g. ``"row 3 of data.jsonl"``), for errors.
        require_text: Refuse a prompt whose every message is empty or whitespace (the
            converter passes False: it drops such rows and counts them instead).

    Raises:
        ValueError: ``prompt`` is not a non-empty list of messages with string
            ``role`` and ``content``, or (``require_text``) it has no text; the
            message starts with ``where``.
    """
    if not isinstance(prompt, list) or not prompt:
        raise ValueError(
            f"{where}: prompt must be a non-empty list of "
            f"{{'role', 'content'}} messages, got {type(prompt).__name__} {_short(prompt)}"
        )
    messages = []
    for message in prompt:
        if not (
            isinstance(message, dict)
            and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)
        ):
            raise ValueError(
                f"{where}: each prompt message must be a dict with string 'role' and 'content', got {_short(message)}"
            )
        # Only role and content are kept: parquet fills keys that some
        # messages lack with None, which would make equal prompts differ.
        messages.append({"role": message["role"], "content": message["content"]})
    if require_text and all(not message["content"].strip() for message in messages):
        raise ValueError(
            f"{where}: prompt has no text (every message's content is empty or whitespace), "
            f"got {_short(prompt)}; expected the problem statement in a message's content"
        )
    return tuple(messages)


def _reward_model_ground_truth(reward_model: Any, where: str) -> Any:
    """Return a row's raw ``reward_model.ground_truth`` (not yet converted to a string)."""
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        raise ValueError(f"{where}: reward_model must be a dict with a 'ground_truth' key, got {_short(reward_model)}")
    return reward_model["ground_truth"]


def messages_key(messages: Iterable[dict]) -> tuple[tuple[tuple[str, Any], ...], ...]:
    """A hashable, order-preserving key for a sequence of message dicts."""
    return tuple(tuple(sorted(message.items())) for message in messages)


def _short(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


__all__ = [
    "DEFAULT_DATA_SOURCE",
    "MathProblem",
    "REQUIRED_COLUMNS",
    "SUPPORTED_SUFFIXES",
    "ground_truth_to_str",
    "iter_utf8_lines",
    "load_math_dataset",
    "merge_repeats",
    "messages_key",
    "parse_prompt",
    "problem_to_row",
    "read_jsonl_rows",
    "read_parquet_rows",
    "read_rows",
    "write_jsonl",
]
