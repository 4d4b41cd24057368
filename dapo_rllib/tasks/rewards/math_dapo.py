"""Rule-based reward for DAPO math prompts: +1.0 for a correct final answer, -1.0 otherwise.

This is a behaviour-for-behaviour reimplementation of verl's reference scorer
``verl/utils/reward_score/math_dapo.py`` (volcengine/verl), the scorer the DAPO
recipe trains with (see docs/design/algorithm.md §3). The DAPO-Math-17K prompts ask the
model to finish with a line ``Answer: <answer>``; the scorer

1. keeps only the last 300 characters of the response,
2. takes the *last* case-insensitive match of ``Answer\\s*:\\s*([^\\n]+)`` in that
   window (``"[INVALID]"`` when there is none),
3. normalises the extracted text and the ground truth with
   :func:`normalize_final_answer` (text after the last ``=``, unit words, ``\\text{}``,
   ``\\boxed{}``, ``$...$``, thousands commas, spaces, ...),
4. compares the two normalised strings for exact equality.

The reference's quirks are reproduced on purpose, because the reward a policy is
trained on must be the one the recipe's numbers were produced with:

* ``"Answer: 540."`` is wrong: nothing strips a trailing period, and ``"540."`` is not
  all digits, so it stays ``"540."`` (whereas ``"Answer: $540$."`` is right, because the
  ``$...$`` step throws away everything outside the first dollar pair).
* A bare ``\\boxed{540}`` with no ``Answer:`` line is wrong (prediction ``"[INVALID]"``).
* An ``Answer:`` line that ends before the last 300 characters is never seen.
* The substitutions are plain substring replacements, so unit words are also cut out of
  the middle of other words (``"gm"`` in ``\\sigma``, ``"cm"`` in ``lcm``, ``"sue"`` in
  ``issue``) and every ``"a "`` / ``"an "`` is deleted. Both sides go through the same
  mangling, so this only matters when it makes two different answers collide.

``strict_box_verify=True`` selects the reference's alternative mode: the last
``\\boxed{...}`` in the last 100 characters of the (already 300-character) window is
compared *un-normalised* with the raw ground truth. ``pause_tokens_index`` (four
indices, only the last one is used) moves that 100-character window; like the
reference, the index is applied to the truncated 300-character string, not to the
original response.

Deliberate differences from the reference, none of which changes a score on valid
input: non-``str`` arguments raise :class:`TypeError` up front (the reference fails
somewhere inside, or silently compares in strict mode), and a ``pause_tokens_index``
whose length is not 4 raises :class:`ValueError` instead of tripping an ``assert``
(which ``python -O`` would drop). The reference's unused ``gt_need_extract`` path
(ground truth given as a ``\\boxed{}`` solution) is not carried over, since
``compute_score`` never enables it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from dapo_rllib.contracts import ScoreResult  # what compute_score returns (the reference's keys)

__all__ = ["ScoreResult", "compute_score", "normalize_final_answer"]

# Only this many trailing characters of a response are scored. The reference chose it
# because the longest MATH-500 answer is 159 characters; here it also bounds all regex
# work on model output (every pattern below runs on at most 300 characters of it).
RESPONSE_WINDOW_CHARS: Final = 300
# strict_box_verify looks for the \boxed{} only in the last 100 characters of that window.
STRICT_BOX_WINDOW_CHARS: Final = 100
# Prediction reported when no answer could be extracted. It is also run through the
# normaliser in the default mode, which leaves it unchanged.
INVALID_PRED: Final = "[INVALID]"

_BOX_OPEN: Final = "\\boxed{"

# Literal (non-regex) replacements, applied in this exact order. The reference keeps
# them as a substitution list followed by a list of expressions to delete; because
# every deletion runs after every substitution, one ordered list is equivalent. Order
# matters: e.g. "\text{m}" first becomes "\text{}", which a later entry deletes, and
# spaces are gone before the unit words are cut out ("12 cm" -> "12cm" -> "12").
_LITERAL_REPLACEMENTS: Final[tuple[tuple[str, str], ...]] = (
    # --- substitutions ---
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),  # a period just before a closing dollar ("$540.$") is dropped ...
    ("\\$", ""),  # ... as are escaped dollar signs ("\$5")
    ("\\ ", ""),  # LaTeX forced space
    (" ", ""),  # every remaining space
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),  # metres: reduced to an empty \text{} deleted below
    # --- deletions (units, filler words and LaTeX noise) ---
    ("square", ""),
    ("ways", ""),
    ("integers", ""),
    ("dollars", ""),
    ("mph", ""),
    ("inches", ""),
    ("hours", ""),
    ("km", ""),
    ("units", ""),
    ("\\ldots", ""),
    ("sue", ""),
    ("points", ""),
    ("feet", ""),
    ("minutes", ""),
    ("digits", ""),
    ("cents", ""),
    ("degrees", ""),
    ("cm", ""),
    ("gm", ""),
    ("pounds", ""),
    ("meters", ""),
    ("meals", ""),
    ("edges", ""),
    ("students", ""),
    ("childrentickets", ""),
    ("multiples", ""),
    ("\\text{s}", ""),
    ("\\text{.}", ""),
    ("\\text{\ns}", ""),  # these two contain a real newline, as in the reference;
    ("\\text{}^2", ""),
    ("\\text{}^3", ""),
    ("\\text{\n}", ""),  # they can only ever match a multi-line ground truth
    ("\\text{}", ""),
    ("\\mathrm{th}", ""),
    ("^\\circ", ""),
    ("^{\\circ}", ""),
    ("\\;", ""),
    (",\\!", ""),
    ("{,}", ""),
    ('"', ""),
    ("\\dots", ""),
)

# Regex rewrites, applied one after the other (a single combined pattern would not be
# equivalent: "\overline{\text{a}}" needs the \text pass to run before the \overline one).
# None of them uses DOTALL, so on a multi-line ground truth each works line by line,
# exactly like the reference.
_REGEX_REWRITES: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    # Keep only the first $...$ pair of a line and drop everything around it. The
    # dollars are kept until the end on purpose: the frac/sqrt passes below can see
    # them (the reference turns "$\frac1$" into "\frac{1}{}", and so must we).
    (re.compile(r".*?\$(.*?)\$.*"), r"$\1$"),
    # Unwrap \text{..}, \textbf{..}, \overline{..} up to the first closing brace.
    (re.compile(r"\\text\{(.*?)\}"), r"\1"),
    (re.compile(r"\\textbf\{(.*?)\}"), r"\1"),
    (re.compile(r"\\overline\{(.*?)\}"), r"\1"),
    # Unwrap \boxed{..} up to the *last* closing brace of the line (greedy).
    (re.compile(r"\\boxed\{(.*)\}"), r"\1"),
    # Brace shorthand TeX: \frac12 -> \frac{1}{2}, \sqrt2 -> \sqrt{2}.
    (re.compile(r"frac([^{])(.)"), r"frac{\1}{\2}"),
    (re.compile(r"sqrt([^{])"), r"sqrt{\1}"),
)

# "Answer", optional whitespace (newlines included), ":", optional whitespace, then the
# rest of that line. Case-insensitive, so "answer : 12" and "FINAL ANSWER: 12" count.
# Linear-ish in the input and only ever run on RESPONSE_WINDOW_CHARS characters.
_ANSWER_LINE: Final = re.compile(r"Answer\s*:\s*([^\n]+)", re.IGNORECASE)


def normalize_final_answer(final_answer: str) -> str:
    """Normalise an answer string the way the reference scorer does.

    Applied to both the extracted prediction and the ground truth before the exact
    string comparison. Steps, in order: keep the text after the last ``=``; literal
    substitutions and deletions (spaces, unit words, LaTeX noise); regex rewrites
    (``$...$``, ``\\text{}``, ``\\textbf{}``, ``\\overline{}``, ``\\boxed{}``,
    ``\\frac``/``\\sqrt`` shorthand); drop ``$``; drop commas if what remains is all
    digits (``"1,000"`` -> ``"1000"``); strip surrounding whitespace.
    """
    if not isinstance(final_answer, str):
        raise TypeError(f"final_answer must be a str, got {type(final_answer).__name__}; expected a string")
    # "x = 12" -> " 12": only the right-hand side of the last equation is the answer.
    text = final_answer.rpartition("=")[2]
    for old, new in _LITERAL_REPLACEMENTS:
        text = text.replace(old, new)
    for pattern, replacement in _REGEX_REWRITES:
        text = pattern.sub(replacement, text)
    text = text.replace("$", "")
    # Thousands separators: drop commas only when the rest is all digits. The reference
    # cannot tell "1,000" from a list such as "1,2", which therefore becomes "12".
    # str.isdigit (not a regex) on purpose: it is what the reference uses, and it also
    # accepts e.g. superscript digits. The check happens *before* the final strip, so a
    # trailing "\r" or tab keeps the commas.
    if text.replace(",", "").isdigit():
        text = text.replace(",", "")
    return text.strip()


def _extract_answer_line(window: str) -> str:
    """Return the text after the last ``Answer:`` in ``window``, or ``INVALID_PRED``."""
    last = None
    for last in _ANSWER_LINE.finditer(window):
        pass
    return last.group(1) if last is not None else INVALID_PRED


def _last_boxed_content(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` in ``text`` with balanced braces, else None.

    The search starts at the last occurrence of ``\\boxed{``; if its braces never close
    (e.g. the window cut it off) there is no answer, even if an earlier box is complete.
    """
    start = text.rfind(_BOX_OPEN)
    if start < 0:
        return None
    depth = 0
    for i in range(start + len(_BOX_OPEN) - 1, len(text)):
        char = text[i]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start + len(_BOX_OPEN) : i]
    return None


def _strict_box_prediction(window: str, pause_tokens_index: Sequence[int] | None) -> str:
    """Prediction for ``strict_box_verify`` mode: the last boxed answer, un-normalised."""
    if pause_tokens_index is None:
        tail = window[-STRICT_BOX_WINDOW_CHARS:]
    else:
        if len(pause_tokens_index) != 4:
            raise ValueError(f"pause_tokens_index must hold 4 indices, got {len(pause_tokens_index)}")
        # Reference behaviour, kept as is: the index is applied to the 300-character
        # window, and a start below 0 counts from the end of it (plain Python slicing).
        tail = window[pause_tokens_index[-1] - STRICT_BOX_WINDOW_CHARS :]
    content = _last_boxed_content(tail)
    return content if content is not None else INVALID_PRED


def compute_score(
    solution_str: str,
    ground_truth: str,
    strict_box_verify: bool = False,
    pause_tokens_index: Sequence[int] | None = None,
) -> ScoreResult:
    """Score one model response against its ground-truth answer.

    Args:
        solution_str: The decoded model response.
        ground_truth: The reference answer (an integer string for DAPO-Math-17K).
        strict_box_verify: Use the reference's strict boxed-answer mode instead of the
            default ``Answer:`` extraction (see the module docstring).
        pause_tokens_index: Strict mode only: 4 indices, the last of which ends the
            100-character window searched for ``\\boxed{}``.

    Returns:
        ``{"score": 1.0 or -1.0, "acc": bool, "pred": str}``.

    Raises:
        TypeError: if ``solution_str`` or ``ground_truth`` is not a ``str``.
        ValueError: if ``pause_tokens_index`` is given without exactly 4 entries.
    """
    if not isinstance(solution_str, str):
        raise TypeError(f"solution_str must be a str, got {type(solution_str).__name__}; expected a string")
    if not isinstance(ground_truth, str):
        raise TypeError(f"ground_truth must be a str, got {type(ground_truth).__name__}; expected a string")

    # Everything below sees at most RESPONSE_WINDOW_CHARS characters of model output,
    # which keeps the regex work bounded however long the response is.
    window = solution_str[-RESPONSE_WINDOW_CHARS:]

    if strict_box_verify:
        # Strict mode compares the raw boxed text with the raw ground truth.
        pred = _strict_box_prediction(window, pause_tokens_index)
        correct = pred == ground_truth
    else:
        # The ground truth is not truncated (the reference does not either); it comes
        # from the dataset, not the model, and is normally a short integer.
        pred = normalize_final_answer(_extract_answer_line(window))
        correct = pred == normalize_final_answer(ground_truth)

    # pred: the (normalised, in the default mode) extracted prediction, INVALID_PRED when there is none.
    return ScoreResult(score=1.0 if correct else -1.0, acc=correct, pred=pred)
