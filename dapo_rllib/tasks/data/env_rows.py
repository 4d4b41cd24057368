"""An environment's problems as a dataset file, and the environment a dataset file names.

`rllib data convert env:NAME OUT --env-config JSON` builds the registered environment NAME with that config
and writes each of its problems as a DAPO-format row (the env's `problem_row(index)`), adding
`extra_info.env = NAME`. The environment reads such a file back as a fixed set (its `dataset` setting), and
`rllib evaluate --data OUT` evaluates with the environment the rows name: the same prompts, scored by the
same verifier, for every tool that reads the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dapo_rllib.tasks.data.datasets import first_row
from dapo_rllib.tasks.env_factory import build_env

#: How `rllib data convert` names an environment as its input: "env:<registered name>".
ENV_SOURCE_PREFIX = "env:"
#: The `extra_info` key naming the environment that reads a row back.
ENV_KEY = "env"


def is_env_source(source: str | os.PathLike[str]) -> bool:
    return str(source).startswith(ENV_SOURCE_PREFIX)


def write_env_rows(source: str, env_config: dict[str, Any], out: str | os.PathLike[str]) -> tuple[Path, int]:
    """Write the problems of the environment `source` ("env:NAME") built with `env_config` to the parquet
    file `out`; returns the path and the number of rows.

    Raises:
        ValueError: NAME is not a registered environment, or one that cannot write its problems as rows.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = str(source).removeprefix(ENV_SOURCE_PREFIX)
    env = build_env(name, env_config, worker_index=0, num_workers=0)
    if not hasattr(env, "problem_row"):
        raise ValueError(
            f"environment {name!r} ({type(env).__name__}) cannot write its problems as rows: it has no "
            "problem_row(index) method (dapo_reasoning_gym has one)"
        )
    rows = [env.problem_row(i) for i in range(env.num_problems)]
    for row in rows:
        row["extra_info"] = {**row["extra_info"], ENV_KEY: name}
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path, len(rows)


def env_of_data_file(path: str | os.PathLike[str]) -> str | None:
    """The environment a dataset file's rows name (`extra_info.env` of its first row); None where they name
    none, or `path` is not a readable file."""
    row = first_row(path)
    extra = None if row is None else row.get("extra_info")
    return extra.get(ENV_KEY) if isinstance(extra, dict) else None
