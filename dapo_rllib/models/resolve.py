"""Model resolution: the Hugging Face directory a run's policy is loaded from.

Every process that loads the policy (learners, env runners, `rllib evaluate` / `export`) reads the
directory `policy_model_path` names; the driver makes sure it exists first (`ensure_policy_model`),
before any learner or env runner starts. Sources (`model_path`):

- a Hugging Face model directory;
- a GGUF file (`dapo_rllib.models.gguf`), converted once into a cached Hugging Face directory;
- the name of a model an installed package ships (`dapo_rllib.models.packaged`), e.g.
  "smollm2-135m-instruct": its GGUF file, converted the same way;
- None: the built-in tiny arithmetic model (`dapo_rllib.models.tiny`), built into the cache on first use.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dapo_rllib.models.gguf import check_gguf_file, converted_gguf_dir, ensure_converted_gguf, is_gguf_path
from dapo_rllib.models.packaged import PACKAGED_MODELS, is_packaged_model, packaged_model_file
from dapo_rllib.models.tiny import default_tiny_model_path, ensure_tiny_model
from dapo_rllib.settings import FeatureSettings, require

MODEL_DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True)
class ModelSettings(FeatureSettings):
    """The policy model (`DAPOConfig.training`).

    Attributes:
        model_path: A local Hugging Face model directory (e.g. a Qwen2.5 checkpoint), a GGUF file, or
            the name of a model an installed package ships (`PACKAGED_MODELS`: "smollm2-135m-instruct").
            A GGUF file is converted into a cached directory when the algorithm starts. None: the
            built-in tiny arithmetic model, built when the algorithm starts if it is not built yet.
        model_dtype: "float32", "bfloat16" or "float16", for the learner and vLLM.
        doctor_at_start: Run `rllib doctor`'s checks of the model (`dapo_rllib.doctor`) in the driver before
            the run starts, at the run's dtype and lengths, and refuse to start if one fails. Costs a vLLM engine
            and a copy of the model in the driver for about a minute (135M parameters on 2 CPU cores).
    """

    model_path: str | None = None
    model_dtype: str = "float32"
    doctor_at_start: bool = False

    @property
    def policy_model_path(self) -> str:
        """The policy's model directory: `model_path`'s (`model_directory`), or the built-in tiny model's when
        it is None."""
        return str(default_tiny_model_path() if self.model_path is None else model_directory(self.model_path))

    def validate(self) -> None:
        if self.model_path is not None:
            check_model_source(self.model_path)
        require(
            self.model_dtype in MODEL_DTYPES,
            f"model_dtype={self.model_dtype!r}; expected float32, bfloat16 or float16",
        )


def check_model_source(model_path: str) -> None:
    """Raise a ValueError naming `model_path` unless it is a Hugging Face model directory, a readable GGUF file
    or an installed packaged model."""
    model_path = str(model_path)
    gguf_file = model_gguf_file(model_path)
    if gguf_file is not None:
        check_gguf_file(gguf_file)
        return
    require(
        (Path(model_path) / "config.json").is_file(),
        f"model_path={model_path!r} is not a Hugging Face model directory (no config.json), a GGUF file "
        f"(*.gguf) or a packaged model ({', '.join(sorted(PACKAGED_MODELS))})",
    )


def model_gguf_file(model_path: str) -> Path | None:
    """The GGUF file `model_path` names (itself, or the file its package ships); None for a directory."""
    if is_packaged_model(model_path):
        return packaged_model_file(model_path)
    if is_gguf_path(model_path):
        return Path(model_path)
    return None


def is_model_file_source(model_path: str) -> bool:
    """Whether `model_path` is a model file that is converted into a directory: a GGUF file or a packaged model."""
    return is_packaged_model(model_path) or is_gguf_path(model_path)


def model_directory(model_path: str) -> Path:
    """The Hugging Face directory `model_path` is loaded from: itself, or the cached conversion of its GGUF file
    (which `ensure_model_directory` makes)."""
    gguf_file = model_gguf_file(model_path)
    return Path(model_path) if gguf_file is None else converted_gguf_dir(gguf_file)


def ensure_model_directory(model_path: str) -> Path:
    """`model_directory(model_path)`, made first where it is a GGUF file's conversion not in the cache yet."""
    check_model_source(model_path)
    gguf_file = model_gguf_file(model_path)
    return Path(model_path) if gguf_file is None else ensure_converted_gguf(gguf_file)


def ensure_policy_model(settings: ModelSettings) -> Path:
    """The policy's model directory, made ready: the tiny default built, a GGUF file converted (then cached)."""
    if settings.model_path is None:
        return ensure_tiny_model()
    return ensure_model_directory(settings.model_path)
