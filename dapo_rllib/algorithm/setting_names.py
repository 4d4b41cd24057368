"""Setting names checked where a config method takes them.

A misspelled setting (`.training(grop_size=8)`) would otherwise end deep in RLlib's `AlgorithmConfig.training`
with Python's "got an unexpected keyword argument"; here it is refused in one line that names it and the
known settings closest to it, as a TypeError (Python's own kind for an unexpected keyword).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Collection
from typing import Any

from ray.rllib.algorithms.algorithm_config import NotProvided

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


class UnknownSettingError(TypeError):
    """A keyword that is no setting of the config method it was given to."""


def close_names(name: str, known: Collection[str]) -> list[str]:
    """The known names closest to `name`, closest first (difflib's ratio, at most 3)."""
    return difflib.get_close_matches(name, list(known), n=3)


def _close(name: str, known: Collection[str]) -> str:
    close = close_names(name, known)
    return f" (close ones: {', '.join(map(repr, close))})" if close else " (every setting: docs/reference/settings.md)"


def split_settings(config: Any, kwargs: dict[str, Any], own: Collection[str], rllib_method: Callable) -> dict:
    """Set on `config` the keywords named in `own` (its own settings; NotProvided ones left alone) and return
    the others, for `rllib_method` (the RLlib method the config's method extends).

    Raises:
        UnknownSettingError: a keyword is neither in `own` nor a parameter of `rllib_method`; the message names
            it and the closest known settings.
    """
    rllib_names = [
        name for name, parameter in inspect.signature(rllib_method).parameters.items() if parameter.kind in _NAMED
    ]
    known = {*own, *rllib_names} - {"self"}
    unknown = sorted(kwargs.keys() - known)
    if unknown:
        method = f"{type(config).__name__}.{rllib_method.__name__}()"
        raise UnknownSettingError(
            "; ".join(f"{method} has no setting {name!r}{_close(name, known)}" for name in unknown)
        )
    for name in kwargs.keys() & set(own):
        if kwargs[name] is not NotProvided:
            setattr(config, name, kwargs[name])
    return {name: value for name, value in kwargs.items() if name not in own}
