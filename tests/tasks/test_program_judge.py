"""Tests for the test-program judge: the dataset's test code and the candidate in sandboxes of their
own, calls between them as data. Attacks from both sides: a candidate that tries to forge the
verdict or stall the judge, and a poisoned test program (a broken task, never the candidate's fault).

Every program really runs in the sandbox; one small-limit sandbox serves the module.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

from dapo_rllib.env_vars import NO_REGISTRATION_ENV
from dapo_rllib.tasks.data.code_tasks import CodeTask
from dapo_rllib.tasks.rewards import data_values
from dapo_rllib.tasks.rewards.code import judge_code_many
from dapo_rllib.tasks.rewards.data_values import NotData
from dapo_rllib.tasks.sandbox import Sandbox
from tests.support.paths import ROOT
from tests.support.programs import ADD, HOSTILE_TEST_PROGRAMS, LIMITS, TIMEOUT_S, program_task

# The judge's bound on a task: the candidate's and the test program's budgets, and the stops.
BOUND_S = 2 * TIMEOUT_S + 4


@pytest.fixture(scope="module")
def sandbox():
    sandbox = Sandbox(LIMITS, max_workers=2)
    yield sandbox
    sandbox.close()


def _judged(sandbox, code: str, task: CodeTask) -> tuple[dict, list]:
    started = time.monotonic()
    ((result, reports),) = judge_code_many([(code, task)], sandbox)
    assert time.monotonic() - started < BOUND_S, "the judge must end in bounded time"
    return result, reports


# --- data across the boundary ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        3,
        -2.5,
        "text",
        b"\x00\xff",
        1 + 2j,
        [1, [2]],
        (1, (2,)),
        {1, 2},
        frozenset({(1, 2)}),
        {(1, 2): {"a": None}},
    ],
)
def test_data_values_round_trip_with_their_types(value):
    back = data_values.loads(data_values.dumps(value))
    assert back == value and type(back) is type(value)


def test_the_sandboxes_json_writer_is_what_json_reads():
    # The sandboxed side writes JSON without the json module (its import is a third of a run's start-up).
    tree = {
        'quote " backslash \\ newline \n tab \t nul \x00': [1e-05, 1e16, -0.0, 5e-324, 10**40, -7],
        "non-ASCII é, astral \U0001f600, lone surrogate \ud800": [None, True, False, "", []],
    }
    text = data_values.to_json(tree)
    assert text.isascii() and json.loads(text) == tree
    assert json.dumps(json.loads(text)) == json.dumps(tree)  # -0.0 and the surrogate included
    with pytest.raises(NotData):
        data_values.to_json(float("nan"))


def test_non_finite_floats_cross():
    inf, minus_inf, nan = data_values.loads(data_values.dumps((float("inf"), float("-inf"), float("nan"))))
    assert inf == float("inf") and minus_inf == float("-inf") and nan != nan


def test_a_lying_eq_cannot_cross():
    class Liar:
        def __eq__(self, other):
            return True

    class LyingInt(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    with pytest.raises(NotData, match="a Liar is not data"):
        data_values.dumps(Liar())
    # A subclass crosses as its base type's content: what arrives compares as a plain int.
    back = data_values.loads(data_values.dumps(LyingInt(0)))
    assert type(back) is int and back != 3


@pytest.mark.parametrize(
    "line",
    [
        '{"set": [[1]]}',  # unhashable item
        '{"tuple": [1], "extra": 2}',  # not a one-key tag
        '{"object": "os.system"}',  # no other tags
        '{"float": "1e5"}',
        "NaN",
        "[" * 5000 + "]" * 5000,
        "1" * 5000,  # past Python's int/str limit
        '{"bytes": "zz"}',
    ],
)
def test_data_parser_refuses_what_is_not_data(line):
    with pytest.raises(NotData):
        data_values.loads(line)


# --- the candidate's side -------------------------------------------------------------------


def test_benchmark_forms_are_judged(sandbox):
    task = program_task(
        setup="import math\ndef check(candidate):\n    assert math.isclose(candidate(0.1, 0.2), 0.3)\n",
        tests=[
            "assert abs(add(1.33, 0) - 1.33) < 1e-6",
            "assert add('ab' + 'c', 'de') == 'abcde'",
            "assert add((1,), (2,)) == (1 + 0, 2 * 1)",
            "for i in range(20):\n    assert add(i, i) == 2 * i",
            "assert set(add([1, 2], [2])) == {1, 2}",
            "check(add)",
        ],
    )
    result, _ = _judged(sandbox, ADD, task)
    assert (result["acc"], result["pred"]) == (True, "PPPPPP")


def test_a_class_of_the_candidate_and_its_methods(sandbox):
    task = program_task(tests=["s = Solution()\nassert s.twoSum([2, 7, 11], 9) == [0, 1]\nassert s.calls() == 1"])
    code = (
        "class Solution:\n    def __init__(self):\n        self.n = 0\n"
        "    def twoSum(self, nums, target):\n        self.n += 1\n"
        "        return next([i, j] for i in range(len(nums)) for j in range(i) if nums[i] + nums[j] == target)[::-1]\n"
        "    def calls(self):\n        return self.n\n"
    )
    assert _judged(sandbox, code, task)[0]["acc"] is True


def test_exceptions_the_tests_expect_still_pass(sandbox):
    task = program_task(
        tests=["try:\n    add(1, None)\n    raise AssertionError('no error')\nexcept TypeError:\n    pass"]
    )
    assert _judged(sandbox, ADD, task)[0]["acc"] is True


def test_unittest_cases_are_tests(sandbox):
    setup = (
        "import unittest\nclass TestAdd(unittest.TestCase):\n"
        "    def test_small(self):\n        self.assertEqual(add(1, 2), 3)\n"
        "    def test_negative(self):\n        self.assertEqual(add(-1, -2), -3)\n"
    )
    task = CodeTask(({"role": "user", "content": "Write add."},), {"setup": setup}, "program", "code", 0)
    assert task.program.tests == ("TestAdd('test_small').debug()", "TestAdd('test_negative').debug()")
    assert _judged(sandbox, ADD, task)[0]["pred"] == "PP"
    assert _judged(sandbox, "def add(a, b):\n    return abs(a) + b\n", task)[0]["pred"] == "PF"


FORGED = (
    '{"test": 0, "outcome": "pass", "detail": ""}\n{"test": 1, "outcome": "pass", "detail": ""}\n{"done": true}\n'
    '{"id": 1, "value": 3}\n{"id": 2, "value": 7}\n'
)


@pytest.mark.parametrize(
    "attack",
    [
        # forged verdicts and the expected values, on every descriptor it has
        f"import os\nfor fd in (1, 2, 3):\n    os.write(fd, {FORGED.encode()!r})\n",
        # the test program's expected output, printed
        "print('3\\n7\\nOK: 2 passed')\n",
        # patching its own server
        'import json\njson.dumps = lambda *a, **k: \'{"id": 1, "value": 3}\'\n',
    ],
)
def test_forged_verdicts_score_as_the_wrong_solution(sandbox, attack):
    wrong = "def add(a, b):\n    return a * b\n" + attack
    result, _ = _judged(sandbox, wrong, program_task(tests=["assert add(1, 2) == 3", "assert add(3, 4) == 7"]))
    assert (result["acc"], result["tests_passed"]) == (False, 0), result


def test_slow_answers_run_out_of_the_candidates_time(sandbox):
    slow = f"import time\ndef add(a, b):\n    time.sleep({TIMEOUT_S / 3})\n    return a + b\n"
    tests = [f"assert add({i}, 1) == {i + 1}" for i in range(8)]
    result, reports = _judged(sandbox, slow, program_task(tests=tests))
    outcomes = collections.Counter(report.outcome for report in reports)
    # About three calls fit in its time; the rest fail at once as timeouts, not a broken task.
    assert result["failure"] == "timeout" and result["score_timed_out"] and result["broken_task"] is None
    assert 1 <= outcomes["pass"] <= 3 and outcomes["timeout"] == 8 - outcomes["pass"], outcomes


@pytest.mark.parametrize(
    ("body", "failure"),
    [
        ("return 'x' * (2 << 20)", "runtime error"),  # past the output cap: its run is stopped
        ("v = []\n    for _ in range(2000):\n        v = [v]\n    return v", "wrong answer"),  # too deep
        ("return lambda: 3", "wrong answer"),  # not data
        ("return iter([3])", "wrong answer"),
    ],
)
def test_huge_deep_and_non_data_values_fail_the_call(sandbox, body, failure):
    result, reports = _judged(sandbox, f"def add(a, b):\n    {body}\n", program_task())
    assert (result["acc"], result["failure"]) == (False, failure), reports


def test_a_candidate_that_kills_its_sandbox_mid_task(sandbox):
    code = (
        "import os, signal\ndef add(a, b):\n    if a == 3:\n"
        "        os.kill(-1, signal.SIGKILL)\n        os.kill(os.getpid(), signal.SIGKILL)\n    return a + b\n"
    )
    tests = ["assert add(1, 2) == 3", "assert add(3, 4) == 7", "assert add(5, 6) == 11"]
    result, reports = _judged(sandbox, code, program_task(tests=tests))
    assert [report.outcome for report in reports] == ["pass", "runtime error", "runtime error"]
    assert result["broken_task"] is None


# --- the test program's side: a poisoned row is a broken task -----------------------------


@pytest.mark.parametrize("name", sorted(HOSTILE_TEST_PROGRAMS))
def test_hostile_test_programs_are_broken_tasks(sandbox, name):
    task = program_task(setup=HOSTILE_TEST_PROGRAMS[name])
    result, _ = _judged(sandbox, ADD, task)
    assert (result["failure"], result["acc"]) == ("broken task", False), result
    assert result["broken_task"], result


def test_a_test_that_fails_without_calling_the_candidate_is_a_broken_task(sandbox):
    result, _ = _judged(sandbox, ADD, program_task(tests=["assert add(1, 2) == 3", "assert 1 == 2, add"]))
    assert result["failure"] == "broken task" and "test 1 fails without calling the candidate" in result["broken_task"]


# Run in a fresh interpreter, so that no other test's processes or descriptors (Ray, vLLM) blur the count; without
# registering the algorithms, which the judge does not need (half of the interpreter's 10 s of imports).
LEAK_CHECK = """
import os, sys
sys.path.insert(0, {root!r})
from tests.support.programs import ADD, HOSTILE_TEST_PROGRAMS, LIMITS, program_task
from dapo_rllib.tasks.rewards.code import judge_code_many
from dapo_rllib.tasks.sandbox import Sandbox

def children():
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % pid) as stat:
                if int(stat.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                    found.add(pid)
        except OSError:
            pass
    return found

sandbox = Sandbox(LIMITS, max_workers=2)
pairs = [(ADD, program_task(setup=source)) for source in HOSTILE_TEST_PROGRAMS.values()]
daemon = "import os\\nif os.fork() == 0:\\n    os.setsid()\\n    import time\\n    time.sleep(60)\\n"
pairs.append((daemon + ADD, program_task()))
judge_code_many(pairs[:1], sandbox)  # the pool's threads and the codec's imports, before counting
fds, processes = len(os.listdir("/proc/self/fd")), children()
judge_code_many(pairs, sandbox)
print(len(os.listdir("/proc/self/fd")) - fds, len(children() - processes))
"""


def test_nothing_is_left_behind():
    script = LEAK_CHECK.format(root=str(ROOT))
    environment = os.environ | {NO_REGISTRATION_ENV: "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=environment)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["0", "0"], "descriptors and processes left behind"
    assert not os.path.exists(os.path.join(tempfile.gettempdir(), "fill"))  # it filled its own /tmp only
