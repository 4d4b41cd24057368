"""Math problems as a single-step language environment.

An episode is one prompt and one completion: ``reset()`` returns the prompt
as chat messages, ``step(completion_text)`` scores the completion against the
reference answer with a rule-based scorer (+1 correct, -1 wrong; DAPO.md §3)
and terminates. GRPO/DAPO sample G completions per prompt; each one is scored
as its own episode by replaying the prompt with
``reset(options={"problem_index": i})``.

Scorers run in a child process shared by all environments of a process, which
is killed when a scorer exceeds the timeout (DAPO.md §8; see
``dapo_rllib.rewards.scoring_process``).
"""

from __future__ import annotations

import copy
import math
import numbers
import operator
import os
import string
from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from dapo_rllib.data import MathProblem, generate_arithmetic_problems, load_math_dataset
from dapo_rllib.rewards import SCORERS, load_scorer, scorer_for
from dapo_rllib.rewards.scoring_process import ScoreOutcome, shared_scoring_process
from dapo_rllib.rewards.text import as_text

#: Value of the "dataset" config key that selects the built-in generator.
ARITHMETIC_DATASET = "arithmetic"

#: Config keys and their defaults.
DEFAULT_CONFIG: dict[str, Any] = {
    "dataset": ARITHMETIC_DATASET,
    "split": "train",
    "num_problems": None,
    "shuffle": True,
    "seed": 0,
    "scorer": None,
    "score_timeout_s": 10.0,
}

_RESET_OPTIONS = ("problem_index",)


class MathEnv(gymnasium.Env):
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
            data source (``dapo_rllib.rewards.DEFAULT_SCORER_BY_SOURCE``: math_dapo
            for DAPO data). A scorer spec, a registered name (``"math_dapo"``,
            ``"math_verify"``) or an import path ``"package.module:function"``:
            that scorer for all data. A mapping ``{data_source: spec}``: per data
            source, with the default for sources it does not mention.
        score_timeout_s: Seconds a scorer may spend on one completion; past it
            the completion scores -1 and ``info["score_timed_out"]`` is True.
            ``None`` scores in this process without any timeout, for debugging
            a scorer only: a scorer that hangs then hangs the environment.

    Keys starting with ``"_"`` are reserved for callers and ignored; any other
    unknown key is an error, so that a typo cannot silently fall back to a
    default.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, config: Mapping[str, Any] | None = None):
        # Ray passes an EnvContext, a dict subclass; plain dicts work the same.
        config = dict(config or {})
        unknown = sorted(k for k in config if not str(k).startswith("_") and k not in DEFAULT_CONFIG)
        if unknown:
            raise ValueError(f"unknown MathEnv config keys {unknown}; valid keys: {sorted(DEFAULT_CONFIG)}")
        settings = {key: config.get(key, default) for key, default in DEFAULT_CONFIG.items()}

        self._score_timeout_s = _checked_timeout(settings["score_timeout_s"])
        self._problems = _load_problems(settings)
        if not self._problems:
            raise ValueError(f"MathEnv dataset {settings['dataset']!r} has no problems")
        # Resolved up front so that a bad file or scorer fails at construction,
        # not at the first step() of some remote env runner.
        self._scorer_by_source = _resolve_scorers(self._problems, settings["scorer"], settings["dataset"])

        self.observation_space = spaces.Sequence(
            spaces.Dict(
                {
                    "role": spaces.Text(max_length=64, charset=string.ascii_letters + "_"),
                    "content": spaces.Text(min_length=0, max_length=100_000, charset=string.printable),
                }
            ),
            stack=False,
        )
        self.action_space = spaces.Text(min_length=0, max_length=1_000_000, charset=string.printable)

        self._shuffle = bool(settings["shuffle"])
        self._restart(settings["seed"])
        # Index of the problem awaiting a step(), or None outside an episode.
        self._current: int | None = None

    @property
    def num_problems(self) -> int:
        """Number of (distinct) problems in the dataset."""
        return len(self._problems)

    def problem(self, i: int) -> MathProblem:
        """Problem ``i`` of the dataset."""
        return self._problems[self._check_index(i)]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Start an episode and return ``(prompt messages, info)``.

        Without options the next problem of the draw order is used; each
        epoch visits every problem once. ``options={"problem_index": i}``
        replays problem ``i`` without advancing the draw order. ``seed``
        re-seeds the order and restarts it from epoch 0.
        """
        super().reset(seed=seed)
        if seed is not None:
            self._restart(seed)
        options = options or {}
        unknown = sorted(set(options) - set(_RESET_OPTIONS))
        if unknown:
            raise ValueError(f"unknown MathEnv reset options {unknown}; valid options: {list(_RESET_OPTIONS)}")

        if "problem_index" in options:
            index = self._check_index(options["problem_index"])
        else:
            index = self._next_index()
        self._current = index
        problem = self._problems[index]
        info = {
            "problem_index": index,
            "ground_truth": problem.ground_truth,
            "data_source": problem.data_source,
            "epoch": self._epoch,
        }
        return _copy_messages(problem), info

    def step(self, action: str | bytes) -> tuple[list[dict[str, str]], float, bool, bool, dict[str, Any]]:
        """Score the completion ``action``; the episode always terminates.

        ``action`` is the completion text; bytes are decoded as UTF-8, with
        invalid sequences (and lone surrogates in a str) replaced by U+FFFD.
        """
        if self._current is None:
            raise RuntimeError("MathEnv.step() called without an active episode: call reset() first")
        if not isinstance(action, (str, bytes)):
            raise TypeError(
                f"MathEnv action must be the completion text (str or bytes), got {type(action).__name__}"
            )
        index, self._current = self._current, None
        problem = self._problems[index]
        scorer = self._scorer_by_source[problem.data_source]
        outcome = self._score(scorer, as_text(action), problem.ground_truth)
        info = {
            "score": outcome.score,
            "acc": outcome.acc,
            "pred": outcome.pred,
            "ground_truth": problem.ground_truth,
            "problem_index": index,
            "data_source": problem.data_source,
            "scorer": scorer,
            "score_timed_out": outcome.timed_out,
        }
        return _copy_messages(problem), outcome.score, True, False, info

    def _score(self, scorer: str, completion: str, ground_truth: str) -> ScoreOutcome:
        if self._score_timeout_s is None:
            return ScoreOutcome.from_result(scorer, load_scorer(scorer)(completion, ground_truth))
        return shared_scoring_process().score(scorer, completion, ground_truth, self._score_timeout_s)

    def get_state(self) -> dict[str, Any]:
        """Draw-order state (cursor, epoch, permutation, RNG), for checkpoints."""
        return {
            "cursor": self._cursor,
            "epoch": self._epoch,
            "permutation": [int(i) for i in self._permutation],
            "rng_state": copy.deepcopy(self._rng.bit_generator.state),
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`get_state` result, so the same prompts come next.

        Raises:
            ValueError: The state belongs to a dataset of another size.
        """
        permutation = np.asarray(state["permutation"], dtype=np.int64)
        if len(permutation) != self.num_problems:
            raise ValueError(
                f"MathEnv state has a permutation of {len(permutation)} problems, "
                f"but this dataset has {self.num_problems}"
            )
        self._rng.bit_generator.state = copy.deepcopy(state["rng_state"])
        self._permutation = permutation
        self._cursor = int(state["cursor"])
        self._epoch = int(state["epoch"])

    def _restart(self, seed: int) -> None:
        """Seed the draw order and start it over at epoch 0."""
        self._rng = np.random.default_rng(seed)
        self._epoch = 0
        self._permutation = self._new_permutation()
        self._cursor = 0

    def _new_permutation(self) -> np.ndarray:
        if self._shuffle:
            return self._rng.permutation(self.num_problems)
        return np.arange(self.num_problems)

    def _next_index(self) -> int:
        """Advance the cursor, starting a new epoch when the permutation is used up."""
        if self._cursor >= len(self._permutation):
            self._epoch += 1
            self._permutation = self._new_permutation()
            self._cursor = 0
        index = int(self._permutation[self._cursor])
        self._cursor += 1
        return index

    def _check_index(self, i: Any) -> int:
        try:
            index = operator.index(i)
        except TypeError:
            raise TypeError(f"problem index must be an int, got {type(i).__name__} {i!r}") from None
        if not 0 <= index < self.num_problems:
            raise IndexError(f"problem index {index} out of range: the dataset has {self.num_problems} problems")
        return index


def _load_problems(settings: Mapping[str, Any]) -> list[MathProblem]:
    """Build the problem list selected by the (validated-key) settings."""
    dataset = settings["dataset"]
    if dataset == ARITHMETIC_DATASET:
        # The generator's own seed stays fixed: the problem set must depend
        # only on (split, num_problems), not on each env runner's draw seed.
        return generate_arithmetic_problems(settings["split"], settings["num_problems"])
    if not isinstance(dataset, (str, os.PathLike)):
        raise TypeError(
            f"MathEnv 'dataset' must be {ARITHMETIC_DATASET!r} or a file path, got {type(dataset).__name__}"
        )
    if settings["num_problems"] is not None:
        # Refused rather than ignored: truncating a file is the file's job.
        raise ValueError(
            f"MathEnv 'num_problems' applies to the {ARITHMETIC_DATASET!r} dataset only, "
            f"not to file {dataset!r}; pass a smaller file instead"
        )
    return load_math_dataset(dataset)


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


def _copy_messages(problem: MathProblem) -> list[dict[str, str]]:
    """Fresh message dicts, so callers cannot mutate the dataset."""
    return [dict(message) for message in problem.messages]
