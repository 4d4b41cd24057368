"""A tiny model's record: `BUILD_RECORD` next to its weights (recipe, seed, a fingerprint of the weights,
held-out accuracy, the machine), and the model saved with it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from dapo_rllib.library_logs import no_transformers_progress_bars

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
