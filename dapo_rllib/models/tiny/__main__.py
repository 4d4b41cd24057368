"""`python -m dapo_rllib.models.tiny [TASK ...]`: the default tiny models of these tasks (every task when none is
named), a line each: shipped with the package, in the cache, or built into it.

`--verify` builds each task's recipe again (seed 0, into a temporary directory) and compares the fingerprint of its
weights with the shipped build's: a mismatch exits non-zero. `--ship` builds each and puts it in the place of the
shipped model (for a recipe whose version changed). $DAPO_RLLIB_TINY_RECIPES=test picks the test recipes."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from dapo_rllib.models.model_cache import default_cache_dir
from dapo_rllib.models.tiny.build import build_tiny_model
from dapo_rllib.models.tiny.cache import default_tiny_model_path, ensure_tiny_model
from dapo_rllib.models.tiny.held_out import accuracy_text
from dapo_rllib.models.tiny.recipes import RECIPES, recipe_for
from dapo_rllib.models.tiny.record import read_build_record
from dapo_rllib.models.tiny.shipped import reference_record, ship_model, shipped_model_path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dapo_rllib.models.tiny", description=__doc__)
    parser.add_argument("tasks", nargs="*", metavar="TASK", help=f"one of {sorted(RECIPES)}; all when none")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--verify", action="store_true", help="build again and compare with the shipped build")
    action.add_argument("--ship", action="store_true", help="build and replace the shipped build")
    args = parser.parse_args(argv)
    tasks = args.tasks or list(RECIPES)
    for task in tasks:  # an unknown task is refused before anything is built
        try:
            recipe_for(task)
        except ValueError as error:
            parser.error(str(error))
    if args.verify or args.ship:
        mismatches = [
            task for number, task in enumerate(tasks, 1) if not _rebuild(task, f"{number}/{len(tasks)}", args.ship)
        ]
        sys.exit(1 if mismatches else 0)
    for number, task in enumerate(tasks, 1):
        path = default_tiny_model_path(task)
        if (path / "config.json").exists():
            where = "shipped" if path == shipped_model_path(recipe_for(task).version) else "cached"
            print(f"[tiny model] {number}/{len(tasks)} {task}: {path} ({where})", flush=True)
            continue
        print(f"[tiny model] {number}/{len(tasks)} {task}: building {path.name} ...", flush=True)
        start = time.time()
        ensure_tiny_model(task=task)
        print(f"[tiny model] {number}/{len(tasks)} {task}: built in {time.time() - start:.0f} s", flush=True)


def _rebuild(task: str, counter: str, ship: bool) -> bool:
    """Build `task`'s recipe (seed 0) into a temporary directory; ship it, or compare it with the shipped build.
    True unless it differs from the shipped build."""
    version = recipe_for(task).version
    default_cache_dir().mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{version}.rebuild.", dir=default_cache_dir()))
    try:
        print(f"[tiny model] {counter} {task}: building {version} ...", flush=True)
        built = read_build_record(build_tiny_model(scratch / version, task=task, seed=0))
        if ship:
            print(f"[tiny model] {counter} {task}: shipped as {ship_model(scratch / version, version)}", flush=True)
            return True
        reference = reference_record(version)
        if reference is None:
            print(f"[tiny model] {counter} {task}: {version} ships no model to compare with", flush=True)
            return False
        same = built["fingerprint"] == reference["fingerprint"]
        verdict = (
            "matches the shipped build"
            if same
            else f"DIFFERS from the shipped build (fingerprint {reference['fingerprint'][:16]}, held-out "
            f"{accuracy_text(reference['held_out'])})"
        )
        print(
            f"[tiny model] {counter} {task}: fingerprint {built['fingerprint'][:16]}, held-out "
            f"{accuracy_text(built['held_out'])}: {verdict}",
            flush=True,
        )
        return same
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
