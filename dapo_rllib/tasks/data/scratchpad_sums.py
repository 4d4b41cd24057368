"""Built-in generator for the ablation task: chains of additions, solved on a scratchpad.

"What is 47 + 5 + 8 + 3?" has k single-digit addends (k = 1 .. MAX_ADDENDS) after a two-digit
start. The worked answer writes one line per addend and then the answer line:

    47+5=52
    52+8=60
    60+3=63
    Answer: 63

so the length a correct answer needs grows with k, and so does the chance of a slip on the way.
The task is built for the DAPO ablation (tuned_examples/dapo/tiny_ablation.py): problems range
from easy (k = 1: groups mostly all right) to hard (k = 6: groups mostly all wrong), and long
answers run into the response limit. A stable hash of the question splits train from test.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
from pathlib import Path

from dapo_rllib.tasks.data.arithmetic import ARITHMETIC_PROMPT_TEMPLATE
from dapo_rllib.tasks.data.datasets import MathProblem, problem_to_row, write_jsonl

#: ``data_source`` of the generated problems (scored by math_dapo: the "Answer:" line).
SUMS_DATA_SOURCE = "scratchpad_sums"
MAX_ADDENDS = 6
START_RANGE = (10, 99)
ADDEND_RANGE = (1, 9)
SPLITS = ("train", "test")
TEST_SPLIT_MODULUS = 10  # a question is in "test" iff its hash is divisible by this


def question(start: int, addends: tuple[int, ...]) -> str:
    return "What is " + " + ".join(map(str, (start, *addends))) + "?"


def scratchpad_lines(start: int, addends: tuple[int, ...], *, spaced: bool = False) -> list[str]:
    """The worked lines "running+addend=new running", one per addend; `spaced` writes
    "running + addend = new running", half as long again in tokens."""
    lines, running = [], start
    for b in addends:
        lines.append(f"{running} + {b} = {running + b}" if spaced else f"{running}+{b}={running + b}")
        running += b
    return lines


def split_of(text: str) -> str:
    digest = hashlib.sha256(text.encode()).digest()
    return "test" if int.from_bytes(digest, "big") % TEST_SPLIT_MODULUS == 0 else "train"


def generate_sum_problems(split: str, num_problems: int, *, seed: int = 0) -> list[MathProblem]:
    """``num_problems`` distinct problems of ``split``, k cycling through 1 .. MAX_ADDENDS so
    that every difficulty is equally common (in the test set exactly so)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    if not isinstance(num_problems, int) or num_problems < 1:
        raise ValueError(f"num_problems={num_problems!r} must be a positive integer")
    # k = 1 has only `one_addend` questions, about 1/TEST_SPLIT_MODULUS of them in "test"; half
    # of a split's share is a safe bound for drawing them distinct.
    one_addend = (START_RANGE[1] - START_RANGE[0] + 1) * (ADDEND_RANGE[1] - ADDEND_RANGE[0] + 1)
    limit = MAX_ADDENDS * (one_addend // 2 if split == "train" else one_addend // (2 * TEST_SPLIT_MODULUS))
    if num_problems > limit:
        raise ValueError(
            f"num_problems={num_problems}: the {split!r} split has at most {limit} (as many problems with one addend as with {MAX_ADDENDS})"
        )
    rng = random.Random(f"{split}/{seed}")
    seen: set[str] = set()
    problems: list[MathProblem] = []
    while len(problems) < num_problems:
        k = len(problems) % MAX_ADDENDS + 1
        start = rng.randint(*START_RANGE)
        addends = tuple(rng.randint(*ADDEND_RANGE) for _ in range(k))
        text = question(start, addends)
        if text in seen or split_of(text) != split:
            continue
        seen.add(text)
        problems.append(
            MathProblem(
                messages=({"role": "user", "content": ARITHMETIC_PROMPT_TEMPLATE.format(problem=text)},),
                ground_truth=str(start + sum(addends)),
                data_source=SUMS_DATA_SOURCE,
                index=len(problems),
            )
        )
    return problems


_QUESTION_RE = re.compile(r"What is (\d+(?: \+ \d+)+)\?")


def parse_sum_question(text: str) -> tuple[int, tuple[int, ...]]:
    """(start, addends) of a generated question or its prompt."""
    match = _QUESTION_RE.search(text)
    if match is None:
        raise ValueError(f"not a sum problem: expected 'What is <a> + <b> [+ ...]?' in {text[:200]!r}")
    start, *addends = (int(term) for term in match.group(1).split(" + "))
    return start, tuple(addends)


def write_sum_dataset(path: str | Path, split: str, num_problems: int, *, seed: int = 0) -> Path:
    """The problems as a DAPO-format .jsonl file (loaded like any user dataset)."""
    write_jsonl((problem_to_row(p) for p in generate_sum_problems(split, num_problems, seed=seed)), path)
    return Path(path)


def ensure_sum_datasets(directory: str | Path, *, train_problems: int, test_problems: int) -> tuple[Path, Path]:
    """train.jsonl and test.jsonl of the task in `directory`, written once (seed 0)."""
    directory = Path(directory)
    paths = []
    for split, n in (("train", train_problems), ("test", test_problems)):
        path = directory / f"{split}-{n}.jsonl"
        if not path.is_file():
            tmp = write_sum_dataset(path.with_suffix(f".{os.getpid()}.tmp"), split, n)
            tmp.replace(path)  # atomic: concurrent trials never read a half-written file
        paths.append(path)
    return paths[0], paths[1]
