"""Built-in generator for the tiny task: two-operand integer addition/subtraction.

Every problem "What is a + b?" / "What is a - b?" with a in [0, 99], b in [0, 9] exists
exactly once (20,000 in all). A stable hash of "{a}{op}{b}" puts about a tenth
of them in the held-out "test" split, so the splits are disjoint and identical
in every process and Python version.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import NamedTuple

from dapo_rllib.tasks.data.datasets import MathProblem

# Re-exported: DAPO_PROMPT_TEMPLATE used to live here and is still imported from here.
from dapo_rllib.tasks.data.prompts import DAPO_PROMPT_TEMPLATE

#: The tiny task's instruction. Shorter than DAPO's template (which file datasets carry in their
#: own rows) so that a 1M-parameter model spends its few warm-start steps on the arithmetic, but
#: asking for the same "Answer:" line the DAPO scorer reads.
ARITHMETIC_PROMPT_TEMPLATE = '{problem} Put your final answer on its own line after "Answer:".'

#: ``data_source`` of the generated problems (selects the scorer).
ARITHMETIC_DATA_SOURCE = "arithmetic"
#: The first operand ranges over [0, OPERAND_MAX], the second over [0, SECOND_OPERAND_MAX]:
#: small enough for the ~1M-parameter tiny model to learn in a two-minute warm start.
OPERAND_MAX = 99
SECOND_OPERAND_MAX = 9
OPERATORS = ("+", "-")
SPLITS = ("train", "test")
#: A problem is in "test" iff its hash is divisible by this (so ~1/10 of them).
TEST_SPLIT_MODULUS = 10

_QUESTION_RE = re.compile(r"What is (\d+) ([+-]) (\d+)\?")


class ArithmeticQuestion(NamedTuple):
    """An arithmetic question ``a op b``; unpacks as ``(a, op, b)``."""

    a: int
    op: str
    b: int

    @property
    def expression(self) -> str:
        """The expression as written in the question, e.g. ``"47 + 38"``."""
        return f"{self.a} {self.op} {self.b}"

    @property
    def question(self) -> str:
        """The problem text, e.g. ``"What is 47 + 38?"``."""
        return f"What is {self.expression}?"

    @property
    def result(self) -> int:
        """The exact integer answer."""
        return self.a + self.b if self.op == "+" else self.a - self.b

    @property
    def split(self) -> str:
        """``"test"`` or ``"train"``, from a hash that is stable across processes."""
        # hashlib rather than hash(): Python salts str hashes per process.
        digest = hashlib.sha256(f"{self.a}{self.op}{self.b}".encode()).digest()
        return "test" if int.from_bytes(digest, "big") % TEST_SPLIT_MODULUS == 0 else "train"


def parse_arithmetic_question(text: str) -> ArithmeticQuestion:
    """Extract ``(a, op, b)`` from a generated problem or its full prompt.

    Raises:
        ValueError: ``text`` does not contain exactly one question of the
            generator's form with operands in range.
    """
    matches = _QUESTION_RE.findall(text)
    if len(matches) != 1:
        raise ValueError(
            f"not an arithmetic problem: expected exactly one 'What is <a> <+|-> <b>?', "
            f"found {len(matches)} in {text[:200]!r}"
        )
    a, op, b = matches[0]
    question = ArithmeticQuestion(int(a), op, int(b))
    if not (0 <= question.a <= OPERAND_MAX and 0 <= question.b <= SECOND_OPERAND_MAX):
        raise ValueError(
            f"operands of {question.expression!r} are outside [0, {OPERAND_MAX}] and [0, {SECOND_OPERAND_MAX}]"
        )
    return question


def generate_arithmetic_problems(split: str, num_problems: int | None = None, *, seed: int = 0) -> list[MathProblem]:
    """Return the problems of ``split`` in a deterministic, ``seed``-dependent order.

    Args:
        split: ``"train"`` (1807 problems) or ``"test"`` (193 problems).
        num_problems: Take the first ``num_problems`` of the shuffled split;
            ``None`` takes all of them.
        seed: Seed of the shuffle.

    Raises:
        ValueError: Unknown split, or ``num_problems`` negative or larger
            than the split.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown arithmetic split {split!r}; expected one of {SPLITS}")
    questions = [
        question
        for a in range(OPERAND_MAX + 1)
        for op in OPERATORS
        for b in range(SECOND_OPERAND_MAX + 1)
        if (question := ArithmeticQuestion(a, op, b)).split == split
    ]
    # random.Random's int seeding and shuffle are stable across Python
    # versions, so a seed names the same order everywhere.
    random.Random(seed).shuffle(questions)
    if num_problems is not None:
        if not 0 <= num_problems <= len(questions):
            raise ValueError(
                f"num_problems={num_problems} is out of range: the arithmetic "
                f"{split!r} split has {len(questions)} problems"
            )
        questions = questions[:num_problems]
    return [
        MathProblem(
            messages=({"role": "user", "content": ARITHMETIC_PROMPT_TEMPLATE.format(problem=q.question)},),
            ground_truth=str(q.result),
            data_source=ARITHMETIC_DATA_SOURCE,
            index=i,
        )
        for i, q in enumerate(questions)
    ]


__all__ = [
    "ARITHMETIC_DATA_SOURCE",
    "ArithmeticQuestion",
    "ARITHMETIC_PROMPT_TEMPLATE",
    "DAPO_PROMPT_TEMPLATE",
    "generate_arithmetic_problems",
    "parse_arithmetic_question",
]
