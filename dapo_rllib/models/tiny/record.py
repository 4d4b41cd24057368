"""A tiny model's record: `BUILD_RECORD` next to its weights (recipe, seed, a fingerprint of the weights,
held-out accuracy, the machine), and the comparison with the builds the tests were checked with."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from dapo_rllib.library_logs import no_transformers_progress_bars
from dapo_rllib.models.tiny.held_out import accuracy_text

#: The build's file of record, written next to the weights.
BUILD_RECORD = "build_record.json"


def weights_fingerprint(model_dir: str | os.PathLike) -> str:
    """sha256 over a model directory's weights: every tensor of its *.safetensors files, in name
    order, as name, dtype, shape and raw bytes. Equal fingerprints: bit-identical weights."""
    from safetensors.torch import load_file

    tensors = {}
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        tensors |= load_file(file)
    if not tensors:
        raise FileNotFoundError(f"no *.safetensors weights in {model_dir}")
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def read_build_record(model_dir: str | os.PathLike) -> dict | None:
    """The `BUILD_RECORD` of a model directory, None if it has none (not built here, or before v2)."""
    try:
        return json.loads((Path(model_dir) / BUILD_RECORD).read_text())
    except (OSError, ValueError):
        return None


#: The builds the test suite was last checked with (seed 0; torch 2.13.0+cpu on an AMD EPYC with
#: AVX-512, kernels pinned to AVX2): version -> the fingerprint and held-out accuracy of its record.
REFERENCE_BUILDS: dict[str, dict[str, Any]] = {
    "tiny-qwen2-arith-v2": {
        "fingerprint": "9b98d9d9349c31037634e083f7e39f89d87a3e4dc2d4dee4b85b838ee21f5381",
        "held_out": {"samples": 4, "avg@4": 0.285, "mixed@4": 0.6839},
    },
    "tiny-qwen2-code-v2": {
        "fingerprint": "f59d8f94f0f34ad07dbdd6db249fce561f7508f909914f226b01240f46c4b99f",
        "held_out": {"samples": 4, "avg@4": 0.0668, "mixed@4": 0.2094},
    },
    "tiny-qwen2-sums-v2": {
        "fingerprint": "267ad9b380e3da81dc751516529bed3e87df8badccf53d534393ddb3b1160e68",
        "held_out": {"samples": 4, "avg@4": 0.2604, "mixed@4": 0.5083},
    },
    # Held-out of the first attempt only.
    "tiny-qwen2-code-repair-v1": {
        "fingerprint": "d4721e8c88bd7ccae1e10324f6b1a9b920b0997e3c4b35cc37e75ab01fe0f815",
        "held_out": {"samples": 4, "avg@4": 0.4123, "mixed@4": 0.822},
    },
    # Held-out of the first turn only: a python call computing the answer, or the answer.
    "tiny-qwen2-tool-arith-v1": {
        "fingerprint": "c36dd732afa696b8c43b6ce98a0e825fdd9ed9677744ed40aa9981e21e4d9d2a",
        "held_out": {"samples": 4, "avg@4": 0.3987, "mixed@4": 0.85},
    },
    # The test recipes' (`TEST_RECIPES`), on 32 held-out problems.
    "tiny-qwen2-code-test-v1": {
        "fingerprint": "0a3c569aa5526f01e2e755cace2be4c06c8cb1b5f65537857db2ea6d3231bc78",
        "held_out": {"samples": 4, "avg@4": 0.0, "mixed@4": 0.0},
    },
    "tiny-qwen2-tool-arith-test-v1": {
        "fingerprint": "a448f7de8bc86b79f49d14fdfb844f900e1bb67e96853e47ee3906dcabf4a8c5",
        "held_out": {"samples": 4, "avg@4": 0.0, "mixed@4": 0.0},
    },
}


def is_reference_build(model_dir: str | os.PathLike) -> bool | None:
    """Whether the model in `model_dir` is the reference build of its recipe (`REFERENCE_BUILDS`);
    None when it has no build record or its version no reference."""
    record = read_build_record(model_dir)
    reference = REFERENCE_BUILDS.get(record["version"]) if record else None
    return None if reference is None else reference["fingerprint"] == record["fingerprint"]


def describe_build(model_dir: str | os.PathLike) -> str:
    """One line on the model in `model_dir`: its fingerprint and held-out accuracy, and whether it
    is the reference build of its recipe, the one the tests were checked with."""
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
        return line + "; no reference build of this version to compare with"
    if match:
        return line + "; the reference build (the model the tests were checked with)"
    reference = REFERENCE_BUILDS[record["version"]]
    return line + (
        f"; NOT the reference build (fingerprint {reference['fingerprint'][:16]}, held-out "
        f"{accuracy_text(reference['held_out'])}) the tests were checked with"
    )


def save_model(model, tokenizer, output_dir: Path, *, record: dict | None = None, started: float | None = None) -> Path:
    """`save_pretrained` model and tokenizer (and `record`, completed with the weights'
    fingerprint, as `BUILD_RECORD`) into a temporary sibling directory, renamed at the end, so a
    crashed or concurrent build never leaves a half-written model behind."""
    from transformers import GenerationConfig

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=output_dir.name + ".", dir=output_dir.parent))
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    with no_transformers_progress_bars():  # its "Writing model shards" bar
        model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if record is not None:
        record = {"fingerprint": weights_fingerprint(tmp)} | record
        if started is not None:
            record["built_with"]["seconds"] = round(time.time() - started, 1)
        (tmp / BUILD_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        print(f"[tiny model] fingerprint {record['fingerprint'][:16]} ({BUILD_RECORD})", flush=True)
    try:
        tmp.rename(output_dir)
    except OSError:  # another process finished first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return output_dir
