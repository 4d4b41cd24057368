"""Built-in generator for tool-integrated arithmetic: products too hard to do in one's head.

"What is 347 * 58?" multiplies a three-digit number by a two-digit one: the tiny models cannot compute
that token by token, but they can ask the ``python`` tool (:mod:`dapo_rllib.tasks.tools`) and copy its answer.
The answer is scored by math_dapo (the "Answer:" line). A stable hash of the question splits train from
test.
"""

from __future__ import annotations

import hashlib
import random

from dapo_rllib.tasks.data.arithmetic import ARITHMETIC_PROMPT_TEMPLATE
from dapo_rllib.tasks.data.datasets import MathProblem

#: ``data_source`` of the generated problems (scored by math_dapo: the "Answer:" line).
TOOL_ARITHMETIC_DATA_SOURCE = "tool_arithmetic"
FIRST_RANGE = (100, 999)
SECOND_RANGE = (10, 99)
SPLITS = ("train", "test")
TEST_SPLIT_MODULUS = 20  # a question is in "test" iff its hash is divisible by this
DEFAULT_SIZES = {"train": 4000, "test": 200}


def product_question(a: int, b: int) -> str:
    return f"What is {a} * {b}?"


def _split_of(text: str) -> str:
    digest = hashlib.sha256(text.encode()).digest()
    return "test" if int.from_bytes(digest, "big") % TEST_SPLIT_MODULUS == 0 else "train"


def generate_tool_arithmetic_problems(
    split: str, num_problems: int | None = None, *, seed: int = 0
) -> list[MathProblem]:
    """``num_problems`` distinct products of ``split`` (``None``: ``DEFAULT_SIZES[split]``), in a ``seed``-dependent
    order; the same problems for a given (split, num_problems, seed) on every machine.

    Raises:
        ValueError: Unknown split, or ``num_problems`` not a positive int.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown tool_arithmetic split {split!r}; expected one of {SPLITS}")
    num_problems = DEFAULT_SIZES[split] if num_problems is None else num_problems
    if isinstance(num_problems, bool) or not isinstance(num_problems, int) or num_problems < 1:
        raise ValueError(f"num_problems={num_problems!r} must be a positive integer")
    rng = random.Random(f"tool_arithmetic/{split}/{seed}")
    seen: set[str] = set()
    problems: list[MathProblem] = []
    while len(problems) < num_problems:
        a, b = rng.randint(*FIRST_RANGE), rng.randint(*SECOND_RANGE)
        text = product_question(a, b)
        if text in seen or _split_of(text) != split:
            continue
        seen.add(text)
        prompt = ARITHMETIC_PROMPT_TEMPLATE.format(problem=text)
        problems.append(
            MathProblem(
                messages=({"role": "user", "content": prompt},),
                ground_truth=str(a * b),
                data_source=TOOL_ARITHMETIC_DATA_SOURCE,
                index=len(problems),
            )
        )
    return problems


def parse_product_question(text: str) -> tuple[int, int]:
    """(a, b) of a question "What is a * b?" (the prompt may go on after it)."""
    start = text.index("What is ") + len("What is ")
    a, b = text[start : text.index("?", start)].split(" * ")
    return int(a), int(b)
