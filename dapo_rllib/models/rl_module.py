"""RLModule around a Hugging Face causal LM: the policy the Learner trains.

The env runners do not run this module: they sample with vLLM, which receives its weights
through the streamed sync (`dapo_rllib.rollout.weight_sync`), never through RLlib's state sync. Here it computes, for a padded batch of (prompt, response) token
sequences, each response token's log-probability under the policy and the entropy of the
policy at that position.

Batch layout (built by `padded_sequences`, which the learner connector `PadTokenBatch` and the doctor
call): prompts left-padded to a common width P, responses right-padded to R, so every row's response
starts at column P. Position ids are counted over real tokens only, which makes left padding invisible
to the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.annotations import override
from ray.rllib.utils.numpy import convert_to_numpy
from torch.utils.checkpoint import checkpoint

from dapo_rllib.columns import Columns
from dapo_rllib.library_logs import no_transformers_progress_bars
from dapo_rllib.models.lora import LoraSettings, apply_lora

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_causal_lm(model_path: str | Path, dtype: str = "float32", attn_implementation: str | None = None):
    """Load a Hugging Face causal LM from a local directory, with a clear error if it is not one.
    `attn_implementation`: the attention kernel (None: transformers' default)."""
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
    return AutoModelForCausalLM.from_pretrained(path, dtype=_DTYPES[dtype], attn_implementation=attn_implementation)


class CausalLMRLModule(TorchRLModule, InferenceOnlyAPI):
    """Wraps `AutoModelForCausalLM`; `model_config` carries `model_path`, `dtype`, `temperature`,
    `gradient_checkpointing`, `attn_implementation` (None: transformers' default) and `lora` (the
    adapter settings, or None: every weight trains).

    `temperature` is the rollout sampling temperature: log-probabilities are those of the
    distribution vLLM sampled from, softmax(logits / temperature).
    """

    @override(TorchRLModule)
    def setup(self):
        dtype = self.model_config.get("dtype", "float32")
        # The weights AdamW updates stay float32: a step of ~lr is below bfloat16's resolution for
        # most weights. Full fine-tuning keeps the model in float32 and computes in `dtype`
        # (autocast); with LoRA the frozen base is held in `dtype` and PEFT keeps the adapters in
        # float32. (DeepSpeed's bf16 mode casts the model itself and keeps float32 master weights.)
        self.compute_dtype = _DTYPES[dtype] if dtype != "float32" and self.lora is None else None
        with no_transformers_progress_bars():  # a quiet start (dapo_rllib.library_logs)
            self.model = load_causal_lm(
                self.model_config["model_path"],
                "float32" if self.compute_dtype else dtype,
                self.model_config.get("attn_implementation"),
            )
        if self.lora is not None:  # adapters on a frozen base (dapo_rllib.models.lora)
            self.model = apply_lora(self.model, self.lora)
        self.temperature = float(self.model_config.get("temperature", 1.0))
        self.forward_model = None  # see run_forward_with
        if self.model_config.get("gradient_checkpointing", False):
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            # Hugging Face checkpoints only in training mode (the model's dropout settings then
            # apply; Qwen2.5's are 0).
            self.model.train()

    @property
    def lora(self) -> LoraSettings | None:
        """The adapter settings when the model trains LoRA adapters, else None."""
        return self.model_config.get("lora")

    @override(TorchRLModule)
    def get_state(self, components=None, *, not_components=None, inference_only: bool = False, **kwargs):
        """The module's weights as numpy arrays; with LoRA the adapters only: the frozen base is the
        model at `model_path`, and a checkpoint need not hold a second copy of it. bfloat16 weights
        come as float32 (numpy has no bfloat16; the widening is exact, `set_state` narrows back)."""
        # Inference-only: nothing (`get_non_inference_attributes`: all of it is).
        state = {} if inference_only and not self.inference_only else self.state_dict()
        if self.lora:
            state = {key: value for key, value in state.items() if is_adapter_key(key)}
        return convert_to_numpy(
            {key: value.float() if value.dtype == torch.bfloat16 else value for key, value in state.items()}
        )

    @override(TorchRLModule)
    def set_state(self, state) -> None:
        """Load weights, refusing a state of the other kind (adapters into a full fine-tuning module, or
        the reverse): RLlib's own `set_state` would skip what does not fit without a word."""
        if state and any(map(is_adapter_key, state)) != bool(self.lora):
            held = "LoRA adapters" if self.lora is None else "every weight of a full fine-tuning run"
            wanted = f"LoRA adapters (lora_rank={self.lora.rank})" if self.lora else "every weight (lora_rank=None)"
            raise ValueError(
                f"the state to load holds {held}, but this policy trains {wanted}: resume with the "
                "checkpoint's LoRA settings (lora_rank and the rest), or start a new run"
            )
        super().set_state(state)

    @override(InferenceOnlyAPI)
    def get_non_inference_attributes(self) -> list[str]:
        """All of it: the env runners infer with vLLM, whose engines take the weights through the
        streamed sync. So the inference-only state RLlib sends in `EnvRunnerGroup.sync_weights`
        (at `evaluate()`, `set_state`, restores) is empty: nothing crosses the driver twice."""
        return ["model"]

    @override(TorchRLModule)
    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        with self.autocast(batch):
            return response_logprobs(
                self.model if self.forward_model is None else self.forward_model, batch, self.temperature
            )

    def autocast(self, batch: dict[str, Any]):
        """The context a forward pass on ``batch`` runs in: computing in `model_dtype` where the
        weights are float32 masters (see `setup`), else a no-op."""
        device = batch[Columns.OBS].device.type
        return torch.autocast(device, dtype=self.compute_dtype, enabled=self.compute_dtype is not None)

    def run_forward_with(self, wrapper: torch.nn.Module) -> None:
        """Run forward passes through `wrapper` (e.g. a DeepSpeed engine around `self.model`),
        which must take the model's arguments. Kept out of the module's state and parameters:
        `self.model` stays the Hugging Face model that checkpoints and weight sync read."""
        object.__setattr__(self, "forward_model", wrapper)


# Logits of at most this many elements exist at once (64 MiB in float32, ~110 response tokens at
# Qwen2.5's vocabulary): a quarter of 2^26's memory peak at the same speed (docs/scaling/lora.md).
LOGITS_CHUNK_ELEMENTS = 2**24


def padded_sequences(sequences, pad_token_id: int) -> dict[str, np.ndarray]:
    """The batch columns of `(prompt ids, response ids, model mask, rollout log-probs)` sequences
    (`connectors.episode_sequence`'s): prompts left-padded, responses (and their masks and log-probs)
    right-padded, the layout `response_logprobs` reads."""
    width_p = max(len(prompt) for prompt, *_ in sequences)
    width_r = max(len(response) for _, response, _, _ in sequences)
    n = len(sequences)
    prompt_ids = np.full((n, width_p), pad_token_id, dtype=np.int64)
    prompt_mask = np.zeros((n, width_p), dtype=np.float32)
    response_ids = np.full((n, width_r), pad_token_id, dtype=np.int64)
    response_mask = np.zeros((n, width_r), dtype=np.float32)
    loss_mask = np.zeros((n, width_r), dtype=np.float32)
    rollout_logp = np.zeros((n, width_r), dtype=np.float32)
    for i, (p, r, model_mask, logp) in enumerate(sequences):
        prompt_ids[i, width_p - len(p) :] = p
        prompt_mask[i, width_p - len(p) :] = 1.0
        response_ids[i, : len(r)] = r
        response_mask[i, : len(r)] = 1.0
        loss_mask[i, : len(r)] = model_mask
        rollout_logp[i, : len(r)] = logp
    return {
        Columns.OBS: prompt_ids,
        Columns.PROMPT_MASK: prompt_mask,
        Columns.ACTIONS: response_ids,
        Columns.RESPONSE_MASK: response_mask,
        Columns.LOSS_MASK: loss_mask,
        Columns.ROLLOUT_LOGP: rollout_logp,
    }


def response_logprobs(model, batch: dict[str, Any], temperature: float) -> dict[str, torch.Tensor]:
    """Per response token: log-prob of the sampled token and entropy, both [B, R].

    Under softmax(logits / temperature), the distribution the sampler drew from. Memory-lean:
    the decoder runs once, and the vocabulary projection only on real response tokens, in
    chunks of `LOGITS_CHUNK_ELEMENTS` logits that are recomputed in the backward pass rather
    than kept; no [tokens x vocab] log-softmax is materialised. The entropy is a metric and
    keeps no graph. Padded positions get 0 in both outputs.
    """
    prompt, response = batch[Columns.OBS], batch[Columns.ACTIONS]
    response_mask = batch[Columns.RESPONSE_MASK].bool()
    attention_mask = torch.cat([batch[Columns.PROMPT_MASK], batch[Columns.RESPONSE_MASK]], dim=1).long()
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    # The model's own forward (a DeepSpeed engine must run it for its ZeRO bookkeeping), asked
    # for the final (normed) hidden states and the logits of no position (an empty index): even
    # one position's logits cost a ~2 GB transient at Qwen2.5's vocabulary in bfloat16 on CPU.
    hidden = model(
        input_ids=torch.cat([prompt, response], dim=1),
        attention_mask=attention_mask,
        position_ids=position_ids,
        logits_to_keep=torch.empty(0, dtype=torch.long, device=prompt.device),
        output_hidden_states=True,
        use_cache=False,
    ).hidden_states[-1]
    # The hidden state at position t predicts token t + 1: response token j is predicted at
    # column P - 1 + j.
    width_p, width_r = prompt.shape[1], response.shape[1]
    hidden = hidden[:, width_p - 1 : width_p + width_r - 1][response_mask]
    tokens = response[response_mask]
    lm_head = model.get_output_embeddings()
    chunk = max(1, LOGITS_CHUNK_ELEMENTS // lm_head.out_features)
    recompute = torch.is_grad_enabled() and len(tokens) > chunk
    pieces = [
        checkpoint(_sampled_logp_and_entropy, lm_head, h, t, temperature, use_reentrant=False)
        if recompute
        else _sampled_logp_and_entropy(lm_head, h, t, temperature)
        for h, t in zip(hidden.split(chunk), tokens.split(chunk))
    ]
    logp = torch.cat([p[0] for p in pieces]) if pieces else hidden.new_zeros(0, dtype=torch.float32)
    entropy = torch.cat([p[1] for p in pieces]) if pieces else logp.detach()
    zeros = torch.zeros(response.shape, dtype=torch.float32, device=response.device)
    return {
        Columns.LOGP: zeros.masked_scatter(response_mask, logp),
        Columns.ENTROPY: zeros.masked_scatter(response_mask, entropy),
    }


def _sampled_logp_and_entropy(lm_head, hidden: torch.Tensor, tokens: torch.Tensor, temperature: float):
    """log softmax(logits / T)[token] via logsumexp and gather, and the entropy without a graph."""
    logits = lm_head(hidden).float() / temperature
    normalizer = logits.logsumexp(dim=-1)
    logp = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1) - normalizer
    with torch.no_grad():
        entropy = entropy_from_logits(logits)
    return logp, entropy


def is_adapter_key(key: str) -> bool:
    """Whether a parameter name is one of a LoRA adapter's (PEFT's ``lora_A``/``lora_B``)."""
    return ".lora_A." in key or ".lora_B." in key


def hf_weights(module_state: dict[str, Any]) -> dict[str, Any]:
    """RLModule state → Hugging Face parameter names (the module keeps the HF model as `model`)."""
    prefix = "model."
    return {k[len(prefix) :]: v for k, v in module_state.items() if k.startswith(prefix)}


def export_hf_model(
    module_state: dict[str, Any],
    model_path: str | Path,
    out_dir: str | Path,
    dtype: str = "float32",
    lora: LoraSettings | None = None,
) -> Path:
    """Write a trained module's weights as a plain Hugging Face model directory.

    The result has the `save_pretrained` layout (config, safetensors weights, generation config)
    and the tokenizer of `model_path`, so `transformers` and vLLM load it like any other model.
    `module_state` is `CausalLMRLModule.get_state()`: the HF parameters under the `model.` prefix.
    A module trained with LoRA adapters (`lora`, its settings) is written with them merged in.
    """
    from transformers import AutoTokenizer

    weights = {k: torch.as_tensor(v) for k, v in hf_weights(module_state).items()}
    model = load_causal_lm(model_path, dtype)
    if lora is not None:
        model = apply_lora(model, lora)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    # Tied output embeddings are stored once; with LoRA the state holds the adapters only (the base
    # is the model at model_path); anything else missing means the wrong base model.
    missing = [
        k
        for k in missing
        if not (k == "lm_head.weight" and model.config.tie_word_embeddings) and (lora is None or is_adapter_key(k))
    ]
    if missing or unexpected:
        raise ValueError(
            f"the trained weights do not fit the model at {model_path}: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    if lora is not None:
        model = model.merge_and_unload()
    out = Path(out_dir)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(str(model_path)).save_pretrained(out)
    return out


def export_adapter(
    module_state: dict[str, Any], model_path: str | Path, out_dir: str | Path, dtype: str, lora: dict[str, Any]
) -> Path:
    """Write a LoRA-trained module's adapters as a PEFT adapter directory (``adapter_config.json``, naming
    ``model_path`` as the base, and ``adapter_model.safetensors``), with the base model's tokenizer."""
    from transformers import AutoTokenizer

    model = apply_lora(load_causal_lm(model_path, dtype), lora)
    weights = {k: torch.as_tensor(v) for k, v in hf_weights(module_state).items()}
    unexpected = model.load_state_dict(weights, strict=False).unexpected_keys
    if unexpected or not weights:
        raise ValueError(f"the trained adapters do not fit the model at {model_path}: unexpected {unexpected[:5]}")
    out = Path(out_dir)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(str(model_path)).save_pretrained(out)
    return out


def merge_adapter_directory(adapter_dir: str | Path, out_dir: str | Path, dtype: str = "float32") -> Path:
    """A PEFT adapter directory merged into its base model (the one its ``adapter_config.json`` names),
    written as a plain Hugging Face model directory with the base model's tokenizer."""
    from peft import PeftConfig, PeftModel
    from transformers import AutoTokenizer

    base = PeftConfig.from_pretrained(str(adapter_dir)).base_model_name_or_path
    merged = PeftModel.from_pretrained(load_causal_lm(base, dtype), str(adapter_dir)).merge_and_unload()
    out = Path(out_dir)
    merged.save_pretrained(out)
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(out)
    return out


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` at each position.

    ``H = -sum_v p_v log p_v = logsumexp(z) - sum_v p_v z_v``: this form never
    takes the log of a probability that underflowed to 0. Computed in the dtype
    of ``logits``; upcast bf16 logits first if the precision matters.

    Args:
        logits: [..., vocab], finite.

    Returns:
        [...] entropies in nats.
    """
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)
