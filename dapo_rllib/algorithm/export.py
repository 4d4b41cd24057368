"""A DAPO checkpoint's policy written as a Hugging Face model directory, with no engine started."""

from __future__ import annotations

from pathlib import Path

from ray.rllib.core.rl_module.rl_module import RLModule

from dapo_rllib.algorithm.checkpoints import check_checkpoint_algorithm, policy_module_path
from dapo_rllib.algorithm.dapo import DAPO
from dapo_rllib.models.rl_module import CausalLMRLModule, export_adapter, export_hf_model


def export_hf_model_from_checkpoint(path: str | Path, out_dir: str | Path, *, merge: bool = True) -> Path:
    """Write a DAPO checkpoint's policy as a Hugging Face model directory (no engine started); a
    policy of LoRA adapters with them merged in, or with ``merge=False`` as a PEFT adapter directory
    (`PeftModel.from_pretrained` over the base model, which its ``adapter_config.json`` names).

    Raises:
        FileNotFoundError: ``path`` is not an algorithm checkpoint.
        ValueError: ``path`` is another algorithm's checkpoint.
    """
    check_checkpoint_algorithm(path, DAPO, "export")
    module = RLModule.from_checkpoint(policy_module_path(path))
    if not isinstance(module, CausalLMRLModule):
        raise ValueError(
            f"the policy in {str(path)!r} is a {type(module).__name__}, not a Hugging Face causal LM; only DAPO checkpoints can be exported"
        )
    dtype, lora = module.model_config.get("dtype", "float32"), module.model_config.get("lora")
    if lora is not None and not merge:
        return export_adapter(module.get_state(), module.model_config["model_path"], out_dir, dtype, lora)
    return export_hf_model(module.get_state(), module.model_config["model_path"], out_dir, dtype, lora=lora)
