"""Math problem datasets in the DAPO row format (DAPO.md §4).

A row (parquet or jsonl) looks like::

    {"data_source": "math_dapo",
     "prompt": [{"role": "user", "content": "Solve the following ..."}],
     "ability": "MATH",
     "reward_model": {"ground_truth": "540", "style": "rule-lighteval/MATH_v2"},
     "extra_info": {"index": 2, ...}}

Only ``prompt`` and ``reward_model.ground_truth`` matter for training; the
loader turns each distinct (prompt, ground truth) pair into a
:class:`MathProblem`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger("dapo_rllib.data")

#: Columns every row must have; everything else is optional.
REQUIRED_COLUMNS = ("prompt", "reward_model")
#: ``data_source`` of rows that do not name one (DAPO-Math-17K's own value).
DEFAULT_DATA_SOURCE = "math_dapo"
#: File suffixes :func:`load_math_dataset` understands.
SUPPORTED_SUFFIXES = (".parquet", ".jsonl")


@dataclass(frozen=True)
class MathProblem:
    """One math problem: the chat prompt and the reference answer.

    Attributes:
        messages: The prompt as chat messages, each ``{"role": str, "content": str}``.
        ground_truth: The reference answer, compared as a string by the scorer.
        data_source: Which scorer applies (e.g. ``"math_dapo"``, ``"arithmetic"``).
        index: Position of the problem in its dataset after deduplication.
    """

    messages: tuple[dict, ...]
    ground_truth: str
    data_source: str
    index: int

    def __hash__(self) -> int:
        # The generated hash would fail on the (unhashable) message dicts;
        # hashing their items keeps problems usable in sets and as dict keys.
        return hash((_messages_key(self.messages), self.ground_truth, self.data_source, self.index))

    @property
    def prompt_text(self) -> str:
        """Content of the last user message (the last message if none is from the user)."""
        for message in reversed(self.messages):
            if message["role"] == "user":
                return message["content"]
        return self.messages[-1]["content"]


def load_math_dataset(path: str | os.PathLike[str]) -> list[MathProblem]:
    """Load a DAPO-format ``.parquet`` or ``.jsonl`` file as a list of problems.

    Duplicate rows (same prompt messages and same ground truth) are dropped,
    keeping the first occurrence; the number dropped is logged. DAPO-Math-17K
    repeats its prompts ~100 times by accident, and the AIME 2024 eval file
    repeats each of its 30 problems 32 times on purpose (for avg@32), so both
    load as their distinct problems.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: Unsupported suffix, empty file, missing required column,
            malformed row or malformed JSON line.
        TypeError: A ground truth or data source that is not a string.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"math dataset file not found: {path}")
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise ValueError(
            f"unsupported math dataset suffix {path.suffix!r} for {path}; "
            f"supported suffixes: {', '.join(SUPPORTED_SUFFIXES)}"
        )
    rows = _read_parquet(path) if suffix == ".parquet" else _read_jsonl(path)
    if not rows:
        raise ValueError(f"math dataset {path} contains no rows")

    columns = list(dict.fromkeys(key for row in rows for key in row))
    for column in REQUIRED_COLUMNS:
        if column not in columns:
            raise ValueError(
                f"math dataset {path} has no {column!r} column (required: "
                f"{', '.join(REQUIRED_COLUMNS)}); columns found: {columns}"
            )

    problems: list[MathProblem] = []
    seen: set[tuple] = set()
    for row_number, row in enumerate(rows):
        messages = _parse_prompt(row.get("prompt"), row_number, path)
        ground_truth = _parse_ground_truth(row.get("reward_model"), row_number, path)
        data_source = row.get("data_source", DEFAULT_DATA_SOURCE)
        if not isinstance(data_source, str):
            raise TypeError(
                f"row {row_number} of {path}: data_source must be a string, "
                f"got {type(data_source).__name__} {data_source!r}"
            )
        key = (_messages_key(messages), ground_truth)
        if key in seen:
            continue
        seen.add(key)
        problems.append(
            MathProblem(
                messages=messages,
                ground_truth=ground_truth,
                data_source=data_source,
                index=len(problems),
            )
        )
    logger.info(
        "Loaded %d problems from %s (%d rows, %d duplicates removed)",
        len(problems),
        path,
        len(rows),
        len(rows) - len(problems),
    )
    return problems


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


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    """Read a parquet file as plain Python rows."""
    # Imported here so that jsonl-only users do not pay for pyarrow's import.
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.stat().st_size == 0:
        raise ValueError(f"math dataset {path} is an empty file")
    try:
        table = pq.read_table(path)
    except pa.ArrowException as e:
        raise ValueError(f"cannot read {path} as parquet: {e}") from None
    # to_pylist() yields plain lists/dicts/str, unlike pandas, which would
    # hand back list columns as numpy object arrays.
    return table.to_pylist()


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read a jsonl file (one JSON object per line; blank lines are skipped)."""
    rows = []
    with path.open(encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
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


def _parse_prompt(prompt: Any, row_number: int, path: Path) -> tuple[dict, ...]:
    """Validate a row's prompt and return its messages as ``{"role", "content"}`` dicts."""
    if not isinstance(prompt, list) or not prompt:
        raise ValueError(
            f"row {row_number} of {path}: prompt must be a non-empty list of "
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
                f"row {row_number} of {path}: each prompt message must be a dict "
                f"with string 'role' and 'content', got {_short(message)}"
            )
        # Only role and content are kept: parquet fills keys that some
        # messages lack with None, which would make equal prompts differ.
        messages.append({"role": message["role"], "content": message["content"]})
    return tuple(messages)


def _parse_ground_truth(reward_model: Any, row_number: int, path: Path) -> str:
    """Return a row's ``reward_model.ground_truth``, which must be a string."""
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        raise ValueError(
            f"row {row_number} of {path}: reward_model must be a dict with a "
            f"'ground_truth' key, got {_short(reward_model)}"
        )
    ground_truth = reward_model["ground_truth"]
    if not isinstance(ground_truth, str):
        # The scorer compares strings; DAPO data stores answers as strings, so
        # a number here means a broken export, better reported than str()-ed.
        raise TypeError(
            f"row {row_number} of {path}: reward_model.ground_truth must be a string, "
            f"got {type(ground_truth).__name__} {ground_truth!r}"
        )
    return ground_truth


def _messages_key(messages: Iterable[dict]) -> tuple[tuple[tuple[str, Any], ...], ...]:
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
    "load_math_dataset",
    "problem_to_row",
    "write_jsonl",
]
