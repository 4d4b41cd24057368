"""GGUF model files (llama.cpp's format) as policies: converted once into a cached Hugging Face directory.

transformers loads a GGUF file of any architecture its GGUF loader maps (`gguf_file=`), dequantizing the
weights, and builds the tokenizer with its chat template from the file's metadata. The loaded model keeps a
GGUF quantization config that `save_pretrained` refuses, so the conversion builds a plain model of the same
config and loads the dequantized state dict into it. The directory, `<cache>/gguf/<file stem>-<sha256[:16]>`,
is what the learners and vLLM then load; its `CONVERSION_RECORD` names the source file, its size and hash,
and the conversion's time and library versions.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from dapo_rllib.library_logs import no_transformers_progress_bars
from dapo_rllib.models.model_cache import default_cache_dir, ensure_built

GGUF_SUFFIX = ".gguf"
CONVERSION_RECORD = "conversion.json"


def is_gguf_path(model_path: str | Path) -> bool:
    """Whether `model_path` names a GGUF file (by its suffix; `check_gguf_file` reads it)."""
    return str(model_path).lower().endswith(GGUF_SUFFIX)


def check_gguf_file(path: str | Path) -> str:
    """The architecture of the GGUF file at `path`, read from its header and tensor table.

    Raises:
        ValueError: The file is missing, is not GGUF, or is truncated or corrupt (naming the file).
    """
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ValueError(
            f"reading the GGUF file {path} needs the gguf package: pip install 'dapo-rllib[models]'"
        ) from None
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"model_path={str(path)!r}: no such GGUF file")
    try:
        reader = GGUFReader(path)
        field = reader.fields["general.architecture"]
        return bytes(field.parts[field.data[0]]).decode()
    except Exception as error:  # the reader raises ValueError, KeyError, IndexError ... on bad bytes
        raise ValueError(
            f"{path} is not a readable GGUF model file ({type(error).__name__}: {error}); expected a complete "
            "GGUF file, as llama.cpp writes them, with a general.architecture field"
        ) from None


@functools.lru_cache(maxsize=16)
def _sha256(path: Path, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file, hashed once per process for each (path, size, modification time)."""
    path = Path(path).resolve()
    stat = path.stat()
    return _sha256(path, stat.st_size, stat.st_mtime_ns)


def converted_gguf_dir(path: str | Path) -> Path:
    """Where the conversion of the GGUF file at `path` lives in the cache (it may not exist yet)."""
    path = Path(path)
    return default_cache_dir() / "gguf" / f"{path.name[: -len(GGUF_SUFFIX)]}-{file_sha256(path)[:16]}"


def ensure_converted_gguf(path: str | Path) -> Path:
    """The Hugging Face directory of the GGUF file at `path`, converted first (`convert_gguf`, in a child
    process) if the cache lacks it."""
    check_gguf_file(path)
    return ensure_built(converted_gguf_dir(path), lambda into: _convert_in_child(path, into), "GGUF model")


def _convert_in_child(path: str | Path, output_dir: Path) -> None:
    """`convert_gguf` in a child process: the lines libraries print during a conversion (transformers' bar over
    the tensors, DeepSpeed's accelerator guess) stay out of the console, and the two copies of the model it holds
    go with the child. A ValueError of the conversion is raised here with its message."""
    env = os.environ | {"TQDM_DISABLE": "1", "DS_ACCELERATOR": "cpu", "DAPO_RLLIB_NO_REGISTRATION": "1"}
    code = "import sys; from dapo_rllib.models.gguf import _child_main; _child_main(*sys.argv[1:])"
    with tempfile.TemporaryDirectory(prefix="gguf_conversion_") as scratch:
        error_file = Path(scratch) / "error.txt"
        sys.stdout.flush()
        done = subprocess.run([sys.executable, "-c", code, str(path), str(output_dir), str(error_file)], env=env)
        if done.returncode != 0:
            if error_file.exists():
                raise ValueError(error_file.read_text())
            raise RuntimeError(f"converting {path} failed (exit status {done.returncode}); its output above says why")


def _child_main(path: str, output_dir: str, error_file: str) -> None:
    try:
        convert_gguf(path, output_dir)
    except ValueError as error:
        Path(error_file).write_text(str(error))
        sys.exit(3)


def convert_gguf(path: str | Path, output_dir: str | Path) -> Path:
    """Convert the GGUF file at `path` into a float32 Hugging Face directory `output_dir`, written whole or not
    at all (a sibling directory renamed at the end), with its `CONVERSION_RECORD`.

    Raises:
        ValueError: The file is not a readable GGUF file, or transformers cannot load its architecture.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    path, output_dir = Path(path).resolve(), Path(output_dir)
    architecture = check_gguf_file(path)
    start = time.time()
    print(f"[GGUF model] converting {path} ({architecture}) into {output_dir} ...", flush=True)
    try:
        with no_transformers_progress_bars():
            tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
            loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    except ValueError as error:
        if "is not supported yet" not in str(error):
            raise
        raise ValueError(
            f"{path}: transformers {version('transformers')} cannot convert GGUF files of architecture "
            f"{architecture!r}; it converts {sorted(GGUF_SUPPORTED_ARCHITECTURES)}"
        ) from None
    config = loaded.config
    del config.quantization_config  # what makes save_pretrained refuse the loaded model
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = GenerationConfig.from_model_config(config)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=output_dir.name + ".", dir=output_dir.parent))
    try:
        with no_transformers_progress_bars():
            model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        record = {
            "source": str(path),
            "size_bytes": path.stat().st_size,
            "sha256": file_sha256(path),
            "architecture": architecture,
            "parameters": sum(p.numel() for p in model.parameters()),
            "seconds": round(time.time() - start, 1),
            "converted_with": {name: version(name) for name in ("transformers", "gguf", "torch")},
        }
        (staging / CONVERSION_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        staging.rename(output_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(
        f"[GGUF model] {record['parameters'] / 1e6:.1f}M parameters in {record['seconds']:.0f} s: {output_dir}",
        flush=True,
    )
    return output_dir
