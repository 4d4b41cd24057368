"""Scorers that misbehave on purpose, for tests/tasks/test_scoring_process.py and the doctor's data check.

They live in their own module, not in the test file, because the scoring child process
loads scorers by import path; it finds this module through the parent's sys.path.
"""

from __future__ import annotations

import os
import re


def catastrophic_regex(response: str, ground_truth: str) -> dict:
    """Hangs for ages on ``"1" * 40 + "x"``: nested quantifiers backtrack 2**40 times."""
    matched = re.fullmatch(r"(\d+)+$", response) is not None
    return {"score": 1.0 if matched else -1.0, "acc": matched, "pred": response}


def process_id(response: str, ground_truth: str) -> dict:
    """Reports the id of the process it runs in, as its prediction."""
    return {"score": -1.0, "acc": False, "pred": str(os.getpid())}


def raise_error(response: str, ground_truth: str) -> dict:
    raise ZeroDivisionError(f"cannot score {response!r}")


def exit_process(response: str, ground_truth: str) -> dict:
    """Ends the scoring process with status 3, as a crash in C code would end it."""
    os._exit(3)


def missing_keys(response: str, ground_truth: str) -> dict:
    return {"score": 1.0}


def always_hangs(response: str, ground_truth: str) -> dict:
    """Hangs on every response, in C code (the regex of catastrophic_regex on its bad input)."""
    return catastrophic_regex("1" * 40 + "x", ground_truth)


def never_reads(response: str, ground_truth: str) -> dict:
    """Finds no answer in any response, as a scorer of another format would (tests/doctor/test_doctor.py)."""
    return {"score": -1.0, "acc": False, "pred": None}
