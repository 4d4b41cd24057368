"""Code tasks: a prompt asking for Python code and the tests that judge it.

Four test formats (``CodeTask.kind``), as found in public code-RL data and benchmarks:

- ``"assert"``: statements, each a test (``assert add(1, 2) == 3``, AceCode-87K's ``test_cases``,
  MBPP's ``test_list``; any Python: tolerance checks, loops, helper calls). When every statement is a
  literal call (:func:`assert_calls`) the expected values stay in the trusted process and only the
  calls reach the candidate; otherwise the statements run as a test program;
- ``"stdio"``: cases ``{"input": str, "output": str}``: the candidate is run as a program with
  the input on stdin, and its stdout must equal the output up to trailing whitespace (APPS,
  CodeContests, LiveCodeBench's stdin tests);
- ``"function"``: ``{"fn_name": str, "inputs": [[args...], ...], "outputs": [value, ...]}``:
  the candidate's function ``fn_name`` is called with each argument list and must return the
  expected JSON value (APPS/TACO call-based problems);
- ``"program"``: a test program (:class:`TestProgram`: setup code, test statements, the candidate's
  names they call), run in a sandbox of its own against the candidate (HumanEval's ``check``,
  MBPP's ``test_setup_code``, unittest cases, LiveCodeBench's functional tests).

A row of a ``.jsonl``/``.parquet`` file (:func:`load_code_tasks`)::

    {"data_source": "my_code",                                     # optional, default "code"
     "prompt": [{"role": "user", "content": "..."}],               # or "question": "..."
     "tests": ["assert add(1, 2) == 3", ...]}                      # or one of:
     "stdio": [{"input": "1 2\\n", "output": "3\\n"}, ...]
     "function": {"fn_name": "add", "inputs": [[1, 2]], "outputs": [3]}
     "program": {"setup": "def check(f): ...", "tests": ["check(add)"], "names": ["add"]}
                # or test code as a string: its unittest cases are the tests, else it is one test;
                # "names" defaults to the names the tests use and never define

Rows of the public benchmarks (HumanEval, MBPP, LiveCodeBench) load as they ship:
:mod:`dapo_rllib.tasks.data.code_benchmarks`.

Names used elsewhere are accepted too: ``test_cases`` (AceCode-87K) for ``tests``; and an
``{"inputs", "outputs"[, "fn_name"]}`` object, as a JSON string or not, in ``input_output``
(APPS, TACO) or ``reward_model.ground_truth`` (verl's code rows), which is a ``function`` spec
when it names a function and ``stdio`` cases otherwise. ``stdio`` and ``function`` may also be
JSON strings, which is how parquet holds values of mixed types.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from dapo_rllib.tasks.data.code_benchmarks import benchmark_of, benchmark_row
from dapo_rllib.tasks.data.code_tests import (
    Call,
    TestProgram,
    TestSpec,
    assert_calls,
    checked_tests,
    free_names,
    program_with_imports,
    tests_to_json,
)
from dapo_rllib.tasks.data.datasets import (
    first_row,
    merge_repeats,
    messages_key,
    parse_prompt,
    read_rows,
    short_repr,
    write_jsonl,
)

#: The row key that holds each kind's tests (and the key of :attr:`CodeTask.ground_truth`).
ROW_KEY_BY_KIND = {"assert": "tests", "stdio": "stdio", "function": "function", "program": "program"}
#: ``data_source`` of file rows that do not name one.
DEFAULT_CODE_DATA_SOURCE = "code"
#: How a plain ``question`` becomes the user message; the generated tasks (:mod:`dapo_rllib.tasks.data.code_arithmetic`) use it too.
CODE_PROMPT_TEMPLATE = "{question} Answer with a single ```python code block."
#: Longer test specs are reported by digest: the ground truth travels with every episode.
GROUND_TRUTH_MAX_CHARS = 2000


@dataclass(frozen=True)
class CodeTask:
    """One code task: the chat prompt and the tests a candidate program must pass.

    Attributes:
        messages: The prompt as chat messages, each ``{"role": str, "content": str}``.
        tests: The tests, in the form of ``kind`` (see :data:`TestSpec`).
        kind: ``"assert"``, ``"stdio"`` or ``"function"``.
        data_source: Where the task comes from (metrics are reported per source).
        index: Position of the task in its dataset after deduplication.
        copies: How many rows of its file held this (prompt, tests) pair.
    """

    messages: tuple[dict, ...]
    tests: TestSpec
    kind: str
    data_source: str
    index: int
    copies: int = 1
    # The tests as compact JSON, built once: the dedup key, part of the hash, and the ground truth.
    _tests_json: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tests", checked_tests(self.kind, self.tests))
        object.__setattr__(self, "_tests_json", _compact_json({ROW_KEY_BY_KIND[self.kind]: tests_to_json(self.tests)}))

    def __hash__(self) -> int:
        # Message dicts and argument lists are unhashable; their JSON forms stand in.
        return hash((messages_key(self.messages), self._tests_json, self.data_source, self.index, self.copies))

    @property
    def num_tests(self) -> int:
        if self.kind == "function":
            return len(self.tests.inputs)
        return len(self.tests.tests) if self.kind == "program" else len(self.tests)

    @cached_property
    def judged_by_calls(self) -> bool:
        """Whether the tests are calls with literal arguments and expected values (:attr:`calls`), judged
        in this process from the candidate's answers; else (``"program"`` tasks, and ``"assert"`` tasks
        with a statement of another form) they run as a test program (:attr:`program`)."""
        if self.kind == "function":
            return True
        if self.kind != "assert":
            return False
        try:
            self.calls
        except ValueError:
            return False
        return True

    @cached_property
    def program(self) -> TestProgram:
        """The tests as a test program (``"assert"`` and ``"program"`` tasks).

        Raises:
            ValueError: A ``"stdio"`` or ``"function"`` task.
        """
        if self.kind == "program":
            return self.tests
        if self.kind != "assert":
            raise ValueError(f"{self.kind} tasks have no test program")
        return program_with_imports("", self.tests, free_names("\n".join(self.tests)))

    @property
    def completion_prefix(self) -> str:
        """The text the model's completion continues: a final assistant message of the prompt
        (a completion-style prompt, such as HumanEval's function header), else ""."""
        last = self.messages[-1]
        return last["content"] if last["role"] == "assistant" else ""

    @cached_property
    def calls(self) -> tuple[tuple[Call, ...], ...]:
        """Per test, the calls that must all be answered right (``"assert"`` and ``"function"`` tasks).

        Raises:
            ValueError: A ``"stdio"`` task: its tests are runs of the program, not calls.
        """
        if self.kind in ("stdio", "program"):
            raise ValueError(f"{self.kind} tasks are judged by running programs, they have no calls")
        if self.kind == "assert":
            return tuple(assert_calls(test) for test in self.tests)
        return tuple(
            (Call(self.tests.fn_name, list(arguments), {}, expected),)
            for arguments, expected in zip(self.tests.inputs, self.tests.outputs)
        )

    @cached_property
    def ground_truth(self) -> str:
        """The tests as a JSON row fragment (``{"tests": [...]}``, ``{"function": {...}}``...).

        Specs longer than :data:`GROUND_TRUTH_MAX_CHARS` are given as
        ``{"kind", "num_tests", "sha256"}`` of their full JSON instead.
        """
        if len(self._tests_json) <= GROUND_TRUTH_MAX_CHARS:
            return self._tests_json
        digest = hashlib.sha256(self._tests_json.encode()).hexdigest()
        return _compact_json({"kind": self.kind, "num_tests": self.num_tests, "sha256": digest})


# --- files -------------------------------------------------------------------------------


def load_code_tasks(path: str | os.PathLike[str], *, humaneval_style: str = "completion") -> list[CodeTask]:
    """Load the code tasks of a ``.jsonl`` or ``.parquet`` file (row format: module docstring).

    Rows with the same prompt and tests are merged into the first, whose ``copies`` counts them.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: A file :func:`~dapo_rllib.tasks.data.datasets.read_rows` cannot read, a row
            without a prompt or tests, with more than one of them, or with malformed ones (the
            message names the row).
    """
    path = Path(path)
    rows = read_rows(path, "code task")

    tasks = [
        _task_from_row(row, f"row {row_number} of {path}", index=0, humaneval_style=humaneval_style)
        for row_number, row in enumerate(rows)
    ]
    return merge_repeats([((messages_key(t.messages), t._tests_json), t) for t in tasks], "code tasks", path)


def is_code_task_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a file whose first row is a code task (of this module's format, or a public
    benchmark's: :mod:`dapo_rllib.tasks.data.code_benchmarks`); False for anything else, a missing file included."""
    row = first_row(path)
    if row is None:
        return False
    if benchmark_of(row) is not None:
        return True
    sources = _row_sources(row)
    # A math row's reward_model.ground_truth is an answer; a verl code row's, an {inputs, outputs} object.
    ground_truth = sources.pop("reward_model.ground_truth", None)
    if isinstance(ground_truth, str):
        try:
            ground_truth = json.loads(ground_truth)
        except json.JSONDecodeError:
            ground_truth = None
    return bool(sources) or isinstance(ground_truth, Mapping) and {"inputs", "outputs"} <= set(ground_truth)


def task_to_row(task: CodeTask) -> dict:
    """A row of the file format that loads back as ``task`` (inverse of the loader)."""
    return {
        "data_source": task.data_source,
        "prompt": [dict(message) for message in task.messages],
        ROW_KEY_BY_KIND[task.kind]: tests_to_json(task.tests),
    }


def write_code_tasks(tasks: Sequence[CodeTask], path: str | os.PathLike[str]) -> Path:
    """Write ``tasks`` as a ``.parquet`` (or ``.jsonl``) file that :func:`load_code_tasks` loads back to
    them, a row per copy. In parquet the tests other than statement lists are JSON strings (a column
    holds one type)."""
    path = Path(path)
    rows = [task_to_row(task) for task in tasks for _ in range(task.copies)]
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".jsonl":
        write_jsonl(rows, path)
        return path
    import pyarrow as pa
    import pyarrow.parquet as pq

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    columns = [("data_source", pa.string()), ("prompt", pa.list_(message)), ("tests", pa.list_(pa.string()))]
    columns += [(key, pa.string()) for key in ("stdio", "function", "program")]
    table = [
        {key: _compact_json(value) if key in ("stdio", "function", "program") else value for key, value in row.items()}
        for row in rows
    ]
    pq.write_table(pa.Table.from_pylist(table, schema=pa.schema(columns)), path)
    return path


def _task_from_row(row: Mapping[str, Any], where: str, index: int, humaneval_style: str = "completion") -> CodeTask:
    if benchmark := benchmark_of(row):
        row = benchmark_row(row, benchmark, where, humaneval_style)
    data_source = row.get("data_source", DEFAULT_CODE_DATA_SOURCE)
    if not isinstance(data_source, str):
        raise ValueError(
            f"{where}: data_source must be a string, got {type(data_source).__name__} {short_repr(data_source)}"
        )
    messages = _row_messages(row, where)
    column, kind, spec = _row_tests(row, where)
    try:
        return CodeTask(messages, spec, kind, data_source, index)
    except ValueError as error:
        raise ValueError(f"{where}, {column!r}: {error}") from None


def _row_messages(row: Mapping[str, Any], where: str) -> tuple[dict, ...]:
    prompt, question = row.get("prompt"), row.get("question")
    if (prompt is None) == (question is None):
        raise ValueError(
            f"{where}: expected exactly one of 'prompt' (a list of chat messages) and "
            f"'question' (a string), got {'both' if prompt is not None else 'neither'}"
        )
    if prompt is not None:
        return parse_prompt(prompt, where)
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"{where}: question must be a non-empty string, got {short_repr(question)}")
    return ({"role": "user", "content": CODE_PROMPT_TEMPLATE.format(question=question)},)


def _row_sources(row: Mapping[str, Any]) -> dict[str, Any]:
    """The places of ``row`` that can hold tests and are not missing (parquet fills absent columns with None)."""
    reward_model = row.get("reward_model")
    candidates = {
        "tests": row.get("tests"),
        "test_cases": row.get("test_cases"),
        "stdio": row.get("stdio"),
        "function": row.get("function"),
        "program": row.get("program"),
        "input_output": row.get("input_output"),
        "reward_model.ground_truth": reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None,
    }
    return {name: value for name, value in candidates.items() if value is not None}


def _row_tests(row: Mapping[str, Any], where: str) -> tuple[str, str, Any]:
    """``(column, kind, unchecked tests)`` of a row."""
    sources = _row_sources(row)
    if len(sources) != 1:
        raise ValueError(
            f"{where}: expected the tests in exactly one of 'tests' (test statements), 'stdio' "
            f"(input/output cases), 'function' ({{fn_name, inputs, outputs}}), 'program' ({{setup, tests, "
            f"names}} or test code), or their aliases "
            f"'test_cases', 'input_output', 'reward_model.ground_truth'; found {sorted(sources) or 'none'}"
        )
    ((column, value),) = sources.items()
    if column in ("tests", "test_cases"):
        return column, "assert", value
    if column == "program":
        return column, column, _program_value(value)
    value = _decoded_json(value, f"{where}, {column!r}")
    if column in ("stdio", "function"):
        return column, column, value
    return column, *_inputs_outputs_tests(value, f"{where}, {column!r}")


def _program_value(value: Any) -> Any:
    """A row's ``program``: an object (parquet: a struct, or its JSON string), or a string of test code."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            pass  # a dict display in Python code
    return value


def _decoded_json(value: Any, where: str) -> Any:
    """``value``, parsed first if it is a JSON string."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where}: not valid JSON ({error.msg}): {short_repr(value)}") from None


def _inputs_outputs_tests(value: Any, where: str) -> tuple[str, Any]:
    """``(kind, unchecked tests)`` of an APPS/TACO ``{"inputs", "outputs"[, "fn_name"]}`` object."""
    if not (isinstance(value, Mapping) and {"inputs", "outputs"} <= set(value)):
        raise ValueError(
            f"{where}: expected an object with 'inputs' and 'outputs' (and 'fn_name' for a function), got {short_repr(value)}"
        )
    if value.get("fn_name") is not None:
        return "function", value
    inputs, outputs = value["inputs"], value["outputs"]
    if not (isinstance(inputs, list) and isinstance(outputs, list) and len(inputs) == len(outputs)):
        raise ValueError(
            f"{where}: 'inputs' and 'outputs' must be lists of the same length, got {short_repr(inputs)} and {short_repr(outputs)}"
        )
    return "stdio", [{"input": i, "output": o} for i, o in zip(inputs, outputs)]


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


__all__ = [
    "CODE_PROMPT_TEMPLATE",
    "DEFAULT_CODE_DATA_SOURCE",
    "CodeTask",
    "is_code_task_file",
    "load_code_tasks",
    "task_to_row",
    "write_code_tasks",
]
