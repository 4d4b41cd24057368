"""The tests of a code task (:mod:`dapo_rllib.tasks.data.code_tasks`): the four kinds of test spec,
their checking and row (JSON) form, and the literal calls an ``assert`` statement checks, which the
trusted side judges outside the candidate's process."""

from __future__ import annotations

import ast
import builtins
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

from dapo_rllib.tasks.data.datasets import short_repr

TASK_KINDS = ("assert", "stdio", "function", "program")


class StdioCase(NamedTuple):
    """One run of a stdin/stdout program: what it reads and what it must print."""

    input: str
    output: str


@dataclass(frozen=True)
class FunctionTests:
    """Calls ``fn_name(*inputs[i])`` that must return ``outputs[i]`` (JSON values)."""

    fn_name: str
    inputs: tuple[list, ...]
    outputs: tuple[Any, ...]


#: How a call's returned value is judged against ``Call.expected``: equal (as Python compares the
#: JSON values), identical (``is None/True/False``), truthy, falsy.
COMPARISONS = ("==", "is", "truthy", "falsy")


class Call(NamedTuple):
    """One call a candidate's function must answer: ``fn_name(*args, **kwargs)``, judged against
    ``expected`` by ``compare`` (one of :data:`COMPARISONS`). All values are JSON data."""

    fn_name: str
    args: list
    kwargs: dict
    expected: Any
    compare: str = "=="


@dataclass(frozen=True)
class TestProgram:
    """A dataset's own test code, run in a sandbox of its own against the candidate
    (:mod:`dapo_rllib.tasks.rewards.program_judge`).

    Attributes:
        setup: Code run first: imports, helpers, HumanEval's ``def check(candidate)``, MBPP's
            ``test_setup_code``, unittest classes.
        tests: Statements, each one test, run in turn after the setup in its namespace; a test
            passes when it runs to its end.
        names: The candidate's functions and classes the tests call. In the test program each
            stands for the candidate's (bound after the setup, so over any stub of the same name).
    """

    __test__ = False  # not a pytest class, whatever its name

    setup: str
    tests: tuple[str, ...]
    names: tuple[str, ...]


#: The tests of a task, by kind: test statements, stdio cases, function calls, or a test program.
TestSpec: TypeAlias = tuple[str, ...] | tuple[StdioCase, ...] | FunctionTests | TestProgram


def checked_tests(kind: str, tests: Any) -> TestSpec:
    """``tests`` (row values, or an already built spec) checked and converted to the :data:`TestSpec` of ``kind``.

    Raises:
        ValueError: Unknown kind, no tests, or tests of the wrong shape.
    """
    if kind not in TASK_KINDS:
        raise ValueError(f"unknown code task kind {kind!r}; expected one of {TASK_KINDS}")
    checker: Callable[[Any], TestSpec] = {
        "assert": _assert_tests,
        "stdio": _stdio_cases,
        "function": _function_tests,
        "program": _test_program,
    }[kind]
    return checker(tests)


def _non_empty_list(value: Any, what: str) -> list:
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"expected a non-empty list of {what}, got {type(value).__name__} {short_repr(value)}")
    return list(value)


def _assert_tests(tests: Any) -> tuple[str, ...]:
    tests = _non_empty_list(tests, "test statements (strings)")
    for i, test in enumerate(tests):
        if not isinstance(test, str) or not test.strip():
            raise ValueError(f"test {i} must be a non-empty string of Python statements, got {short_repr(test)}")
        _check_python(test, f"test {i}")
    if not free_names("\n".join(tests)):
        raise ValueError(f"the tests call no function of the candidate: {short_repr(list(tests))}")
    return tuple(tests)


def _test_program(spec: Any) -> TestProgram:
    """A test program from a row's ``program``: ``{"setup", "tests", "names"}`` (each optional but
    one of setup and tests), or a string (the setup)."""
    if isinstance(spec, TestProgram):
        spec = tests_to_json(spec)
    if isinstance(spec, str):
        spec = {"setup": spec}
    if not isinstance(spec, Mapping) or not set(spec) <= {"setup", "tests", "names"}:
        raise ValueError(f"expected a string or an object with 'setup', 'tests', 'names', got {short_repr(spec)}")
    setup, tests, names = spec.get("setup") or "", spec.get("tests"), spec.get("names")
    if not isinstance(setup, str):
        raise ValueError(f"'setup' must be Python code (a string), got {short_repr(setup)}")
    _check_python(setup, "the setup")
    if tests is None:  # the test code as it ships: its unittest cases, or the whole of it as one test
        tests = unittest_tests(setup)
        if not tests:
            tests, setup = [setup], ""
    tests = _non_empty_list(tests, "test statements (strings)")
    for i, test in enumerate(tests):
        if not isinstance(test, str) or not test.strip():
            raise ValueError(f"test {i} must be a non-empty string of Python statements, got {short_repr(test)}")
        _check_python(test, f"test {i}")
    found = free_names("\n".join([setup, *tests]))
    if names is None:
        names = found
    names = _non_empty_list(names, "names of the candidate's functions or classes that the tests call")
    for name in names:
        if not (isinstance(name, str) and name.isidentifier()):
            raise ValueError(f"names must be Python identifiers, got {short_repr(name)}")
    return program_with_imports(setup, tests, names)


def program_with_imports(setup: str, tests: Sequence[str], names: Sequence[str]) -> TestProgram:
    """A test program whose standard modules used without an import (MBPP's ``math.isclose``, which
    the official harness finds among the candidate's imports) are imported in its setup."""
    modules = [name for name in names if name in sys.stdlib_module_names]
    imports = "".join(f"import {module}\n" for module in modules)
    return TestProgram(imports + setup, tuple(tests), tuple(name for name in names if name not in modules))


def _check_python(code: str, what: str) -> None:
    try:
        compile(code, f"<{what}>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        raise ValueError(f"{what} is not valid Python ({getattr(error, 'msg', error)}): {short_repr(code)}") from None


def free_names(code: str) -> tuple[str, ...]:
    """The names ``code`` uses but never binds (assigns, defines, imports, takes as a parameter) and
    that are not builtins: in a test program, the candidate's (and modules it forgot to import)."""
    bound, used = set(), []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                used.append(node)
            else:
                bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    used.sort(key=lambda node: (node.lineno, node.col_offset))  # in the order the code reads
    return tuple(dict.fromkeys(n.id for n in used if n.id not in bound and not hasattr(builtins, n.id)))


def unittest_tests(setup: str) -> list[str]:
    """One test per ``test*`` method of each ``unittest.TestCase`` class defined in ``setup``
    (``TestX('test_a').debug()``: the method's failure raises), in order; [] when there is none."""
    tests = []
    for node in ast.parse(setup).body:
        if isinstance(node, ast.ClassDef) and any(_names_test_case(base) for base in node.bases):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    tests.append(f"{node.name}({item.name!r}).debug()")
    return tests


def _names_test_case(base: ast.expr) -> bool:
    return (isinstance(base, ast.Attribute) and base.attr == "TestCase") or (
        isinstance(base, ast.Name) and base.id == "TestCase"
    )


_SUPPORTED_ASSERTS = (
    "supported: `assert f(<literals>) == <literal>` (either side), `assert f(...) is None/True/False`, "
    "`assert f(...)`, `assert not f(...)`, where f is a function of the solution and every literal is "
    "JSON data (numbers, strings, booleans, None, lists, tuples, dicts with string keys)"
)


def assert_calls(test: str) -> tuple[Call, ...]:
    """The calls that ``test`` (one or more ``assert`` statements) checks, so that the trusted
    side can judge the values the candidate returns, instead of running the assert in the
    candidate's process, where the candidate could make it pass.

    Raises:
        SyntaxError: ``test`` is not Python.
        ValueError: A statement of another form (the message lists the supported ones).
    """
    statements = ast.parse(test).body
    if not statements:
        raise ValueError(f"no assert statement in {short_repr(test)}; {_SUPPORTED_ASSERTS}")
    return tuple(_assert_call(statement, test) for statement in statements)


def _assert_call(statement: ast.stmt, test: str) -> Call:
    refused = ValueError(f"cannot be checked outside the candidate's process: {short_repr(test)}; {_SUPPORTED_ASSERTS}")
    if not isinstance(statement, ast.Assert):
        raise refused
    check = statement.test
    if isinstance(check, ast.Compare) and len(check.ops) == 1:
        left, op, right = check.left, check.ops[0], check.comparators[0]
        if isinstance(op, ast.Eq):
            call, literal = (left, right) if isinstance(left, ast.Call) else (right, left)
            return _call(call, _literal(literal, refused), "==", refused)
        if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and right.value in (None, True, False):
            return _call(left, right.value, "is", refused)
        raise refused
    if isinstance(check, ast.UnaryOp) and isinstance(check.op, ast.Not):
        return _call(check.operand, None, "falsy", refused)
    return _call(check, None, "truthy", refused)


def _call(node: ast.expr, expected: Any, compare: str, refused: ValueError) -> Call:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise refused
    if any(isinstance(arg, ast.Starred) for arg in node.args) or any(keyword.arg is None for keyword in node.keywords):
        raise refused
    args = [_literal(arg, refused) for arg in node.args]
    kwargs = {keyword.arg: _literal(keyword.value, refused) for keyword in node.keywords}
    return Call(node.func.id, args, kwargs, expected, compare)


def _literal(node: ast.expr, refused: ValueError) -> Any:
    """The JSON value of a literal node (tuples become lists)."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise refused from None
    return _as_json(value, refused)


def _as_json(value: Any, refused: ValueError) -> Any:
    if value is None or type(value) in (bool, int, str) or type(value) is float and math.isfinite(value):
        return value
    if type(value) in (list, tuple):
        return [_as_json(item, refused) for item in value]
    if type(value) is dict and all(type(key) is str for key in value):
        return {key: _as_json(item, refused) for key, item in value.items()}
    raise refused


def _stdio_cases(tests: Any) -> tuple[StdioCase, ...]:
    cases = []
    for i, case in enumerate(_non_empty_list(tests, "{'input', 'output'} cases")):
        if isinstance(case, StdioCase):
            case = case._asdict()
        if not (
            isinstance(case, Mapping) and isinstance(case.get("input"), str) and isinstance(case.get("output"), str)
        ):
            raise ValueError(f"case {i} must be an object with string 'input' and 'output', got {short_repr(case)}")
        cases.append(StdioCase(case["input"], case["output"]))
    return tuple(cases)


def _function_tests(tests: Any) -> FunctionTests:
    if isinstance(tests, FunctionTests):
        tests = tests_to_json(tests)
    if not isinstance(tests, Mapping):
        raise ValueError(f"expected an object {{fn_name, inputs, outputs}}, got {short_repr(tests)}")
    fn_name = tests.get("fn_name")
    if not (isinstance(fn_name, str) and fn_name.isidentifier()):
        raise ValueError(f"fn_name must be a Python identifier, got {short_repr(fn_name)}")
    inputs = _non_empty_list(tests.get("inputs"), "argument lists")
    outputs = _non_empty_list(tests.get("outputs"), "expected return values")
    if len(inputs) != len(outputs):
        raise ValueError(f"{len(inputs)} inputs but {len(outputs)} outputs; expected one output per input")
    for i, arguments in enumerate(inputs):
        if not isinstance(arguments, (list, tuple)):
            raise ValueError(f"inputs[{i}] must be the list of arguments of a call, got {short_repr(arguments)}")
    try:
        # Round-tripped so the spec holds exactly the JSON values the scorer compares the answers with.
        inputs, outputs = json.loads(json.dumps([inputs, outputs], allow_nan=False))
    except (TypeError, ValueError) as error:
        raise ValueError(f"inputs and outputs must be JSON values ({error})") from None
    return FunctionTests(fn_name, tuple(inputs), tuple(outputs))


def tests_to_json(spec: TestSpec) -> Any:
    """The row form of a checked spec: a list of assert strings, of {"input", "output"} objects, or a {"fn_name", "inputs", "outputs"} object."""
    if isinstance(spec, FunctionTests):
        return {"fn_name": spec.fn_name, "inputs": list(spec.inputs), "outputs": list(spec.outputs)}
    if isinstance(spec, TestProgram):
        return {"setup": spec.setup, "tests": list(spec.tests), "names": list(spec.names)}
    return [case._asdict() if isinstance(case, StdioCase) else case for case in spec]


__all__ = [
    "COMPARISONS",
    "Call",
    "FunctionTests",
    "StdioCase",
    "TASK_KINDS",
    "TestProgram",
    "TestSpec",
    "assert_calls",
    "checked_tests",
    "free_names",
    "program_with_imports",
    "tests_to_json",
    "unittest_tests",
]
