"""RLModule around a Hugging Face causal LM: the policy the Learner trains.

The env runners do not run this module: they sample with vLLM and only receive its weights
(`VLLMEnvRunner.set_state`). Here it computes, for a padded batch of (prompt, response) token
sequences, each response token's log-probability under the policy and the entropy of the
policy at that position.

Batch layout (built by `connectors.PadTokenBatch`): prompts left-padded to a common width P,
responses right-padded to R, so every row's response starts at column P. Position ids are
counted over real tokens only, which makes left padding invisible to the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from ray.rllib.core.rl_module.torch import TorchRLModule

from dapo_rllib.columns import Columns
from dapo_rllib.core_algos import entropy_from_logits

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_causal_lm(model_path: str | Path, dtype: str = "float32"):
    """Load a Hugging Face causal LM from a local directory, with a clear error if it is not one."""
    from transformers import AutoModelForCausalLM

    path = Path(model_path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"model_path={str(model_path)!r} is not a Hugging Face model directory (no config.json "
            "there). Pass a local directory written by `save_pretrained`, or leave model_path=None "
            "to use the built-in tiny model."
        )
    if dtype not in _DTYPES:
        raise ValueError(f"model dtype={dtype!r} is not supported; expected one of {sorted(_DTYPES)}")
    return AutoModelForCausalLM.from_pretrained(path, dtype=_DTYPES[dtype])


class CausalLMRLModule(TorchRLModule):
    """Wraps `AutoModelForCausalLM`; `model_config` carries `model_path`, `dtype`, `temperature`.

    `temperature` is the rollout sampling temperature: log-probabilities are those of the
    distribution vLLM sampled from, softmax(logits / temperature).
    """

    def setup(self):
        self.model = load_causal_lm(self.model_config["model_path"], self.model_config.get("dtype", "float32"))
        self.temperature = float(self.model_config.get("temperature", 1.0))

    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        return response_logprobs(self.model, batch, self.temperature)


def response_logprobs(model, batch: dict[str, Any], temperature: float) -> dict[str, torch.Tensor]:
    """Per response token: log-prob of the sampled token and entropy, both [B, R].

    Under softmax(logits / temperature), the distribution the sampler drew from.
    """
    prompt, response = batch[Columns.OBS], batch[Columns.ACTIONS]
    attention_mask = torch.cat([batch[Columns.PROMPT_MASK], batch[Columns.RESPONSE_MASK]], dim=1).long()
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    num_response = response.shape[1]
    # Only the last R+1 positions are needed; the last one predicts past the response.
    out = model(
        input_ids=torch.cat([prompt, response], dim=1),
        attention_mask=attention_mask,
        position_ids=position_ids,
        logits_to_keep=num_response + 1,
        use_cache=False,
    )
    logits = out.logits[:, :-1].float() / temperature
    logp = torch.log_softmax(logits, dim=-1).gather(-1, response.unsqueeze(-1)).squeeze(-1)
    return {Columns.LOGP: logp, Columns.ENTROPY: entropy_from_logits(logits)}


def hf_weights(module_state: dict[str, Any]) -> dict[str, Any]:
    """RLModule state → Hugging Face parameter names (the module keeps the HF model as `model`)."""
    prefix = "model."
    return {k[len(prefix) :]: v for k, v in module_state.items() if k.startswith(prefix)}


def export_hf_model(module_state: dict[str, Any], model_path: str | Path, out_dir: str | Path, dtype: str = "float32") -> Path:
    """Write a trained module's weights as a plain Hugging Face model directory.

    The result has the `save_pretrained` layout (config, safetensors weights, generation config)
    and the tokenizer of `model_path`, so `transformers` and vLLM load it like any other model.
    `module_state` is `CausalLMRLModule.get_state()`: the HF parameters under the `model.` prefix.
    """
    from transformers import AutoTokenizer

    weights = {k: torch.as_tensor(v) for k, v in hf_weights(module_state).items()}
    model = load_causal_lm(model_path, dtype)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    # Tied output embeddings are stored once; anything else missing means the wrong base model.
    missing = [k for k in missing if not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
    if missing or unexpected:
        raise ValueError(f"the trained weights do not fit the model at {model_path}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    out = Path(out_dir)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(str(model_path)).save_pretrained(out)
    return out
