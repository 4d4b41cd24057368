"""Counting on: "What is 57 + 2?", for a start in [0, 96] and a step of 1, 2 or 3.

A dapo-rllib environment is a :class:`dapo_rllib.ProblemEnv` subclass: a problem type, the built-in
problems (``generate``), a file loader (``load_file``) and a rating of one completion (``score``).
The prompts are phrased like the tiny arithmetic model's own, so that it solves some of them.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from dapo_rllib.tasks.problem_env import PROBLEM_CONFIG, ProblemEnv

#: Value of the "dataset" config key that selects the generated problems.
GENERATED = "generated"
#: Reported with every rating: metrics and accuracies are grouped by data source.
DATA_SOURCE = "counting"
STEPS = (1, 2, 3)
START_MAX = 96

_ANSWER = re.compile(r"Answer:\s*(-?\d+)")


@dataclass(frozen=True)
class CountingProblem:
    messages: tuple[dict, ...]
    ground_truth: str
    data_source: str = DATA_SOURCE


def counting_problem(start: int, step: int) -> CountingProblem:
    prompt = f'What is {start} + {step}? Put your final answer on its own line after "Answer:".'
    return CountingProblem(messages=({"role": "user", "content": prompt},), ground_truth=str(start + step))


def generate_problems(split: str, num_problems: int | None) -> list[CountingProblem]:
    """The first `num_problems` of the split (all: None). Starts that are multiples of 10 are held out
    for "test", so that evaluation asks what training never did."""
    if split not in ("train", "test"):
        raise ValueError(f"unknown counting split {split!r}; expected 'train' or 'test'")
    held_out = split == "test"
    problems = [
        counting_problem(start, step)
        for start in range(START_MAX + 1)
        for step in STEPS
        if (start % 10 == 0) == held_out
    ]
    return problems[:num_problems]


def load_problems(path: str | os.PathLike[str]) -> list[CountingProblem]:
    """The problems of a .jsonl file with rows {"start": int, "step": int} (the config's `dataset: <path>`)."""
    with open(path) as rows:
        return [counting_problem(int(row["start"]), int(row["step"])) for row in map(json.loads, rows)]


class CountingEnv(ProblemEnv[CountingProblem]):
    """Config keys: those of every ProblemEnv (`dataset`, `split`, `num_problems`, `shuffle`, `seed`)."""

    DEFAULT_CONFIG = {"dataset": GENERATED, **PROBLEM_CONFIG}
    BUILTIN_DATASET = GENERATED
    generate = staticmethod(generate_problems)
    load_file = staticmethod(load_problems)

    def score(self, problem: CountingProblem, completion: str) -> dict:
        """+1 when the last "Answer:" line holds the sum, else -1; `pred` is what that line holds."""
        answers = _ANSWER.findall(completion)
        pred = answers[-1] if answers else None
        correct = pred == problem.ground_truth
        return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": pred}
