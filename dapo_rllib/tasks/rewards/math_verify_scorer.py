"""Math reward by symbolic equivalence, using Hugging Face's math-verify: +1.0 / -1.0.

What it accepts:

* Ground truth: a bare answer (``"0.5"``, ``"2\\sqrt{3}"``, ``"(1, 2]"``, ``"x = 5"``) or one
  already in math delimiters (``"$\\frac{1}{2}$"``, ``"\\boxed{7}"``). Bare answers are read
  as LaTeX (wrapped in ``$...$``): math-verify would otherwise pick only a number out of
  them (``"2\\sqrt{3}"`` alone parses as ``2``).
* Response: the last ``Answer: <answer>`` line (the form DAPO prompts ask for; case
  insensitive, Markdown bold around it ignored), read like a ground truth. Without such a
  line, or when its content yields nothing, math-verify extracts the answer from the
  response itself (``\\boxed{}``, ``$...$``, "the answer is ..."). Only the last
  :data:`RESPONSE_WINDOW_CHARS` characters are looked at.

Answers are compared with ``math_verify.verify``: ``\\frac{1}{2}`` equals ``0.5``,
``\\sqrt{12}`` equals ``2\\sqrt{3}``, ``x = 5`` equals ``5``, intervals, sets and matrices
compare as such.

How it differs from :mod:`dapo_rllib.tasks.rewards.math_dapo` (the recipe's reference scorer,
which stays the default for DAPO data): that one compares normalised *strings*, so any
answer that is not written exactly like the ground truth is wrong, and it needs the
``Answer:`` line (``"Answer: 540."`` and a bare ``\\boxed{540}`` both score -1 there, +1
here). Rewards from the two scorers are therefore not interchangeable; pick one per run.

``pred`` is a canonical string of the parsed answer (sympy's printing after evaluating
it, decimals as exact fractions, ``x = 5`` as ``5``), so that equivalent answers usually
give equal ``pred`` strings for majority voting: ``\\frac{1}{2}``, ``0.5`` and ``50\\%`` all
give ``"1/2"``. It is ``None`` when no answer could be extracted at all (unlike
math_dapo's ``"[INVALID]"``, which could collide with a literal answer).

Timeouts: math-verify's own timeouts use ``signal.alarm``, which works only in the main
thread, so they are switched off here (math-verify logs a warning about that once per
process). Callers bound the time instead, with
:class:`dapo_rllib.tasks.rewards.scoring_process.ScoringProcess`.
"""

from __future__ import annotations

import re
from typing import Final

import sympy
from math_verify import parse, verify

from dapo_rllib.contracts import ScoreResult

__all__ = ["RESPONSE_WINDOW_CHARS", "MathVerifyResult", "compute_score"]

# Only this many trailing characters of a response are parsed. Final answers sit at the
# end, and 1000 characters hold a closing sentence plus a long boxed expression with
# room to spare (math_dapo keeps 300). The bound matters because math-verify's
# extraction regexes are superlinear on degenerate text: ~30 ms on the worst input we
# tried at 1000 characters, ~0.3 s at 10,000, and a response can be megabytes long.
RESPONSE_WINDOW_CHARS: Final = 1000

# "Answer", optional whitespace, ":", then the rest of the line (or of the next line, as
# \s also eats a newline). Case-insensitive, so "Final answer: 12" counts too.
_ANSWER_LINE: Final = re.compile(r"Answer\s*:\s*([^\n]+)", re.IGNORECASE)
# Text containing one of these is already marked up as math and is parsed as it is.
_MATH_DELIMITERS: Final = ("$", "\\(", "\\[", "\\boxed")


#: What :func:`compute_score` returns; ``pred`` is the canonical form of the extracted answer (None: nothing
#: extracted).
MathVerifyResult = ScoreResult


def compute_score(response: str, ground_truth: str) -> MathVerifyResult:
    """Score one model response against its ground-truth answer.

    Raises:
        TypeError: ``response`` or ``ground_truth`` is not a ``str``.
        ValueError: math-verify finds no answer in ``ground_truth``.
    """
    if not isinstance(response, str):
        raise TypeError(f"response must be a str, got {type(response).__name__}")
    if not isinstance(ground_truth, str):
        raise TypeError(f"ground_truth must be a str, got {type(ground_truth).__name__}")
    gold = _parse_bare_answer(ground_truth)
    if not gold:
        # A dataset problem, not a wrong response: every sample would score -1 silently.
        raise ValueError(f"math-verify cannot parse the ground truth {ground_truth!r}")

    predicted = _parse_response(response[-RESPONSE_WINDOW_CHARS:])
    correct = bool(predicted) and verify(gold, predicted, timeout_seconds=None)
    return ScoreResult(
        score=1.0 if correct else -1.0,
        acc=correct,
        pred=_canonical_string(predicted[0]) if predicted else None,
    )


def _parse_response(window: str) -> list:
    """math-verify's parse of the answer in ``window``: from its ``Answer:`` line if any."""
    matches = _ANSWER_LINE.findall(window)
    if matches:
        # "**Answer:** 5" leaves "** 5".
        parsed = _parse_bare_answer(matches[-1].strip("* \t"))
        if parsed:
            return parsed
    return parse(window, parsing_timeout=None)


def _parse_bare_answer(text: str) -> list:
    """math-verify's parse of an answer given on its own, read as LaTeX."""
    if not any(delimiter in text for delimiter in _MATH_DELIMITERS):
        text = f"${text}$"
    return parse(text, parsing_timeout=None)


def _canonical_string(answer: sympy.Basic | sympy.MatrixBase | str) -> str:
    """A string that equivalent answers share as often as is cheap to arrange."""
    if isinstance(answer, str):  # math-verify found an answer but could not parse it
        return answer.strip()
    if isinstance(answer, sympy.Eq) and answer.lhs.is_Symbol:
        answer = answer.rhs  # "x = 5" answers 5
    try:
        # doit() evaluates what parsing left unevaluated (sqrt(12) -> 2*sqrt(3)), and
        # nsimplify writes decimals as fractions (0.5 -> 1/2).
        canonical = sympy.nsimplify(answer.doit(), rational=True)
    except Exception:  # noqa: BLE001
        # sympy raises all kinds of errors on odd expressions; the model's output must
        # not crash scoring, and the unevaluated form is still a usable pred.
        return str(answer)
    return str(canonical)
