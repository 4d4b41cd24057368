"""Math datasets: DAPO-format files, the converter into that format, and the built-in arithmetic generator."""

from dapo_rllib.tasks.data.arithmetic import (
    ARITHMETIC_DATA_SOURCE,
    ARITHMETIC_PROMPT_TEMPLATE,
    ArithmeticQuestion,
    generate_arithmetic_problems,
    parse_arithmetic_question,
)
from dapo_rllib.tasks.data.convert import (
    ConversionReport,
    add_convert_arguments,
    convert_to_dapo,
    run_convert,
)
from dapo_rllib.tasks.data.datasets import (
    DEFAULT_DATA_SOURCE,
    MathProblem,
    ground_truth_to_str,
    load_math_dataset,
    problem_to_row,
    write_jsonl,
)
from dapo_rllib.tasks.data.prompts import DAPO_PROMPT_TEMPLATE, has_chat_template, render_prompt_ids

__all__ = [
    "ARITHMETIC_DATA_SOURCE",
    "ARITHMETIC_PROMPT_TEMPLATE",
    "DAPO_PROMPT_TEMPLATE",
    "DEFAULT_DATA_SOURCE",
    "ArithmeticQuestion",
    "ConversionReport",
    "MathProblem",
    "add_convert_arguments",
    "convert_to_dapo",
    "generate_arithmetic_problems",
    "ground_truth_to_str",
    "has_chat_template",
    "load_math_dataset",
    "parse_arithmetic_question",
    "problem_to_row",
    "render_prompt_ids",
    "run_convert",
    "write_jsonl",
]
