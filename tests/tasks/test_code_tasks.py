"""Tests for code tasks: the built-in generator and the jsonl/parquet loader."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dapo_rllib.tasks.data.code_arithmetic import (
    OPERATIONS,
    GeneratedFunction,
    generate_code_tasks,
    parse_generated_task,
    reference_solution,
)
from dapo_rllib.tasks.data.code_tasks import CODE_PROMPT_TEMPLATE, CodeTask, load_code_tasks, task_to_row
from dapo_rllib.tasks.data.code_tests import Call, FunctionTests, StdioCase, TestProgram, assert_calls
from dapo_rllib.tasks.data.datasets import write_jsonl
from dapo_rllib.tasks.rewards.code import score_code_many
from dapo_rllib.tasks.sandbox import Sandbox, SandboxLimits

PROMPT = [{"role": "user", "content": "Write add(a, b)."}]


# --- the generator ----------------------------------------------------------------------------


def _prompts(tasks: list[CodeTask]) -> set[str]:
    return {task.messages[-1]["content"] for task in tasks}


def test_generated_splits_are_disjoint_and_complete():
    train, test = generate_code_tasks("train"), generate_code_tasks("test")
    assert (len(train), len(test)) == (1609, 191)
    assert len(_prompts(train) | _prompts(test)) == 1800
    assert not _prompts(train) & _prompts(test)
    assert [task.index for task in test] == list(range(191))


def test_generated_tasks_are_deterministic_and_the_seed_only_orders_them():
    assert generate_code_tasks("train") == generate_code_tasks("train", seed=0)
    other = generate_code_tasks("train", seed=1)
    assert [t.messages for t in other] != [t.messages for t in generate_code_tasks("train")]
    by_prompt = {t.messages[-1]["content"]: t.tests for t in generate_code_tasks("train")}
    assert all(by_prompt[t.messages[-1]["content"]] == t.tests for t in other)


def test_num_problems_is_a_prefix():
    assert generate_code_tasks("test", 7, seed=3) == generate_code_tasks("test", seed=3)[:7]
    assert generate_code_tasks("test", 0) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("valid",), r"unknown code task split 'valid'.*\('train', 'test'\)"),
        (("test", 192), "192 is out of range.*191"),
        (("test", -1), "-1"),
    ],
)
def test_generator_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        generate_code_tasks(*args)


def test_generated_task_format():
    task = next(
        t
        for t in generate_code_tasks("train")
        if parse_generated_task(t) == GeneratedFunction("add", ("a", "b"), "sum", 0)
    )
    question = "Write a Python function `add(a, b)` that returns the sum of its two arguments."
    assert task.messages == ({"role": "user", "content": CODE_PROMPT_TEMPLATE.format(question=question)},)
    assert (task.kind, task.data_source, task.num_tests) == ("function", "code_arithmetic", 4)
    assert task.tests.fn_name == "add" and task.tests.inputs[0] == [3, 5] and task.tests.outputs[0] == 8
    assert all(out == a + b for (a, b), out in zip(task.tests.inputs, task.tests.outputs))
    assert reference_solution(task) == "```python\ndef add(a, b):\n    return a + b\n```"
    assert json.loads(task.ground_truth) == {
        "function": {"fn_name": "add", "inputs": list(task.tests.inputs), "outputs": list(task.tests.outputs)}
    }


def test_reference_solutions_are_short_and_regular():
    for task in generate_code_tasks("train"):
        function = parse_generated_task(task)
        expression = OPERATIONS[function.operation].expression.format(
            a=function.parameters[0], b=function.parameters[1]
        )
        plus = f" + {function.addend}" if function.addend else ""
        assert reference_solution(task) == (
            f"```python\ndef {function.name}({', '.join(function.parameters)}):\n    return {expression}{plus}\n```"
        )


def test_tests_tell_every_other_operation_and_addend_apart():
    # Otherwise a wrong operation or addend could pass, and the reward would not teach the task.
    for task in generate_code_tasks("train") + generate_code_tasks("test"):
        function = parse_generated_task(task)
        for name, operation in OPERATIONS.items():
            for addend in range(10):
                outputs = tuple(operation.apply(*arguments) + addend for arguments in task.tests.inputs)
                assert (outputs == task.tests.outputs) == ((name, addend) == (function.operation, function.addend))


def test_reference_solutions_pass_their_tests_in_the_sandbox():
    tasks = generate_code_tasks("test") + generate_code_tasks("train", 60)
    sandbox = Sandbox(SandboxLimits(timeout_s=10.0, memory_mb=256))
    try:
        results = score_code_many([(reference_solution(task), task) for task in tasks], sandbox)
    finally:
        sandbox.close()
    assert [(result["acc"], result["failure"], result["pred"]) for result in results] == [(True, None, "PPPP")] * len(
        tasks
    )


def test_reference_solution_rejects_other_tasks():
    task = CodeTask(tuple(PROMPT), ["assert add(1, 2) == 3"], "assert", "code", 0)
    with pytest.raises(ValueError, match="not a generated code task: 'Write add"):
        reference_solution(task)


def test_tasks_are_hashable_and_compare_by_value():
    tasks = generate_code_tasks("test", 5)
    assert len(set(tasks + generate_code_tasks("test", 5))) == 5
    assert replace(tasks[0], copies=2) != tasks[0]


# --- the loader ---------------------------------------------------------------------------------

ROWS = {
    "assert": {"data_source": "ace", "prompt": PROMPT, "tests": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"]},
    "stdio": {"data_source": "cc", "prompt": PROMPT, "stdio": [{"input": "1 2\n", "output": "3\n"}]},
    "function": {
        "data_source": "apps",
        "prompt": PROMPT,
        "function": {"fn_name": "add", "inputs": [[1, 2], [0, 0]], "outputs": [3, 0]},
    },
}
EXPECTED_TESTS = {
    "assert": ("assert add(1, 2) == 3", "assert add(0, 0) == 0"),
    "stdio": (StdioCase("1 2\n", "3\n"),),
    "function": FunctionTests("add", ([1, 2], [0, 0]), (3, 0)),
}


def _write(rows: list[dict], path):
    if path.suffix == ".jsonl":
        write_jsonl(rows, path)
    else:
        # Every row's keys as columns (from_pylist would take the first row's only), None where absent.
        columns = dict.fromkeys(key for row in rows for key in row)
        pq.write_table(pa.Table.from_pydict({key: [row.get(key) for row in rows] for key in columns}), path)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
@pytest.mark.parametrize("kind", sorted(ROWS))
def test_each_format_loads_from_jsonl_and_parquet(tmp_path, suffix, kind):
    (task,) = load_code_tasks(_write([ROWS[kind]], tmp_path / f"tasks{suffix}"))
    assert task == CodeTask(tuple(PROMPT), EXPECTED_TESTS[kind], kind, ROWS[kind]["data_source"], 0)
    assert task_to_row(task) == ROWS[kind]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_mixed_formats_dedup_and_copies(tmp_path, suffix):
    rows = [ROWS["assert"], ROWS["function"], ROWS["assert"], ROWS["stdio"], ROWS["function"], ROWS["assert"]]
    tasks = load_code_tasks(_write(rows, tmp_path / f"tasks{suffix}"))
    assert [(t.kind, t.index, t.copies) for t in tasks] == [("assert", 0, 3), ("function", 1, 2), ("stdio", 2, 1)]


def test_aliases_and_json_strings(tmp_path):
    apps_function = {"fn_name": "add", "inputs": [[1, 2]], "outputs": [3]}
    rows = [
        {"question": "Write add(a, b).", "test_cases": ["assert add(1, 2) == 3"]},
        {"question": "Sum two numbers.", "input_output": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})},
        {"prompt": PROMPT, "reward_model": {"ground_truth": json.dumps(apps_function), "style": "rule"}},
        {"prompt": PROMPT, "input_output": apps_function},
        {"prompt": PROMPT, "function": json.dumps(apps_function)},
        {"prompt": PROMPT, "stdio": json.dumps([{"input": "", "output": "hi"}])},
    ]
    tasks = load_code_tasks(_write(rows, tmp_path / "tasks.jsonl"))
    # Rows 2 to 4 hold the same prompt and tests, under three names: one task.
    assert [(t.kind, t.data_source, t.copies) for t in tasks] == [
        ("assert", "code", 1),
        ("stdio", "code", 1),
        ("function", "code", 3),
        ("stdio", "code", 1),
    ]
    assert tasks[0].messages == ({"role": "user", "content": CODE_PROMPT_TEMPLATE.format(question="Write add(a, b).")},)
    assert tasks[1].tests == (StdioCase("1 2\n", "3\n"),)
    assert tasks[2].tests == FunctionTests("add", ([1, 2],), (3,))
    assert tasks[3].tests == (StdioCase("", "hi"),)


def test_function_tests_with_mixed_types_in_parquet_as_json(tmp_path):
    spec = {"fn_name": "f", "inputs": [["a", 1, None], [[1.5], {"k": True}]], "outputs": ["x", [None]]}
    (task,) = load_code_tasks(_write([{"prompt": PROMPT, "function": json.dumps(spec)}], tmp_path / "t.parquet"))
    assert task.tests == FunctionTests("f", (["a", 1, None], [[1.5], {"k": True}]), ("x", [None]))


def test_long_tests_are_reported_by_digest():
    task = CodeTask(tuple(PROMPT), [{"input": "1" * 5000, "output": "1"}], "stdio", "code", 0)
    summary = json.loads(task.ground_truth)
    assert summary["kind"] == "stdio" and summary["num_tests"] == 1 and len(summary["sha256"]) == 64


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": PROMPT}, r"row 0 of .*exactly one of 'tests'.*found none"),
        (
            {"prompt": PROMPT, "tests": ["assert 1"], "stdio": [{"input": "", "output": ""}]},
            r"found \['stdio', 'tests'\]",
        ),
        ({"prompt": PROMPT, "tests": []}, r"'tests': expected a non-empty list of test statements"),
        ({"prompt": PROMPT, "tests": "assert add(1, 2) == 3"}, r"'tests': expected a non-empty list .*got str"),
        (
            {"prompt": PROMPT, "tests": ["assert add(1, 2) == 3", "assert add(1,"]},
            r"'tests': test 1 is not valid Python",
        ),
        ({"prompt": PROMPT, "tests": ["assert f(1) == 1", 3]}, r"test 1 must be a non-empty string"),
        (
            {"prompt": PROMPT, "stdio": [{"input": "1"}]},
            r"'stdio': case 0 must be an object with string 'input' and 'output'",
        ),
        ({"prompt": PROMPT, "stdio": "[{not json"}, r"'stdio': not valid JSON"),
        (
            {"prompt": PROMPT, "function": {"fn_name": "add", "inputs": [[1]], "outputs": [1, 2]}},
            r"1 inputs but 2 outputs",
        ),
        (
            {"prompt": PROMPT, "function": {"fn_name": "add me", "inputs": [[1]], "outputs": [1]}},
            r"fn_name must be a Python identifier, got 'add me'",
        ),
        (
            {"prompt": PROMPT, "function": {"fn_name": "f", "inputs": [1], "outputs": [1]}},
            r"inputs\[0\] must be the list of arguments",
        ),
        (
            {"prompt": PROMPT, "input_output": {"inputs": ["1"], "outputs": []}},
            r"'input_output': 'inputs' and 'outputs' must be lists of the same length",
        ),
        (
            {"prompt": PROMPT, "reward_model": {"ground_truth": "540"}},
            r"'reward_model.ground_truth': expected an object with 'inputs' and 'outputs'",
        ),
        ({"tests": ["assert f(1) == 1"]}, r"exactly one of 'prompt'.*and 'question'.*got neither"),
        ({"prompt": PROMPT, "question": "q", "tests": ["assert f(1) == 1"]}, r"got both"),
        ({"question": "  ", "tests": ["assert f(1) == 1"]}, r"question must be a non-empty string"),
        ({"prompt": [{"role": "user"}], "tests": ["assert f(1) == 1"]}, r"string 'role' and 'content'"),
        (
            {"data_source": 3, "prompt": PROMPT, "tests": ["assert f(1) == 1"]},
            r"data_source must be a string, got int 3",
        ),
    ],
)
def test_bad_rows_name_the_row_and_the_problem(tmp_path, row, message):
    path = _write([ROWS["assert"], row], tmp_path / "bad.jsonl")
    with pytest.raises(ValueError, match=message.replace("row 0 of", "row 1 of")):
        load_code_tasks(path)


def test_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="code task file not found"):
        load_code_tasks(tmp_path / "missing.jsonl")
    (tmp_path / "tasks.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match=r"unsupported code task file suffix '.csv'"):
        load_code_tasks(tmp_path / "tasks.csv")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="contains no rows"):
        load_code_tasks(tmp_path / "empty.jsonl")
    (tmp_path / "empty.parquet").write_bytes(b"")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(tmp_path / 'empty.parquet'))} is an empty file$"):
        load_code_tasks(tmp_path / "empty.parquet")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"question": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"line 1 of \S*latin1\.jsonl is not valid UTF-8"):
        load_code_tasks(tmp_path / "latin1.jsonl")


def test_direct_construction_is_checked():
    with pytest.raises(ValueError, match=r"unknown code task kind 'unit'"):
        CodeTask(tuple(PROMPT), ["assert f(1) == 1"], "unit", "code", 0)
    with pytest.raises(ValueError, match="non-empty list of"):
        CodeTask(tuple(PROMPT), {"fn_name": "f", "inputs": [], "outputs": []}, "function", "code", 0)


# --- assert tests become calls judged outside the candidate ------------------------------------


@pytest.mark.parametrize(
    ("test", "calls"),
    [
        ("assert add(1, 2) == 3", [Call("add", [1, 2], {}, 3)]),
        ("assert [1, (2, 3)] == pair(x=1)", [Call("pair", [], {"x": 1}, [1, [2, 3]])]),
        ("assert f(-1.5, 'a', None) is None", [Call("f", [-1.5, "a", None], {}, None, "is")]),
        ("assert f({'k': [True]})", [Call("f", [{"k": [True]}], {}, None, "truthy")]),
        ("assert not f(0), 'zero is not allowed'", [Call("f", [0], {}, None, "falsy")]),
        ("assert f(1) == 1\nassert g(2) is False", [Call("f", [1], {}, 1), Call("g", [2], {}, False, "is")]),
    ],
)
def test_assert_tests_become_calls(test, calls):
    assert list(assert_calls(test)) == calls


@pytest.mark.parametrize(
    ("test", "names"),
    [
        ("x = add(1, 2)", ("f", "add")),
        ("assert add(1, 2) == {3}", ("f", "add")),
        ("assert abs(f(1) - 0.5) < 1e-9", ("f",)),
        ("assert Solution().f(1) == 2", ("f", "Solution")),
        ("assert f(1) == g(2)", ("f", "g")),
        ("assert f(1) == float('inf')", ("f",)),
        ("assert f({1: 2}) == 1", ("f",)),
        ("for n in range(3):\n    assert f(n) in (n, n + 1)", ("f",)),
        ("assert math.isclose(f(1), 1.0)", ("f",)),  # a module MBPP's tests forget to import
    ],
)
def test_tests_of_any_form_load_as_a_test_program(tmp_path, test, names):
    path = _write([{"prompt": PROMPT, "tests": ["assert f(1) == 1", test]}], tmp_path / "tasks.jsonl")
    (task,) = load_code_tasks(path)
    assert task.kind == "assert" and not task.judged_by_calls
    imports = "import math\n" if "math." in test else ""
    assert task.program == TestProgram(imports, ("assert f(1) == 1", test), names)


def test_literal_assert_tests_are_judged_by_calls(tmp_path):
    path = _write([{"prompt": PROMPT, "tests": ["assert f(1) == 1", "assert f(2) is None"]}], tmp_path / "tasks.jsonl")
    (task,) = load_code_tasks(path)
    assert task.judged_by_calls and [call.fn_name for (call,) in task.calls] == ["f", "f"]


@pytest.mark.parametrize(
    ("tests", "error"),
    [
        (["assert f(1) == "], r"test 0 is not valid Python"),
        (["assert 1 == 1"], r"the tests call no function of the candidate"),
    ],
)
def test_tests_that_judge_nothing_are_refused_on_load(tmp_path, tests, error):
    path = _write([{"prompt": PROMPT, "tests": tests}], tmp_path / "tasks.jsonl")
    with pytest.raises(ValueError, match=r"row 0 of .*" + error):
        load_code_tasks(path)
