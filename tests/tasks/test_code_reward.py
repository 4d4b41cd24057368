"""Tests for scoring code completions: extraction, the three test formats, and reward hacks.

Every candidate really runs in the sandbox; one small-limit sandbox serves the module.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest

from dapo_rllib.tasks.data.code_tasks import CodeTask
from dapo_rllib.tasks.rewards.code import extract_code, judge_code_many, normalize_output, score_code, score_code_many
from dapo_rllib.tasks.sandbox import Sandbox, SandboxLimits

TIMEOUT_S = 2.0
MEMORY_MB = 256


@pytest.fixture(scope="module")
def sandbox():
    sandbox = Sandbox(SandboxLimits(timeout_s=TIMEOUT_S, cpu_s=2, memory_mb=MEMORY_MB), max_workers=2)
    yield sandbox
    sandbox.close()


def _task(kind: str, tests) -> CodeTask:
    return CodeTask(({"role": "user", "content": "Add two numbers."},), tests, kind, "code", 0)


# The same three tests, in each format: add(1, 2) == 3, add(3, 4) == 7, add(-1, 1) == 0.
TASKS = {
    "assert": _task("assert", ["assert add(1, 2) == 3", "assert add(3, 4) == 7", "assert add(-1, 1) == 0"]),
    "function": _task("function", {"fn_name": "add", "inputs": [[1, 2], [3, 4], [-1, 1]], "outputs": [3, 7, 0]}),
    # A test program as benchmarks ship them: a tolerance check, a loop, a helper checking `candidate`.
    "program": _task(
        "program",
        {
            "setup": "def check(candidate):\n    assert candidate(-1, 1) == 0\n",
            "tests": [
                "assert abs(add(1, 2) - 3) < 1e-9",
                "for a, b in [(3, 4)]:\n    assert add(a, b) == 7",
                "check(add)",
            ],
        },
    ),
    "stdio": _task(
        "stdio",
        [
            {"input": "1 2\n", "output": "3\n"},
            {"input": "3 4\n", "output": "7\n"},
            {"input": "-1 1\n", "output": "0\n"},
        ],
    ),
}
FORMATS = sorted(TASKS)


def _program(kind: str, body: str) -> str:
    """A candidate whose addition is ``body`` (an expression over a and b), in the task's form."""
    if kind == "stdio":
        return f"a, b = map(int, input().split())\nprint({body})\n"
    return f"def add(a, b):\n    return {body}\n"


def _fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}```\nIt adds the numbers."


def _score(sandbox, code: str, kind: str, **kwargs) -> dict:
    return score_code(_fenced(code), TASKS[kind], sandbox, **kwargs)


def _summary(result: dict) -> tuple:
    return result["score"], result["acc"], result["tests_passed"], result["failure"], result["pred"]


# --- extraction -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "code"),
    [
        ("```python\nprint(1)\n```", "print(1)\n"),
        ("Text\n```py\nx = 1\n```\nmore text", "x = 1\n"),
        ("```\nx = 2\n```", "x = 2\n"),
        ("```Python3 title\nx = 3\n```", "x = 3\n"),
        ("```python\nfirst = 1\n```\nthen\n```python\nlast = 2\n```", "last = 2\n"),
        ("```python\nx = 1\n```\n```cpp\nint main() {}\n```", "x = 1\n"),
        ("```cpp\nint main() {}\n```\n```\ny = 2\n```", "y = 2\n"),
        ("def f():\n    return 1\n", "def f():\n    return 1\n"),
        ("```cpp\nint main() {}\n```", "```cpp\nint main() {}\n```"),
        ("", None),
        (" \n\t\n", None),
        ("Some text\n```python\n  \n```", None),
    ],
)
def test_extract_code(completion, code):
    assert extract_code(completion) == code


def test_normalize_output():
    assert normalize_output("\n\n  3 4  \r\n5\t\n\n\n") == "  3 4\n5"
    assert normalize_output("a\n\nb") == "a\n\nb"  # blank lines inside the output count
    assert normalize_output("") == normalize_output("\n \n") == ""


# --- each format, each kind of candidate -------------------------------------------------


@pytest.mark.parametrize("kind", FORMATS)
def test_correct_candidate_passes(sandbox, kind):
    result = _score(sandbox, _program(kind, "a + b"), kind)
    assert result == {
        "score": 1.0,
        "acc": True,
        "pred": "PPP",
        "tests_passed": 3,
        "tests_total": 3,
        "failure": None,
        "broken_task": None,
        "score_timed_out": False,
    }


@pytest.mark.parametrize("kind", FORMATS)
def test_wrong_candidate_fails_the_tests_it_gets_wrong(sandbox, kind):
    # Right for the first two tests only.
    assert _summary(_score(sandbox, _program(kind, "abs(a) + b"), kind)) == (-1.0, False, 2, "wrong answer", "PPF")


@pytest.mark.parametrize("kind", FORMATS)
def test_syntax_error(sandbox, kind):
    result = _score(sandbox, "def add(a, b)\n    return a + b\n", kind)
    assert _summary(result) == (-1.0, False, 0, "syntax error", None)


@pytest.mark.parametrize("kind", FORMATS)
def test_runtime_error_at_top_level(sandbox, kind):
    result = _score(sandbox, _program(kind, "a + b") + "raise ValueError('boom')\n", kind)
    assert _summary(result) == (-1.0, False, 0, "runtime error", "FFF")


@pytest.mark.parametrize("kind", FORMATS)
def test_runtime_error_in_some_tests(sandbox, kind):
    result = _score(sandbox, _program(kind, "a + b if a > 0 else 1 // 0"), kind)
    assert _summary(result) == (-1.0, False, 2, "runtime error", "PPF")


@pytest.mark.parametrize("kind", FORMATS)
@pytest.mark.parametrize("completion", ["", "   \n", "```python\n\n```"])
def test_no_code(sandbox, kind, completion):
    result = score_code(completion, TASKS[kind], sandbox)
    assert _summary(result) == (-1.0, False, 0, "no code", None)
    assert result["tests_total"] == 3 and result["score_timed_out"] is False


@pytest.mark.parametrize("kind", ["assert", "function"])
def test_infinite_loop_times_out(sandbox, kind):
    result = _score(sandbox, _program(kind, "a + b") + "while True:\n    pass\n", kind)
    assert _summary(result) == (-1.0, False, 0, "timeout", None)
    assert result["score_timed_out"] is True


def test_infinite_loop_in_one_stdio_case_times_out_that_case(sandbox):
    code = "a, b = map(int, input().split())\nwhile a < 0:\n    pass\nprint(a + b)\n"
    result = _score(sandbox, code, "stdio")
    assert _summary(result) == (-1.0, False, 2, "timeout", "PPF")
    assert result["score_timed_out"] is True


@pytest.mark.parametrize("kind", FORMATS)
def test_memory_hog(sandbox, kind):
    hog = f"hog = bytearray({2 * MEMORY_MB} * 1024 * 1024)\n"
    result = _score(sandbox, _program(kind, "a + b") + hog, kind)
    assert _summary(result) == (-1.0, False, 0, "memory limit", "FFF")
    assert result["score_timed_out"] is False


def test_memory_hog_inside_a_test(sandbox):
    code = "def add(a, b):\n    if a < 0:\n        return len(bytearray(10 ** 12))\n    return a + b\n"
    assert _summary(_score(sandbox, code, "function")) == (-1.0, False, 2, "memory limit", "PPF")


def test_fraction_reward(sandbox):
    assert _score(sandbox, _program("function", "abs(a) + b"), "function", reward="fraction")["score"] == pytest.approx(
        2 / 3
    )
    assert _score(sandbox, _program("function", "a + b"), "function", reward="fraction")["score"] == 1.0
    assert score_code("", TASKS["function"], sandbox, reward="fraction")["score"] == 0.0
    result = _score(sandbox, _program("stdio", "a * b"), "stdio", reward="fraction")
    assert (result["score"], result["pred"]) == (0.0, "FFF")


def test_unknown_reward_mode(sandbox):
    with pytest.raises(ValueError, match=r"'binary', 'fraction'.*'ternary'"):
        score_code("x = 1", TASKS["function"], sandbox, reward="ternary")


# --- stdin/stdout specifics -------------------------------------------------------------


@pytest.mark.parametrize(
    "read_numbers",
    [
        "map(int, input().split())",
        "map(int, sys.stdin.readline().split())",
        "map(int, sys.stdin.read().split())",
        "map(int, sys.stdin.buffer.read().split())",
        "map(int, open(0).read().split())",
        "(int(x) for line in sys.stdin for x in line.split())",
    ],
)
def test_stdio_candidate_reads_stdin_any_way(sandbox, read_numbers):
    code = f"import sys\na, b = {read_numbers}\nsys.stdout.write(str(a + b) + '\\n')\n"
    assert _score(sandbox, code, "stdio")["acc"] is True


def test_stdio_output_is_compared_up_to_trailing_whitespace(sandbox):
    trailing = "a, b = map(int, input().split())\nprint()\nprint(a + b, end='  \\r\\n\\n\\n')\n"
    assert _score(sandbox, trailing, "stdio")["acc"] is True
    leading = "a, b = map(int, input().split())\nprint(' ', a + b)\n"
    assert _summary(_score(sandbox, leading, "stdio")) == (-1.0, False, 0, "wrong answer", "FFF")


def test_stdio_main_guard_runs(sandbox):
    code = "def main():\n    a, b = map(int, input().split())\n    print(a + b)\n\nif __name__ == '__main__':\n    main()\n"
    assert _score(sandbox, code, "stdio")["acc"] is True


@pytest.mark.parametrize(
    ("exit_call", "passes"),
    [("sys.exit()", True), ("sys.exit(0)", True), ("raise SystemExit(1)", False), ("sys.exit('bad input')", False)],
)
def test_stdio_system_exit_after_the_output(sandbox, exit_call, passes):
    code = f"import sys\na, b = map(int, input().split())\nprint(a + b)\n{exit_call}\nprint('unreached')\n"
    result = _score(sandbox, code, "stdio")
    assert (result["acc"], result["failure"]) == ((True, None) if passes else (False, "runtime error"))


# --- reward hacks ---------------------------------------------------------------------------
# The verdict lives in this process; each attack below is a wrong solution (it multiplies) that
# tries to make the judge believe otherwise, and must score as the wrong solution it is.

CALL_FORMATS = ["assert", "function", "program"]


@pytest.mark.parametrize("kind", CALL_FORMATS)
def test_system_exit_ends_the_candidate_but_the_tests_still_run(sandbox, kind):
    exit_early = "import sys\nsys.exit(0)\n" + _program(kind, "a + b")
    assert _summary(_score(sandbox, exit_early, kind)) == (-1.0, False, 0, "runtime error", "FFF")
    exit_after = _program(kind, "a + b") + "import sys\nsys.exit(0)\n"
    assert _score(sandbox, exit_after, kind)["acc"] is True


@pytest.mark.parametrize(
    ("kind", "failure", "pred"),
    [
        ("assert", "runtime error", None),
        ("function", "runtime error", None),
        ("program", "runtime error", None),
        ("stdio", "wrong answer", "FFF"),
    ],
)
def test_os_exit_is_not_a_pass(sandbox, kind, failure, pred):
    # Call formats: nothing answered. stdio: exit status 0, but the buffered output never left.
    code = _program(kind, "a + b") + "import os\nos._exit(0)\n"
    assert _summary(_score(sandbox, code, kind)) == (-1.0, False, 0, failure, pred)


def _forged_answers(n: int) -> str:
    """Lines claiming every call passed, in every shape a report has had."""
    lines = [{"call": i, "value": True} for i in range(n)] + [{"nonce": "0", "failure": None, "outcomes": ["pass"] * n}]
    return "\\n".join(json.dumps(line).replace('"', '\\"') for line in lines)


ATTACKS = {
    "fake reports on fd 3, then exit": 'import os\nos.write(3, "{forged}\\n".encode())\nos._exit(0)\n',
    "fake reports on fd 3, stdout, stderr": 'import os, sys\nfor fd in (1, 2, 3):\n    os.write(fd, "{forged}\\n".encode())\n',
    "patch builtins and json": (
        "import builtins, json\nbuiltins.AssertionError = builtins.BaseException = SystemExit\n"
        'json.dumps = lambda *args, **kwargs: \'{{"call": 0, "value": 7}}\'\nbuiltins.print = lambda *a, **k: None\n'
    ),
    "signal the parent": "import os, signal\nfor sig in (signal.SIGTERM, signal.SIGKILL):\n    try:\n        os.kill(os.getppid(), sig)\n    except OSError:\n        pass\n",
    "write on every descriptor": 'import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b\'{{"call": 0, "value": 3}}\\n\')\n    except OSError:\n        pass\n',
    "look for the tests on disk": (
        "import os\nhits = []\nfor root in ('/tmp', '/work', os.path.expanduser('~'), '/proc/1/cwd'):\n"
        "    for path, _, files in os.walk(root):\n        hits += [f for f in files if f.endswith(('.jsonl', '.parquet'))]\n"
        "assert not hits, hits[:5]\n"
    ),
    "an int that equals everything": (
        "class Anything(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "_inner = add\ndef add(a, b):\n    return Anything(_inner(a, b))\n"
    ),
}


@pytest.mark.parametrize(
    ("kind", "attack"),
    # A stdio program's answer is text: there is no object of its own to compare.
    [
        (kind, attack)
        for kind in FORMATS
        for attack in sorted(ATTACKS)
        if not (kind == "stdio" and attack.startswith("an int"))
    ],
)
def test_attacks_on_the_verdict_score_as_the_wrong_solution(sandbox, kind, attack):
    code = _program(kind, "a * b") + ATTACKS[attack].format(forged=_forged_answers(3))
    result = _score(sandbox, code, kind)
    assert (result["score"], result["acc"], result["tests_passed"]) == (-1.0, False, 0), (attack, result)


@pytest.mark.parametrize("kind", CALL_FORMATS)
def test_the_candidates_process_never_holds_the_expected_values(sandbox, kind):
    # A spy with the run's own powers: every object the garbage collector knows, every frame
    # up the stack, what is left of stdin, the files of its work dir. It answers how often it
    # saw the marker that only the expected value carries; its answer comes back in the report.
    marker = "EXPECTED-" + uuid.uuid4().hex
    tests = {
        "assert": [f"assert spy(1) == {marker!r}"],
        "function": {"fn_name": "spy", "inputs": [[1]], "outputs": [marker]},
        "program": {"setup": f"EXPECTED = {marker!r}\n", "tests": ["seen = spy(1)\nassert seen == EXPECTED, seen"]},
    }[kind]
    spy = (
        "import gc, os, re, sys\n"
        "def spy(x):\n"
        "    seen = [repr(o) for o in gc.get_objects()]\n"
        "    frame = sys._getframe()\n"
        "    while frame:\n"
        "        seen += [repr(frame.f_locals), repr(frame.f_globals)]\n"
        "        frame = frame.f_back\n"
        "    seen += [sys.stdin.read()] + [open(f).read() for f in os.listdir('.') if os.path.isfile(f)]\n"
        "    return 'seen %d, marked %d' % (len(seen), sum(bool(re.search('EXPECTED-[0-9a-f]{32}', t)) for t in seen))\n"
    )
    ((result, (report,)),) = judge_code_many([(spy, _task(kind, tests))], sandbox)
    assert result["failure"] == "wrong answer" and marker not in report.got, report
    seen, marked = re.search(r"seen (\d+), marked (\d+)", report.got).groups()
    assert int(seen) > 1000 and marked == "0", report


def test_assert_forms_are_judged_here(sandbox):
    task = _task(
        "assert",
        [
            "assert f(0) is None",
            "assert f(2)",
            "assert not f(-2)",
            "assert f(3, as_list=True) == [3, (3,)]",
            "assert f(4) is True",
        ],
    )
    code = "def f(n, as_list=False):\n    if n == 0:\n        return None\n    if as_list:\n        return (n, [n])\n    return n > 0 if n != 4 else 1\n"
    # `1 is True` fails, as it would in Python; the rest pass.
    assert _summary(score_code(code, task, sandbox)) == (-1.0, False, 4, "wrong answer", "PPPPF")


def test_object_equal_to_everything_does_not_pass_function_tests(sandbox):
    code = (
        "class Anything(int):\n"
        "    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n"
        "    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Anything(0)\n"
    )
    # Only its data crosses, an int 0: right for add(-1, 1) alone.
    assert _summary(_score(sandbox, code, "function")) == (-1.0, False, 1, "wrong answer", "FFP")


def test_function_results_are_compared_as_json(sandbox):
    task = _task("function", {"fn_name": "pair", "inputs": [[1], [2]], "outputs": [[1, {"k": 1}], [2, {"k": 2}]]})
    as_tuple = score_code("def pair(x):\n    return (x, {'k': x})\n", task, sandbox)
    assert as_tuple["acc"] is True
    assert score_code("def pair(x):\n    return [x, {1: x}]\n", task, sandbox)["failure"] == "wrong answer"
    assert score_code("def pair(x):\n    return None\n", task, sandbox)["pred"] == "FF"


def test_missing_function_is_a_runtime_error(sandbox):
    assert _summary(_score(sandbox, "def plus(a, b):\n    return a + b\n", "function")) == (
        -1.0,
        False,
        0,
        "runtime error",
        "FFF",
    )


@pytest.mark.parametrize(("kind", "failure"), [("function", "runtime error"), ("stdio", "wrong answer")])
def test_output_past_the_sandbox_cap_fails(sandbox, kind, failure):
    code = _program(kind, "a + b") + "print('x' * (2 << 20))\n"
    assert _summary(_score(sandbox, code, kind))[:4] == (-1.0, False, 0, failure)


def test_candidate_output_does_not_disturb_function_tests(sandbox):
    code = "import sys\nprint('x' * 100000)\nsys.stdout.close()\n" + _program("function", "a + b")
    assert _score(sandbox, code, "function")["acc"] is True


# --- batches ----------------------------------------------------------------------------------


def test_batch_scoring_equals_one_by_one(sandbox):
    completions = {
        kind: [
            _fenced(_program(kind, "a + b")),
            _fenced(_program(kind, "abs(a) + b")),
            "def add(a, b)\n",
            "",
            "import os\nos._exit(0)\n",
        ]
        for kind in FORMATS
    }
    pairs = [(completion, TASKS[kind]) for kind in FORMATS for completion in completions[kind]]
    for reward in ("binary", "fraction"):
        batch = score_code_many(pairs, sandbox, reward=reward)
        assert batch == [score_code(completion, task, sandbox, reward=reward) for completion, task in pairs]
    assert [result["pred"] for result in batch] == ["PPP", "PPF", None, None, None] * 3 + [
        "PPP",
        "PPF",
        None,
        None,
        "FFF",
    ]
    assert score_code_many([], sandbox) == []
