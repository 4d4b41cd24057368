"""Working with saved algorithm checkpoints: their config, their policy, evaluation, export."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Callable

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, COMPONENT_RL_MODULE, DEFAULT_MODULE_ID


def _checked(path: str | Path) -> Path:
    path = Path(path)
    if not (path / "class_and_ctor_args.pkl").is_file():
        raise FileNotFoundError(
            f"{str(path)!r} is not an RLlib algorithm checkpoint (no class_and_ctor_args.pkl); "
            "expected a directory written by Algorithm.save_to_path, e.g. runs/<run>/checkpoint_000040"
        )
    return path


def checkpoint_config(path: str | Path) -> AlgorithmConfig:
    """The AlgorithmConfig a checkpoint was saved with."""
    with open(_checked(path) / "class_and_ctor_args.pkl", "rb") as f:
        ctor = pickle.load(f)
    (config_state,), _ = ctor["ctor_args_and_kwargs"]
    return AlgorithmConfig.from_state(config_state)


def build_with_policy(path: str | Path, adjust: Callable[[AlgorithmConfig], Any] | None = None):
    """Build the checkpoint's algorithm (config changed by `adjust`) with its trained policy.

    Only the learner (weights, optimizer) is restored, so the config may differ from the
    saved one in anything but the model: another evaluation dataset, fewer env runners, ...
    """
    path = _checked(path)
    config = checkpoint_config(path)
    if adjust is not None:
        adjust(config)
    algo = config.build_algo()
    algo.restore_from_path(path / COMPONENT_LEARNER_GROUP, component=COMPONENT_LEARNER_GROUP)
    return algo


def policy_module_path(path: str | Path, module_id: str = DEFAULT_MODULE_ID) -> Path:
    """Where a checkpoint keeps the state of one RLModule."""
    return _checked(path) / COMPONENT_LEARNER_GROUP / COMPONENT_LEARNER / COMPONENT_RL_MODULE / module_id


def export_hf_model_from_checkpoint(path: str | Path, out_dir: str | Path) -> Path:
    """Write a DAPO checkpoint's policy as a Hugging Face model directory (no engine started)."""
    from ray.rllib.core.rl_module.rl_module import RLModule

    from dapo_rllib.rl_module import CausalLMRLModule, export_hf_model

    module = RLModule.from_checkpoint(policy_module_path(path))
    if not isinstance(module, CausalLMRLModule):
        raise ValueError(f"the policy in {str(path)!r} is a {type(module).__name__}, not a Hugging Face causal LM; only DAPO checkpoints can be exported")
    return export_hf_model(module.get_state(), module.model_config["model_path"], out_dir, module.model_config.get("dtype", "float32"))
