"""`run_doctor`: every check of a run's model, with the learner's module and a vLLM engine built as the run builds
them; `check_before_run`, the same at a run's start (`doctor_at_start`)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from transformers import AutoConfig, AutoTokenizer, GenerationConfig

from dapo_rllib.doctor.data_checks import DataProbe, RunSampling, data_checks
from dapo_rllib.doctor.engine_checks import engine_checks
from dapo_rllib.doctor.report import Check, format_table
from dapo_rllib.doctor.template_checks import template_checks
from dapo_rllib.models.resolve import ModelSettings, ensure_model_directory
from dapo_rllib.rollout.vllm_engine import EngineSettings, SamplerSettings, build_vllm_engine

logger = logging.getLogger(__name__)

#: Room for the longest probe prompt (`engine_checks.PROBE_PROMPTS`) in the doctor's engine.
PROBE_PROMPT_TOKENS = 128


@dataclasses.dataclass(frozen=True)
class DoctorSettings:
    """The parity sample: `samples` completions of each probe prompt, up to `max_tokens` each, seeded."""

    samples: int = 4
    max_tokens: int = 64
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class CheckedRun:
    """What the doctor reads of a run: its model, how it samples, the weight sync's bucket size and its seed."""

    model: ModelSettings
    sampler: SamplerSettings
    bucket_bytes: int
    seed: int

    @classmethod
    def from_config(cls, config) -> CheckedRun:
        """The run `config`'s (a `DAPOConfig`): the one place the doctor reads the algorithm's settings."""
        return cls(
            config.model_settings, config.sampler_settings, config.weight_sync_settings.bucket_bytes, config.seed or 0
        )

    @property
    def model_name(self) -> str:
        """The model as the run names it: its `model_path`, or the directory it resolves to."""
        return self.model.model_path or self.model.policy_model_path


def run_doctor(config, settings: DoctorSettings = DoctorSettings(), data: DataProbe | None = None) -> list[Check]:
    """The checks of the model of `config` (a `DAPOConfig`: its model, dtype and sequence lengths), in the
    table's order: the learner's module and a vLLM engine load it as the run would, from its directory. With
    `data`, the run's problems sampled and scored too (`data_checks`)."""
    run = CheckedRun.from_config(config)
    run.model.validate()
    model, sampler = run.model, run.sampler
    directory = ensure_model_directory(model.model_path) if model.model_path else Path(model.policy_model_path)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model_config = AutoConfig.from_pretrained(directory)
    generation_config = _generation_config(directory, model_config)
    checks = template_checks(tokenizer, model_config, generation_config, sampler.longest_sequence)
    # The engine holds the probe prompts and their samples; with `data`, the run's prompts and responses too.
    prompt, response = (sampler.max_prompt_length, sampler.max_response_length) if data is not None else (0, 0)
    probe = config.copy(copy_frozen=False).training(
        max_prompt_length=max(PROBE_PROMPT_TOKENS, prompt), max_response_length=max(settings.max_tokens, response)
    )
    module = _learner_module(probe, len(tokenizer))
    llm = build_vllm_engine(EngineSettings.from_config(probe), seed=settings.seed)
    engine_settings: dict[str, Any] = {
        "dtype": model.model_dtype,
        "seed": settings.seed,
        "temperature": sampler.temperature,
        "samples": settings.samples,
        "max_tokens": settings.max_tokens,
        "bucket_bytes": run.bucket_bytes,
    }
    # Sampled before the parity checks move the weights: the data check is of the model as it is.
    sampled = [] if data is None else data_checks(llm, tokenizer, RunSampling.from_config(config), data)
    return engine_checks(module, llm, tokenizer, engine_settings) + checks + sampled


def check_before_run(config) -> None:
    """`run_doctor` at a run's settings, the table logged; a failed check stops the run before it starts.

    Raises:
        ValueError: A check failed (the message names each with its detail).
    """
    run = CheckedRun.from_config(config)
    checks = run_doctor(config, DoctorSettings(seed=run.seed))
    logger.info(format_table(run.model_name, checks))
    failed = [check for check in checks if check.failed]
    if failed:
        raise ValueError(
            f"doctor_at_start: {len(failed)} check(s) of {run.model_name} failed: "
            + "; ".join(f"{check.name}: {check.detail}" for check in failed)
        )


def _learner_module(config, vocabulary: int):
    """The learner's RL module of `config`, built outside a learner: its forward pass reads token ids, whatever
    spaces an environment declares, so it is given the vocabulary as both."""
    from gymnasium import spaces

    spec = config.get_default_rl_module_spec()
    spec.observation_space = spec.action_space = spaces.Discrete(vocabulary)
    return spec.build()


def _generation_config(directory: Path, model_config: Any) -> Any:
    if (Path(directory) / "generation_config.json").is_file():
        return GenerationConfig.from_pretrained(directory)
    return model_config
