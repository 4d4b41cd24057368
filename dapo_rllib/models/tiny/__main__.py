"""`python -m dapo_rllib.models.tiny [TASK ...]`: build the default tiny models of these tasks (every task when
none is named) that the cache does not hold yet, with a line for each."""

from __future__ import annotations

import argparse
import time

from dapo_rllib.models.tiny.cache import default_tiny_model_path, ensure_tiny_model
from dapo_rllib.models.tiny.recipes import RECIPES, recipe_for


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dapo_rllib.models.tiny", description=__doc__)
    parser.add_argument("tasks", nargs="*", metavar="TASK", help=f"one of {sorted(RECIPES)}; all when none")
    tasks = parser.parse_args(argv).tasks or list(RECIPES)
    for task in tasks:  # an unknown task is refused before anything is built
        try:
            recipe_for(task)
        except ValueError as error:
            parser.error(str(error))
    for number, task in enumerate(tasks, 1):
        path = default_tiny_model_path(task)
        if (path / "config.json").exists():
            print(f"[tiny model] {number}/{len(tasks)} {task}: {path} (cached)", flush=True)
            continue
        print(f"[tiny model] {number}/{len(tasks)} {task}: building {path.name} ...", flush=True)
        start = time.time()
        ensure_tiny_model(task=task)
        print(f"[tiny model] {number}/{len(tasks)} {task}: built in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
