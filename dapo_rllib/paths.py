"""Paths a user types on the command line, made absolute from the current directory before any use.

A relative path breaks where it is read elsewhere: pyarrow, under RLlib's checkpoint loading, takes
"runs/x/checkpoint_000002" for a URI without a scheme, and Ray workers need not share the driver's
working directory. So every path argument of the `rllib` command is resolved when it is parsed (an
argparse `type`). URIs (s3://...) pass unchanged. An argument that also takes a name (a packaged model,
a built-in data set such as "arithmetic", env:NAME) keeps what was typed unless it names an existing path.
"""

from __future__ import annotations

from pathlib import Path


def is_uri(path: str | Path) -> bool:
    """A location such as s3://bucket/runs, which pyarrow opens and Path would mangle."""
    return "://" in str(path)


def output_path(text: str) -> str:
    """A path to write: absolute from the current directory (a URI as given)."""
    return text if is_uri(text) else str(Path(text).expanduser().resolve())


def input_path(text: str) -> str:
    """A path to read, or a name: an existing path made absolute; anything else as typed (a name, or a missing
    path, which the command then reports in the user's own words)."""
    return output_path(text) if Path(text).expanduser().exists() else text
