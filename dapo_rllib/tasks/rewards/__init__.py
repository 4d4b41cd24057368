"""Reward functions and the registry that selects one per data source.

A scorer is a function ``(response: str, ground_truth: str) -> Mapping`` whose result
holds ``"score"`` (+1.0 / -1.0), ``"acc"`` (bool) and ``"pred"`` (the extracted answer): a
:class:`dapo_rllib.contracts.ScoreResult`.
Scorers are named by *spec*: either a registered name (:data:`SCORERS`) or an import
path ``"package.module:function"``, so users can plug in their own scorer without
touching this package. Specs are strings rather than functions because the scoring
child process (:mod:`dapo_rllib.tasks.rewards.scoring_process`) must be able to load them.

This module stays light (standard library only): it is imported by environments in
every env runner and by the scoring child, neither of which should pay for Ray or torch.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Final

from dapo_rllib.contracts import ScoreResult

__all__ = ["DEFAULT_SCORER_BY_SOURCE", "SCORERS", "Scorer", "load_scorer", "scorer_for"]

#: A scorer maps (response text, ground truth) to {"score", "acc", "pred"}.
Scorer = Callable[[str, str], ScoreResult]

#: Registered scorer names and the import path each stands for.
SCORERS: Final[Mapping[str, str]] = {
    # verl's reference scorer, the one the DAPO recipe's numbers were produced with.
    "math_dapo": "dapo_rllib.tasks.rewards.math_dapo:compute_score",
    # Symbolic equivalence with Hugging Face's math-verify (fractions, radicals, sets).
    "math_verify": "dapo_rllib.tasks.rewards.math_verify_scorer:compute_score",
}

#: The scorer used for each data source when the user selects none.
DEFAULT_SCORER_BY_SOURCE: Final[Mapping[str, str]] = {
    "math_dapo": "math_dapo",
    "arithmetic": "math_dapo",
    "scratchpad_sums": "math_dapo",
    "tool_arithmetic": "math_dapo",
}

_IMPORT_PATH_FORM: Final = "'package.module:function'"


def load_scorer(spec: str) -> Scorer:
    """Return the scorer function named by ``spec`` (a registered name or an import path).

    Raises:
        TypeError: ``spec`` is not a string.
        ValueError: ``spec`` is neither a registered name nor an importable
            ``"package.module:function"`` path to a callable.
    """
    if not isinstance(spec, str):
        raise TypeError(
            f"scorer must be a registered name {sorted(SCORERS)} or an import path "
            f"{_IMPORT_PATH_FORM}, got {type(spec).__name__} {spec!r}"
        )
    return _import_scorer(spec, SCORERS.get(spec, spec))


def scorer_for(data_source: str, choice: None | str | Mapping[str, str]) -> str:
    """The scorer spec that applies to ``data_source`` under the user's ``choice``.

    Args:
        data_source: The ``data_source`` field of a dataset row.
        choice: ``None`` for the default scorer of each data source; a spec (str) to use
            one scorer for every data source; or a mapping ``{data_source: spec}``, where
            data sources it does not mention keep their default scorer.

    Returns:
        The spec, not yet loaded: pass it to :func:`load_scorer`.

    Raises:
        TypeError: ``choice`` is of another type.
        ValueError: ``data_source`` has no default scorer and ``choice`` names none.
    """
    if isinstance(choice, str):
        return choice
    if isinstance(choice, Mapping):
        if data_source in choice:
            return choice[data_source]
    elif choice is not None:
        raise TypeError(
            f"scorer choice must be None, a scorer spec (str) or a mapping "
            f"{{data_source: spec}}, got {type(choice).__name__} {choice!r}"
        )
    try:
        return DEFAULT_SCORER_BY_SOURCE[data_source]
    except KeyError:
        raise ValueError(
            f"no default scorer for data_source {data_source!r}; data sources with a default: "
            f"{sorted(DEFAULT_SCORER_BY_SOURCE)}. Select a scorer for it with the 'scorer' "
            f"setting: a registered name {sorted(SCORERS)} or an import path "
            f"{_IMPORT_PATH_FORM}, either for all data or as {{{data_source!r}: scorer}}"
        ) from None


# Cached so that scoring many responses resolves each spec once; failures are not cached.
@functools.cache
def _import_scorer(spec: str, import_path: str) -> Scorer:
    module_name, colon, function_name = import_path.partition(":")
    if not (colon and module_name and function_name):
        raise ValueError(
            f"unknown scorer {spec!r}: expected a registered name {sorted(SCORERS)} "
            f"or an import path {_IMPORT_PATH_FORM}"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        # Only a missing scorer module is a bad spec; a scorer module that fails to
        # import one of its own dependencies is that module's bug and propagates as is.
        if error.name is None or not (module_name + ".").startswith(error.name + "."):
            raise
        raise ValueError(f"scorer {spec!r}: no module named {module_name!r}") from error
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ValueError(f"scorer {spec!r}: module {module_name!r} has no function {function_name!r}")
    return function
