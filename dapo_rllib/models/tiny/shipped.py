"""The reference tiny models, shipped with the package: one directory per recipe version (seed 0) under
`SHIPPED_DIR`, each a `save_pretrained` model with its tokenizer and `BUILD_RECORD`.

A fresh machine builds nothing: the tuned examples, the tests and the smoke runs load these as they are, so a
figure measured with them holds on any machine (up to the kernels that run them). They are what the builder
produced on the project's reference machine; `python -m dapo_rllib.models.tiny --verify TASK` builds a recipe
again and compares its fingerprint with the shipped one, `--ship TASK` replaces the shipped model with a new
build (after a recipe changes, with its version bumped). Other seeds ($DAPO_RLLIB_TINY_SEED) are built into
the cache, as is any recipe whose version ships no model.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from dapo_rllib.models.tiny.held_out import accuracy_text
from dapo_rllib.models.tiny.record import BUILD_RECORD, read_build_record, weights_fingerprint

#: Where the reference builds ship: `<SHIPPED_DIR>/<version>/`.
SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"


def shipped_model_path(version: str) -> Path | None:
    """The shipped model of a recipe version, None when that version ships none."""
    path = SHIPPED_DIR / version
    return path if (path / "config.json").is_file() else None


def shipped_versions() -> list[str]:
    """The recipe versions that ship a model, in name order."""
    return sorted(path.parent.name for path in SHIPPED_DIR.glob(f"*/{BUILD_RECORD}"))


def reference_record(version: str) -> dict | None:
    """The build record of the shipped (reference) build of `version`, None when it ships none."""
    path = shipped_model_path(version)
    return None if path is None else read_build_record(path)


def ship_model(built: Path, version: str) -> Path:
    """Put the model built in `built` in the place of the shipped model of `version` (renamed in whole)."""
    SHIPPED_DIR.mkdir(exist_ok=True)
    target = SHIPPED_DIR / version
    staged = Path(tempfile.mkdtemp(prefix=f".{version}.", dir=SHIPPED_DIR))
    shutil.copytree(built, staged, dirs_exist_ok=True)
    if target.exists():
        shutil.rmtree(target)
    os.rename(staged, target)
    return target


def is_reference_build(model_dir: str | os.PathLike) -> bool | None:
    """Whether the model in `model_dir` is the shipped build of its recipe version; None when it has no build
    record or its version ships no model."""
    record = read_build_record(model_dir)
    reference = reference_record(record["version"]) if record else None
    return None if reference is None else reference["fingerprint"] == record["fingerprint"]


def describe_build(model_dir: str | os.PathLike) -> str:
    """One line on the model in `model_dir`: its fingerprint and held-out accuracy, and whether it is the shipped
    build of its recipe, the one the tests and the docs' figures were checked with."""
    record = read_build_record(model_dir)
    if record is None:
        fingerprint = weights_fingerprint(model_dir)[:16]
        return f"{model_dir}: fingerprint {fingerprint}, no {BUILD_RECORD} (not built by dapo_rllib.models.tiny)"
    built = record["built_with"]
    line = (
        f"{model_dir}: {record['version']} seed {record['seed']}, fingerprint {record['fingerprint'][:16]}, "
        f"held-out {accuracy_text(record['held_out'])}; built with torch {built['torch']}, "
        f"{built['cpu_capability']} kernels, {built['threads']} thread(s) on {built['cpu']}"
    )
    match = is_reference_build(model_dir)
    if match is None:
        return line + "; no shipped build of this version to compare with"
    if match:
        return line + "; the shipped build (the model the tests were checked with)"
    reference = reference_record(record["version"])
    return line + (
        f"; NOT the shipped build (fingerprint {reference['fingerprint'][:16]}, held-out "
        f"{accuracy_text(reference['held_out'])}) the tests were checked with"
    )
