"""The cache of models made on this machine (built tiny models, converted GGUF files): where it is, and
building an entry once across processes."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def default_cache_dir() -> Path:
    """Where built models live: $DAPO_RLLIB_CACHE, else ~/.cache/dapo_rllib."""
    return Path(os.environ.get("DAPO_RLLIB_CACHE", Path.home() / ".cache" / "dapo_rllib"))


def ensure_built(path: Path, build: Callable[[Path], object], what: str) -> Path:
    """`path`, built by `build(path)` first unless it already holds a model (a config.json). Processes that need
    the same model at once (Tune trials, `make test`'s builder and the tests) build it once: the others wait on
    its lock, then find it built. `build` must write `path` whole or not at all (a sibling renamed at the end)."""
    if not (path / "config.json").exists():
        with build_lock(path, what):
            if not (path / "config.json").exists():  # not built while this process waited
                build(path)
    return path


@contextmanager
def build_lock(path: Path, what: str) -> Iterator[None]:
    """Hold the build lock of `path` (a file beside it); `what` names the model in the line a waiter prints
    ("tiny model", "GGUF model")."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"[{what}] waiting for another process to build {path}", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # the lock goes with the file's closing
