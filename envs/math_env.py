"""Math problems as a single-step language environment (task API: :mod:`dapo_rllib.tasks.problem_env`).

A completion is scored against the reference answer with a rule-based scorer (+1 correct,
-1 wrong; docs/design/algorithm.md §3).

Scorers run in a child process shared by all environments of a process, which
is killed when a scorer exceeds the timeout (docs/design/algorithm.md §8; see
``dapo_rllib.tasks.rewards.scoring_process``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from dapo_rllib.contracts import ScoreResult
from dapo_rllib.tasks.data import MathProblem, generate_arithmetic_problems, load_math_dataset
from dapo_rllib.tasks.problem_env import PROBLEM_CONFIG, ProblemEnv
from dapo_rllib.tasks.rewards import SCORERS, load_scorer, scorer_for
from dapo_rllib.tasks.rewards.scoring_process import ScoreOutcome, shared_scoring_process

#: Value of the "dataset" config key that selects the built-in generator.
ARITHMETIC_DATASET = "arithmetic"

#: Config keys and their defaults.
DEFAULT_CONFIG: dict[str, Any] = {
    "dataset": ARITHMETIC_DATASET,
    **PROBLEM_CONFIG,
    "scorer": None,
    "score_timeout_s": 10.0,
}


class MathScoreResult(ScoreResult):
    """What :meth:`MathEnv.score` returns: the scorer's verdict, and which scorer gave it (a spec)."""

    scorer: str


class MathEnv(ProblemEnv[MathProblem]):
    """Single-step environment over a math dataset.

    Config keys (all optional; see ``DEFAULT_CONFIG``):
        dataset: ``"arithmetic"`` for the built-in generator, or the path of a
            DAPO-format ``.parquet``/``.jsonl`` file.
        split: ``"train"`` or ``"test"`` split of the arithmetic generator
            (ignored for files: pass another file for evaluation).
        num_problems: Number of arithmetic problems (``None``: the whole split),
            the same ones for every seed. Not supported for files.
        shuffle: Draw problems in a fresh random order each epoch (else in
            dataset order).
        seed: Seed of the draw order.
        scorer: Which scorer rates completions. ``None``: the default for each
            data source (``dapo_rllib.tasks.rewards.DEFAULT_SCORER_BY_SOURCE``: math_dapo
            for DAPO data). A scorer spec, a registered name (``"math_dapo"``,
            ``"math_verify"``) or an import path ``"package.module:function"``:
            that scorer for all data. A mapping ``{data_source: spec}``: per data
            source, with the default for sources it does not mention.
        score_timeout_s: Seconds a scorer may spend on one completion; past it
            the completion scores -1 and ``info["score_timed_out"]`` is True.
            ``None`` scores in this process without any timeout, for debugging
            a scorer only: a scorer that hangs then hangs the environment.

    Keys starting with ``"_"`` are reserved for callers and ignored; any other
    unknown key is an error (see :class:`ProblemEnv`).
    """

    DEFAULT_CONFIG = DEFAULT_CONFIG
    BUILTIN_DATASET = ARITHMETIC_DATASET
    generate = staticmethod(generate_arithmetic_problems)
    load_file = staticmethod(load_math_dataset)

    def __init__(self, config: Mapping[str, Any] | None = None):
        settings = self.settings(config)
        self._score_timeout_s = _checked_timeout(settings["score_timeout_s"])
        super().__init__(settings)
        # Resolved up front so that a bad file or scorer fails at construction,
        # not at the first scoring of some remote env runner.
        self._scorer_by_source = _resolve_scorers(self._problems, settings["scorer"], settings["dataset"])

    def score(self, problem: MathProblem, completion: str) -> MathScoreResult:
        """The verdict of the problem's data source's scorer; its info also names the scorer."""
        scorer = self._scorer_by_source[problem.data_source]
        if self._score_timeout_s is None:
            outcome = ScoreOutcome.from_result(scorer, load_scorer(scorer)(completion, problem.ground_truth))
        else:
            outcome = shared_scoring_process().score(scorer, completion, problem.ground_truth, self._score_timeout_s)
        return MathScoreResult(**outcome.as_result(), scorer=scorer)


def _checked_timeout(timeout_s: Any) -> float | None:
    if timeout_s is None:
        return None
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real) or not 0 < timeout_s < math.inf:
        raise ValueError(
            f"MathEnv 'score_timeout_s' must be a finite number of seconds > 0, or None to score "
            f"without a timeout (debugging only); got {timeout_s!r}"
        )
    return float(timeout_s)


def _resolve_scorers(problems: list[MathProblem], choice: Any, dataset: Any) -> dict[str, str]:
    """The scorer spec for each data source in ``problems``, each checked to load."""
    is_spec_mapping = isinstance(choice, Mapping) and all(
        isinstance(key, str) and isinstance(value, str) for key, value in choice.items()
    )
    if not (choice is None or isinstance(choice, str) or is_spec_mapping):
        raise ValueError(
            f"MathEnv 'scorer' must be None (the default per data source), a scorer (a registered "
            f"name {sorted(SCORERS)} or an import path 'package.module:function'), or a mapping "
            f"{{data_source: scorer}}; got {choice!r}"
        )
    scorer_by_source = {}
    for data_source in sorted({problem.data_source for problem in problems}):
        try:
            scorer = scorer_for(data_source, choice)
            load_scorer(scorer)  # an unknown name or a bad import path fails here
        except ValueError as error:
            raise ValueError(f"MathEnv dataset {dataset!r}: {error}") from error
        scorer_by_source[data_source] = scorer
    return scorer_by_source
