"""Built-in generator for the tiny code task: one-line arithmetic functions ("Write a Python function
`add(a, b)` that returns the sum of its two arguments."), with a held-out split like arithmetic's."""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable
from typing import NamedTuple

from dapo_rllib.tasks.data.code_tasks import CODE_PROMPT_TEMPLATE, CodeTask
from dapo_rllib.tasks.data.code_tests import FunctionTests
from dapo_rllib.tasks.data.datasets import short_repr

#: ``data_source`` of the generated tasks.
GENERATED_CODE_DATA_SOURCE = "code_arithmetic"


class Operation(NamedTuple):
    """How a generated function combines its two arguments."""

    description: str  # completes "returns ..."
    expression: str  # Python, over the placeholders {a} and {b}
    apply: Callable[[int, int], int]


OPERATIONS: dict[str, Operation] = {
    "sum": Operation("the sum of its two arguments", "{a} + {b}", lambda a, b: a + b),
    "difference": Operation("its first argument minus its second", "{a} - {b}", lambda a, b: a - b),
    "product": Operation("the product of its two arguments", "{a} * {b}", lambda a, b: a * b),
    "maximum": Operation("the larger of its two arguments", "max({a}, {b})", lambda a, b: max(a, b)),
    "minimum": Operation("the smaller of its two arguments", "min({a}, {b})", lambda a, b: min(a, b)),
}
#: Names of the generated functions: one that says what it does, and neutral ones that make
#: the model read the description.
NAMED_FUNCTIONS = {
    "sum": "add",
    "difference": "subtract",
    "product": "multiply",
    "maximum": "larger",
    "minimum": "smaller",
}
NEUTRAL_FUNCTION_NAMES = ("f", "solve", "compute", "combine", "calc")
PARAMETER_PAIRS = (("a", "b"), ("x", "y"), ("m", "n"), ("p", "q"), ("u", "v"), ("i", "j"))
#: "... plus K" for K in 1..MAX_ADDEND; 0: no addend.
MAX_ADDEND = 9
CODE_SPLITS = ("train", "test")
#: A task is in "test" iff its hash is divisible by this (so ~1/10 of them).
TEST_SPLIT_MODULUS = 10
#: Tests per generated task: (3, 5), on which every operation differs, and random pairs.
FIXED_TEST_ARGUMENTS = (3, 5)
NUM_RANDOM_TESTS = 3
RANDOM_ARGUMENT_RANGE = (-20, 20)

_GENERATED_PROMPT_RE = re.compile(
    r"Write a Python function `(?P<name>\w+)\((?P<a>\w+), (?P<b>\w+)\)` that returns "
    r"(?P<description>.+?)(?: plus (?P<addend>\d+))?\."
)


class GeneratedFunction(NamedTuple):
    """A generated task: ``def name(a, b): return <operation> + addend``."""

    name: str
    parameters: tuple[str, str]
    operation: str
    addend: int

    @property
    def question(self) -> str:
        """E.g. "Write a Python function `add(a, b)` that returns the sum of its two arguments plus 3."."""
        a, b = self.parameters
        plus = f" plus {self.addend}" if self.addend else ""
        return f"Write a Python function `{self.name}({a}, {b})` that returns {OPERATIONS[self.operation].description}{plus}."

    @property
    def solution(self) -> str:
        """The reference answer: the function in one ```python block."""
        a, b = self.parameters
        expression = OPERATIONS[self.operation].expression.format(a=a, b=b)
        plus = f" + {self.addend}" if self.addend else ""
        return f"```python\ndef {self.name}({a}, {b}):\n    return {expression}{plus}\n```"

    @property
    def key(self) -> str:
        """A stable name of the task, e.g. ``"add(a, b) = sum + 3"``: it seeds the split and the tests."""
        return f"{self.name}({', '.join(self.parameters)}) = {self.operation} + {self.addend}"

    @property
    def split(self) -> str:
        """``"test"`` or ``"train"``, from a hash that is stable across processes."""
        digest = hashlib.sha256(self.key.encode()).digest()
        return "test" if int.from_bytes(digest, "big") % TEST_SPLIT_MODULUS == 0 else "train"

    def tests(self) -> FunctionTests:
        # Seeded by the task itself, so its tests do not depend on the generator's shuffle seed
        # (str seeds are hashed with SHA-512: stable across processes and Python versions).
        rng = random.Random(self.key)
        low, high = RANDOM_ARGUMENT_RANGE
        calls = [FIXED_TEST_ARGUMENTS] + [
            (rng.randint(low, high), rng.randint(low, high)) for _ in range(NUM_RANDOM_TESTS)
        ]
        apply = OPERATIONS[self.operation].apply
        return FunctionTests(
            self.name, tuple(list(call) for call in calls), tuple(apply(*call) + self.addend for call in calls)
        )


def _all_generated_functions() -> list[GeneratedFunction]:
    return [
        GeneratedFunction(name, parameters, operation, addend)
        for operation in OPERATIONS
        for name in (NAMED_FUNCTIONS[operation], *NEUTRAL_FUNCTION_NAMES)
        for parameters in PARAMETER_PAIRS
        for addend in range(MAX_ADDEND + 1)
    ]


def generate_code_tasks(split: str, num_problems: int | None = None, *, seed: int = 0) -> list[CodeTask]:
    """The generated function-writing tasks of ``split``, in a deterministic ``seed``-dependent order.

    Args:
        split: ``"train"`` or ``"test"`` (about a tenth of the 1800 tasks, disjoint from train).
        num_problems: Take the first ``num_problems`` of the shuffled split; ``None``: all.
        seed: Seed of the shuffle.

    Raises:
        ValueError: Unknown split, or ``num_problems`` negative or larger than the split.
    """
    if split not in CODE_SPLITS:
        raise ValueError(f"unknown code task split {split!r}; expected one of {CODE_SPLITS}")
    functions = [function for function in _all_generated_functions() if function.split == split]
    random.Random(seed).shuffle(functions)
    if num_problems is not None:
        if not 0 <= num_problems <= len(functions):
            raise ValueError(
                f"num_problems={num_problems} is out of range: the generated code {split!r} split has {len(functions)} tasks"
            )
        functions = functions[:num_problems]
    return [
        CodeTask(
            messages=({"role": "user", "content": CODE_PROMPT_TEMPLATE.format(question=function.question)},),
            tests=function.tests(),
            kind="function",
            data_source=GENERATED_CODE_DATA_SOURCE,
            index=i,
        )
        for i, function in enumerate(functions)
    ]


def parse_generated_task(task: CodeTask) -> GeneratedFunction:
    """The generated function a task of :func:`generate_code_tasks` asks for.

    Raises:
        ValueError: ``task`` is not a generated task.
    """
    match = _GENERATED_PROMPT_RE.search(task.messages[-1]["content"])
    operation = next(
        (name for name, op in OPERATIONS.items() if match and op.description == match["description"]), None
    )
    if operation is None:
        raise ValueError(f"not a generated code task: {short_repr(task.messages[-1]['content'])}")
    return GeneratedFunction(match["name"], (match["a"], match["b"]), operation, int(match["addend"] or 0))


def reference_solution(task: CodeTask) -> str:
    """A correct answer to a generated task, e.g. "```python\\ndef add(a, b):\\n    return a + b\\n```".

    Raises:
        ValueError: ``task`` is not a generated task.
    """
    return parse_generated_task(task).solution


__all__ = [
    "GENERATED_CODE_DATA_SOURCE",
    "OPERATIONS",
    "GeneratedFunction",
    "generate_code_tasks",
    "parse_generated_task",
    "reference_solution",
]
