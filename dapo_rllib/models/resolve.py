"""Model resolution: the Hugging Face directory a run's policy is loaded from.

Every process that loads the policy (learners, env runners, `rllib evaluate` / `export`) reads the
directory `policy_model_path` names; the driver makes sure it exists first (`ensure_policy_model`),
before any learner or env runner starts. Sources: a Hugging Face model directory (`model_path`), or
None for the built-in tiny arithmetic model (`dapo_rllib.models.tiny`), built into the cache on first use.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dapo_rllib.models.tiny import default_tiny_model_path, ensure_tiny_model
from dapo_rllib.settings import FeatureSettings, require

MODEL_DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True)
class ModelSettings(FeatureSettings):
    """The policy model (`DAPOConfig.training`).

    Attributes:
        model_path: Local Hugging Face model directory (e.g. a Qwen2.5 checkpoint). None: the
            built-in tiny arithmetic model, built when the algorithm starts if it is not built yet.
        model_dtype: "float32", "bfloat16" or "float16", for the learner and vLLM.
    """

    model_path: str | None = None
    model_dtype: str = "float32"

    @property
    def policy_model_path(self) -> str:
        """The policy's model directory: `model_path`, or the built-in tiny model's when it is None."""
        return str(default_tiny_model_path() if self.model_path is None else self.model_path)

    def validate(self) -> None:
        require(
            self.model_path is None or (Path(self.model_path) / "config.json").is_file(),
            f"model_path={self.model_path!r} is not a Hugging Face model directory (no config.json)",
        )
        require(
            self.model_dtype in MODEL_DTYPES,
            f"model_dtype={self.model_dtype!r}; expected float32, bfloat16 or float16",
        )


def ensure_policy_model(settings: ModelSettings) -> Path:
    """The policy's model directory, made ready: the tiny default is built (then cached) if missing."""
    if settings.model_path is None:
        return ensure_tiny_model()
    return Path(settings.model_path)
