"""`run_doctor`: every check of a model, the learner's module and a vLLM engine built as a run builds them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from dapo_rllib.doctor.engine_checks import engine_checks
from dapo_rllib.doctor.report import Check
from dapo_rllib.doctor.template_checks import template_checks

#: Room for the longest probe prompt (`engine_checks.PROBE_PROMPTS`) in the doctor's engine.
PROBE_PROMPT_TOKENS = 128


@dataclasses.dataclass(frozen=True)
class DoctorSettings:
    """What the doctor checks with: the model's dtype and a run's sequence lengths (as `DAPOConfig.training`
    names them; the context check's), and the parity sample (`samples` completions of each probe prompt, up to
    `max_tokens` each)."""

    model_dtype: str = "float32"
    max_prompt_length: int = 1024
    max_response_length: int = 1024
    samples: int = 4
    max_tokens: int = 64
    seed: int = 0


def run_doctor(model_path: str, settings: DoctorSettings = DoctorSettings()) -> list[Check]:
    """The checks of `model_path` (a Hugging Face directory, a GGUF file or a packaged model's name), in the
    table's order: the learner's module and a vLLM engine load it as a run would, from its directory."""
    from transformers import AutoConfig, AutoTokenizer

    from dapo_rllib.algorithm.dapo import DAPOConfig
    from dapo_rllib.models.resolve import ensure_model_directory
    from dapo_rllib.rollout.vllm_engine import build_vllm_engine

    directory = ensure_model_directory(str(model_path))
    # The engine holds the probe prompts and their samples: the run's lengths are the context check's.
    config = DAPOConfig().training(
        model_path=str(model_path),
        model_dtype=settings.model_dtype,
        max_prompt_length=PROBE_PROMPT_TOKENS,
        max_response_length=settings.max_tokens,
    )
    config.model_settings.validate()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model_config = AutoConfig.from_pretrained(directory)
    generation_config = _generation_config(directory, model_config)
    checks = template_checks(
        tokenizer, model_config, generation_config, settings.max_prompt_length + settings.max_response_length
    )
    module = _learner_module(config, len(tokenizer))
    llm = build_vllm_engine(config, seed=settings.seed)
    engine_settings: dict[str, Any] = {
        "dtype": settings.model_dtype,
        "seed": settings.seed,
        "samples": settings.samples,
        "max_tokens": settings.max_tokens,
        "bucket_bytes": config.weight_sync_settings.bucket_bytes,
    }
    return engine_checks(module, llm, tokenizer, engine_settings) + checks


def _learner_module(config, vocabulary: int):
    """The learner's RL module of `config`, built outside a learner: its forward pass reads token ids, whatever
    spaces an environment declares, so it is given the vocabulary as both."""
    from gymnasium import spaces

    spec = config.get_default_rl_module_spec()
    spec.observation_space = spec.action_space = spaces.Discrete(vocabulary)
    return spec.build()


def _generation_config(directory: Path, model_config: Any) -> Any:
    from transformers import GenerationConfig

    if (Path(directory) / "generation_config.json").is_file():
        return GenerationConfig.from_pretrained(directory)
    return model_config
