"""Math datasets: DAPO-format files and the built-in arithmetic generator."""

from dapo_rllib.data.arithmetic import (
    ARITHMETIC_DATA_SOURCE,
    ARITHMETIC_PROMPT_TEMPLATE,
    DAPO_PROMPT_TEMPLATE,
    ArithmeticQuestion,
    generate_arithmetic_problems,
    parse_arithmetic_question,
)
from dapo_rllib.data.datasets import (
    DEFAULT_DATA_SOURCE,
    MathProblem,
    load_math_dataset,
    problem_to_row,
    write_jsonl,
)

__all__ = [
    "ARITHMETIC_DATA_SOURCE",
    "ARITHMETIC_PROMPT_TEMPLATE",
    "DAPO_PROMPT_TEMPLATE",
    "DEFAULT_DATA_SOURCE",
    "ArithmeticQuestion",
    "MathProblem",
    "generate_arithmetic_problems",
    "load_math_dataset",
    "parse_arithmetic_question",
    "problem_to_row",
    "write_jsonl",
]
