"""Where the tiny models live: the shipped reference build of a recipe version (seed 0), else one directory per
recipe version and seed in the cache, built on first use."""

from __future__ import annotations

import os
from pathlib import Path

from dapo_rllib.models.model_cache import default_cache_dir, ensure_built
from dapo_rllib.models.tiny.build import build_tiny_model
from dapo_rllib.models.tiny.recipes import recipe_for
from dapo_rllib.models.tiny.shipped import shipped_model_path

#: The environment variable that holds the seed of default builds (0 when unset).
SEED_ENV = "DAPO_RLLIB_TINY_SEED"


def default_seed() -> int:
    """The seed of default builds: $DAPO_RLLIB_TINY_SEED, else 0."""
    value = os.environ.get(SEED_ENV, "0")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"${SEED_ENV}={value!r} is not an integer seed") from None


def cached_tiny_model_path(task: str = "arithmetic", seed: int | None = None) -> Path:
    """Where a build of `task`'s recipe goes in the cache: `<cache>/<version>` for seed 0, `<cache>/<version>-seed<N>`
    for another."""
    seed = default_seed() if seed is None else seed
    return default_cache_dir() / (recipe_for(task).version + (f"-seed{seed}" if seed else ""))


def default_tiny_model_path(task: str = "arithmetic", seed: int | None = None) -> Path:
    """The shipped model of `task`'s recipe for seed 0 (`shipped`), else its place in the cache."""
    seed = default_seed() if seed is None else seed
    return (seed == 0 and shipped_model_path(recipe_for(task).version)) or cached_tiny_model_path(task, seed)


def ensure_tiny_model(path: str | os.PathLike | None = None, *, task: str = "arithmetic", **build_kwargs) -> Path:
    """Return the directory of the tiny model for `task`: without `path`, the shipped one or the default build of
    `seed` (build_kwargs; default $DAPO_RLLIB_TINY_SEED or 0), built into the cache first if it is not there yet."""
    build_kwargs.setdefault("seed", default_seed())
    path = Path(path) if path is not None else default_tiny_model_path(task, build_kwargs["seed"])
    return ensure_built(path, lambda into: build_tiny_model(into, task=task, **build_kwargs), "tiny model")
