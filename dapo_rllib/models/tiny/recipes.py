"""The warm-start recipes of the tiny models (`RECIPES`): per task, its training problems, the ways of
answering it imitates (`answers`), its held-out problems and how a response is scored right.

Six tasks: "arithmetic" (the math environment's built-in problems), "code" (the code environment's
generated function-writing tasks), "sums" (the ablation's scratchpad sums,
dapo_rllib/tasks/data/scratchpad_sums.py), and three of several turns, warm-started on whole episodes (trained on
the model's turns only, rendered as the env runner renders them: `warm_start.conversation_ids`):
"tool_arithmetic" (products with the python tool), "code_repair" (the code tasks with the code-repair
environment's feedback) and "take_away" (one seat of the built-in two-player game against random moves).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from dapo_rllib.models.tiny.answers import (
    ANSWER_STYLES,
    CODE_ANSWER_STYLES,
    REPAIR_ANSWER_STYLES,
    SUMS_ANSWER_STYLES,
    TAKE_AWAY_ANSWER_STYLES,
    TOOL_ANSWER_STYLES,
    code_answer,
    repair_answer,
    sums_answer,
    take_away_answer,
    take_away_best_first_move,
    take_away_openings,
    tool_answer,
    worked_solution,
)
from dapo_rllib.models.tiny.tokenizer import CHAT_TEMPLATE, TOOL_CHAT_TEMPLATE
from dapo_rllib.tasks.data.arithmetic import generate_arithmetic_problems
from dapo_rllib.tasks.data.code_arithmetic import generate_code_tasks, reference_solution
from dapo_rllib.tasks.data.scratchpad_sums import generate_sum_problems
from dapo_rllib.tasks.data.tool_arithmetic import generate_tool_arithmetic_problems
from dapo_rllib.tasks.game_env import TEST_SEED_OFFSET
from dapo_rllib.tasks.rewards.code import extract_code, normalize_output
from dapo_rllib.tasks.rewards.math_dapo import compute_score as math_dapo_score
from dapo_rllib.tasks.tools import PYTHON_TOOL_SCHEMA, HermesToolParser

SUMS_TRAIN_PROBLEMS = 2400
SUMS_TEST_PROBLEMS = 120  # the ablation's held-out set (tuned_examples/dapo/tiny_ablation.py)
TAKE_AWAY_TRAIN_GAMES, TAKE_AWAY_TEST_GAMES = 1000, 32  # each at both seats


def _first_turn_right(problem, response: str) -> bool:
    """The first turn calls python with an expression whose value is the answer, or gives the answer."""
    calls = HermesToolParser().parse(response)
    if not calls:
        return _math_correct(problem, response)
    code = (calls[0].arguments or {}).get("code")
    return isinstance(code, str) and _product_value(code) == int(problem.ground_truth)


def _product_value(code: str) -> int | None:
    """The value of `code` when it is one product or sum of two integers ("347 * 58"), else None."""
    match = re.fullmatch(r"\s*(\d+)\s*([*+])\s*(\d+)\s*", code)
    if match is None:
        return None
    a, op, b = int(match[1]), match[2], int(match[3])
    return a * b if op == "*" else a + b


def _code_train_tasks(seed: int) -> list:
    return generate_code_tasks("train", seed=seed)


def _math_correct(problem, response: str) -> bool:
    return bool(math_dapo_score(response, problem.ground_truth)["acc"])


def _code_matches_reference(task, response: str) -> bool:
    """The response's code is the reference solution (up to trailing whitespace): a lower bound
    on passing the tests, without running model-written code during a build."""
    return normalize_output(extract_code(response) or "") == normalize_output(extract_code(reference_solution(task)))


@dataclass(frozen=True)
class WarmStartRecipe:
    """What a tiny model learns before RL: a task's training problems and ways of answering.

    Attributes:
        version: Name of its cache directory (bump it when the recipe changes).
        train_problems: seed -> training problems (with chat `messages`).
        answer: (problem, style) -> the response text imitated; for an episode of several turns, the
            list of its model turns with the environment's message (a dict) between them.
        styles: (weight, style) pairs: how often each way of answering is imitated.
        sft_steps, batch_size: Length of the warm start: how far from right the RL starts.
        test_problems: () -> the held-out problems the build record's accuracy is measured on.
        correct: (problem, response) -> whether the response is right (`scored_by` says how).
        max_new_tokens: Response limit of that measurement (the task's tuned example's).
        chat_template: The tokenizer's chat template.
        tools: The schemas of the tools its prompts show (rendered as the env runner renders them).
    """

    version: str
    train_problems: Callable[[int], list]
    answer: Callable[[Any, str], str]
    styles: tuple[tuple[float, str], ...]
    test_problems: Callable[[], list]
    correct: Callable[[Any, str], bool]
    scored_by: str
    max_new_tokens: int
    sft_steps: int = 800
    batch_size: int = 64
    chat_template: str = CHAT_TEMPLATE
    tools: tuple = ()  # tool schemas shown in the prompt (`dapo_rllib.tasks.tools.Tool.schema`)


# v2: built with pinned kernels and a fixed thread count (a v1 build depended on the CPU it ran on).
RECIPES: dict[str, WarmStartRecipe] = {
    "arithmetic": WarmStartRecipe(
        "tiny-qwen2-arith-v2",
        lambda seed: generate_arithmetic_problems("train", seed=seed),
        lambda problem, style: worked_solution(problem.prompt_text, style),
        ANSWER_STYLES,
        lambda: generate_arithmetic_problems("test"),
        _math_correct,
        "math_dapo",
        max_new_tokens=32,
    ),
    "code": WarmStartRecipe(
        "tiny-qwen2-code-v2",
        _code_train_tasks,
        code_answer,
        CODE_ANSWER_STYLES,
        lambda: generate_code_tasks("test"),
        _code_matches_reference,
        "the reference solution's code, exactly (a lower bound on passing the tests)",
        max_new_tokens=64,
    ),
    "sums": WarmStartRecipe(
        "tiny-qwen2-sums-v2",
        lambda seed: generate_sum_problems("train", SUMS_TRAIN_PROBLEMS, seed=seed),
        lambda problem, style: sums_answer(problem.prompt_text, style),
        SUMS_ANSWER_STYLES,
        lambda: generate_sum_problems("test", SUMS_TEST_PROBLEMS),
        _math_correct,
        "math_dapo",
        max_new_tokens=64,
        # Light: the RL starts right on a quarter to a third of held-out sums (avg@4 0.34 for the
        # v1 build, 0.26 for v2's reference build). The accuracy jumps with the length of the warm
        # start (v1): 600 steps start at 0.12, where naive GRPO finds too few right answers to
        # learn from; 1,000 start at 0.78.
        sft_steps=800,
        batch_size=32,
    ),
    "code_repair": WarmStartRecipe(
        "tiny-qwen2-code-repair-v1",
        _code_train_tasks,
        repair_answer,
        REPAIR_ANSWER_STYLES,
        lambda: generate_code_tasks("test"),
        _code_matches_reference,
        "the first attempt: the reference solution's code, exactly",
        max_new_tokens=64,
    ),
    "tool_arithmetic": WarmStartRecipe(
        "tiny-qwen2-tool-arith-v1",
        lambda seed: generate_tool_arithmetic_problems("train", seed=seed),
        tool_answer,
        TOOL_ANSWER_STYLES,
        lambda: generate_tool_arithmetic_problems("test"),
        _first_turn_right,
        "the first turn: a python call computing the answer, or the answer (math_dapo)",
        max_new_tokens=48,
        # Copying the operands from the prompt into the call is what takes long: after 500 steps of 32 the
        # calls were well-formed and their numbers random (held-out 0.0); after 1,500, 0.40. Batches of
        # 32: its conversations are four times as long as the arithmetic ones.
        sft_steps=1500,
        batch_size=32,
        chat_template=TOOL_CHAT_TEMPLATE,
        tools=(PYTHON_TOOL_SCHEMA,),
    ),
    "take_away": WarmStartRecipe(
        "tiny-qwen2-take-away-v1",
        lambda seed: take_away_openings(range(TAKE_AWAY_TRAIN_GAMES)),
        take_away_answer,
        TAKE_AWAY_ANSWER_STYLES,
        lambda: take_away_openings(range(TEST_SEED_OFFSET, TEST_SEED_OFFSET + TAKE_AWAY_TEST_GAMES)),
        take_away_best_first_move,
        "the first move is best play (leaves a multiple of 4, or takes 1 from one)",
        max_new_tokens=8,
    ),
}


# The test suite's recipes for the tasks only a few of its tests (or CI's smoke runs) use, whose full warm
# starts are the longest builds: shorter warm starts, measured on 32 held-out problems, of their own versions
# (a test build never takes the place of a tuned example's model). The tests hold for any model they build:
# the code model needs only to load and generate, the tool model to call the tool (learnt long before the
# operands are), the sums model (the ablation's and the comparison's smoke runs) to answer in its format.
TEST_RECIPES: dict[str, WarmStartRecipe] = {
    task: replace(RECIPES[task], version=version, sft_steps=steps, batch_size=16, test_problems=held_out)
    for task, version, steps, held_out in (
        ("code", "tiny-qwen2-code-test-v1", 150, lambda: generate_code_tasks("test", 32)),
        (
            "tool_arithmetic",
            "tiny-qwen2-tool-arith-test-v1",
            250,
            lambda: generate_tool_arithmetic_problems("test", 32),
        ),
        ("sums", "tiny-qwen2-sums-test-v1", 200, lambda: generate_sum_problems("test", 32)),
    )
}
#: The environment variable that picks the recipes of builds: "full" (unset: `RECIPES`, those of the tuned
#: examples and the README's figures) or "test" (`TEST_RECIPES` where a task has one; tests/conftest.py sets it).
RECIPE_SET_ENV = "DAPO_RLLIB_TINY_RECIPES"
RECIPE_SETS = {"full": RECIPES, "test": RECIPES | TEST_RECIPES}


def recipe_for(task: str) -> WarmStartRecipe:
    """The recipe of `task` in the set $DAPO_RLLIB_TINY_RECIPES picks (`RECIPE_SET_ENV`)."""
    name = os.environ.get(RECIPE_SET_ENV, "full")
    if name not in RECIPE_SETS:
        raise ValueError(
            f"${RECIPE_SET_ENV}={name!r} is not a set of tiny-model recipes; expected one of {sorted(RECIPE_SETS)}"
        )
    if task not in RECIPES:
        raise ValueError(f"no tiny model for task {task!r}; expected one of {sorted(RECIPES)}")
    return RECIPE_SETS[name][task]
