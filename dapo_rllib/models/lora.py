"""LoRA: the learner trains adapters (PEFT) on a frozen base model; the vLLM engines serve the base
model with the adapter, and after each update only the adapter travels to them.

    learner     `apply_lora` wraps the Hugging Face model (`peft.get_peft_model`); only the adapters
                require gradients, so AdamW holds state for them only. `adapter_tensors` are what
                the weight sync streams: the adapter weights under the names of a PEFT adapter
                file (`base_model.model.<module>.lora_A.weight`), views of the live parameters.
    env runner  `EngineAdapter` (dapo_rllib.rollout.vllm_engine) collects the streamed tensors and
                serves them on the engine's `AdapterShelf` (dapo_rllib.models.adapter_shelf) under
                `POLICY_ADAPTER`: written
                as a PEFT adapter directory in shared memory and registered under a new id and
                name per version, so neither vLLM's adapter cache nor its prefix cache can serve
                the previous one, which is removed. Every generate call carries the current
                `lora_request`.

The engine is built with LoRA enabled (`engine_lora_kwargs`) and samples through its LoRA layers
from the start: a new adapter's B matrices are zero, so before the first sync it samples the base
model, which is the learner's initial policy too.

vLLM serves adapters on the decoder's linear layers only. Adapters elsewhere (the output layer, the
embeddings) take the other sync path (`lora_sync_path`): the learner streams the base weights with
the adapters merged in (`MergedWeights`), as a full fine-tuning run streams its weights, into an
engine without LoRA.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, ClassVar, Iterator

import torch

from dapo_rllib.settings import NOT_FLAT, FeatureSettings, require

#: How the adapters reach the engines (`DAPOConfig.lora_sync`): "auto" picks the faster of the two that
#: can carry the adapters (`lora_sync_path`).
LORA_SYNC_MODES = ("auto", "adapter", "merged")
#: Up to this size of the model's weights (in its dtype), "auto" sends merged weights to CPU engines: vLLM's
#: CPU LoRA kernels add more generation time per step than streaming the merged model costs. Measured with
#: `python bench/scale.py --workload NAME` (a step, merged against adapter): SmolLM2-135M-Instruct (0.54 GB
#: in float32: 109.9 s against 189.8 s) and the Qwen2.5-0.5B shape in bfloat16 (0.99 GB: 27.2 s against
#: 43.4 s) are faster merged; the 0.5B shape in float32 (1.98 GB: 73.7 s against 60.4 s) is faster with the
#: adapter, whose sync is 0.2 s against 5.3 s. On GPUs vLLM's LoRA kernels cost little, and the adapter
#: travels at every size.
CPU_MERGED_SYNC_MAX_BYTES = 1.5e9
#: vLLM's allowed `max_lora_rank` values (`vllm.config.lora.MaxLoRARanks`, see `dapo_rllib.vllm_private`); the
#: engine takes the smallest that holds the rank.
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
MAX_RANK = VLLM_MAX_LORA_RANKS[-1]
# PEFT's name of the one adapter the learner trains.
_ADAPTER = "default"
#: The name the engines serve the trained policy's adapter under (`AdapterShelf`).
POLICY_ADAPTER = "policy"


@dataclasses.dataclass(frozen=True)
class LoraSettings(FeatureSettings):
    """LoRA adapters (PEFT) on a frozen base model instead of every weight (`DAPOConfig.training`).

    AdamW then holds state for the adapters only, and after each step only the adapters travel to the
    vLLM engines, which serve the base model with them.

    Attributes:
        rank: ``lora_rank``. None (default): full fine-tuning. At most 512 (vLLM's largest adapter rank).
        alpha: ``lora_alpha``, the scaling numerator (the update is scaled by alpha / rank). None: twice
            the rank (`scaling_alpha`).
        dropout: ``lora_dropout`` on the adapters' input in training. Default 0: the learner's
            log-probs then match the engine's, which applies none.
        target_modules: ``lora_target_modules``, the linear layers that get adapters: "all-linear"
            (default: every linear layer of the decoder, not the output head) or a list of module names
            (PEFT's matching: "q_proj", "v_proj", ...).
        sync: ``lora_sync``, how the adapters reach the vLLM engines after each step: "adapter" (only
            the adapters travel), "merged" (the weights with the adapters merged in travel, as in full
            fine-tuning, to engines without LoRA) or "auto" (default: the faster path that can carry
            the adapters, `lora_sync_path`: "merged" for models up to 1.5 GB on CPU engines or for
            adapters vLLM cannot serve, else "adapter"). The run logs the path.
        seed: Seed of the adapters' initial A matrices: the config's `seed` (not a setting of its own).
    """

    prefix: ClassVar[str] = "lora_"
    rank: int | None = None
    alpha: float | None = None
    dropout: float = 0.0
    target_modules: str | list[str] | tuple[str, ...] = "all-linear"
    sync: str = "auto"
    seed: int = dataclasses.field(default=0, metadata=NOT_FLAT)

    @property
    def scaling_alpha(self) -> float:
        return 2 * self.rank if self.alpha is None else self.alpha

    def validate(self) -> None:
        require(
            isinstance(self.rank, int) and not isinstance(self.rank, bool) and 0 < self.rank <= MAX_RANK,
            f"lora_rank={self.rank!r} must be a whole number in 1..{MAX_RANK} (vLLM's largest adapter rank), "
            "or None for full fine-tuning",
        )
        require(
            self.alpha is None or (isinstance(self.alpha, (int, float)) and self.alpha > 0),
            f"lora_alpha={self.alpha!r} must be a positive number (or None: twice the rank)",
        )
        require(
            isinstance(self.dropout, (int, float)) and 0 <= self.dropout < 1,
            f"lora_dropout={self.dropout!r} must be in [0, 1)",
        )
        require(
            self.target_modules == "all-linear"
            or (
                isinstance(self.target_modules, (list, tuple))
                and self.target_modules
                and all(isinstance(name, str) and name for name in self.target_modules)
            ),
            f"lora_target_modules={self.target_modules!r} must be 'all-linear' or a non-empty list of module names",
        )
        require(self.sync in LORA_SYNC_MODES, f"lora_sync={self.sync!r}; expected one of {LORA_SYNC_MODES}")


def apply_lora(model, settings: LoraSettings):
    """``model`` with LoRA adapters of ``settings`` on its target linear
    layers, the rest frozen: a `peft.PeftModel`.

    Raises:
        ValueError: The target modules match no layer of the model (the message lists its linear layers).
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.scaling_alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        # The A matrices start random: from the run's seed, so that every learner (and a resumed
        # run's rebuild) starts from the same adapters, whatever the global RNG did before.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(settings.seed)
            return get_peft_model(model, config)
    except ValueError as error:
        if "not found in the base model" not in str(error) and "Target modules" not in str(error):
            raise
        raise ValueError(
            f"lora_target_modules={settings.target_modules!r} match no layer of the model; its linear layers "
            f"are {linear_layer_names(model)}"
        ) from None


def linear_layer_names(model) -> list[str]:
    """The distinct last names of the model's linear layers (what ``lora_target_modules`` lists)."""
    return sorted(
        {name.rsplit(".", 1)[-1] for name, layer in model.named_modules() if isinstance(layer, torch.nn.Linear)}
    )


def adapter_tensors(model) -> dict[str, torch.Tensor]:
    """The adapter weights of a `peft.PeftModel`, named as in a PEFT adapter file (the names vLLM
    loads), sharing storage with the live parameters."""
    tensors = {}
    for name, param in model.named_parameters():
        if "lora_" in name:
            tensors[name.replace(f".{_ADAPTER}.", ".")] = param
    return tensors


def adapter_config(model) -> dict[str, Any]:
    """The adapter's ``adapter_config.json`` content (PEFT's, JSON-ready)."""
    config = model.peft_config[_ADAPTER].to_dict()
    return json.loads(json.dumps(config, default=lambda value: sorted(value) if isinstance(value, set) else str(value)))


def lora_adapter_config(model_path: str, settings: LoraSettings) -> dict[str, Any]:
    """The ``adapter_config.json`` of the adapters ``settings`` give the model at ``model_path`` (its
    target modules resolved, as the learner's PEFT model has them), from a weightless copy of the model."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path))
    return adapter_config(apply_lora(model, settings))


def lora_sync_path(model_path: str, settings: LoraSettings, engines_on_gpu: bool, dtype: str) -> str:
    """The weight sync path of a LoRA run: "adapter" (vLLM serves the adapter; only it travels) or
    "merged" (the merged weights travel to an engine without LoRA), as ``settings.sync``
    (`LORA_SYNC_MODES`) asks and the adapters' layers allow. "auto" takes "merged" where vLLM cannot
    serve every adapter, or where the engines run on CPU and the model's weights in ``dtype`` (the
    `model_dtype`) are at most `CPU_MERGED_SYNC_MAX_BYTES`; else "adapter".

    Raises:
        ValueError: ``mode`` is "adapter" and vLLM cannot serve some adapter, or no path can carry the
            adapters (an adapter on an embedding the model ties to its output layer).
    """
    mode = settings.sync
    if mode not in LORA_SYNC_MODES:
        raise ValueError(f"lora_sync={mode!r}; expected one of {LORA_SYNC_MODES}")
    adapters = dataclasses.replace(settings, sync="auto")  # the cache key: what the adapters are
    unservable, tied, num_parameters = _adapter_layout(
        model_path, json.dumps(dataclasses.asdict(adapters), sort_keys=True)
    )
    targets = f"lora_target_modules={settings.target_modules!r}"
    if not unservable:
        if mode == "auto":
            weight_bytes = num_parameters * getattr(torch, dtype).itemsize
            small_on_cpu = not engines_on_gpu and weight_bytes <= CPU_MERGED_SYNC_MAX_BYTES
            return "merged" if small_on_cpu else "adapter"
        return mode
    if tied:
        raise ValueError(
            f"{targets} puts adapters on {unservable}: vLLM serves adapters on the decoder's linear layers only, "
            "and the merged weights cannot carry them either, because the model ties its input and output "
            "embeddings (tie_word_embeddings=True) while the adapter changes one of them: leave "
            f"{sorted({name.rsplit('.', 1)[-1] for name in unservable})} out of lora_target_modules"
        )
    if mode == "adapter":
        raise ValueError(
            f"lora_sync='adapter' with {targets}: vLLM serves adapters on the decoder's linear layers only, not on "
            f"{unservable}; set lora_sync='merged' (or 'auto') to send the weights with the adapters merged in"
        )
    return "merged"


@lru_cache(maxsize=8)
def _adapter_layout(model_path: str, settings_json: str) -> tuple[list[str], bool, int]:
    """(the adapted layers vLLM cannot serve an adapter on, whether one of them is an embedding the
    model ties to its output layer, the base model's parameter count), from a weightless copy of the model."""
    from accelerate import init_empty_weights
    from peft.tuners.lora import LoraLayer
    from transformers import AutoConfig, AutoModelForCausalLM

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path))
        num_parameters = model.num_parameters()  # before the adapters join it
        if getattr(model.config, "tie_word_embeddings", False):  # one weight, which a weightless copy holds twice
            num_parameters -= model.get_output_embeddings().weight.numel()
        model = apply_lora(model, LoraSettings(**json.loads(settings_json)))
    base = model.get_base_model()
    # The embedding layers; PEFT wraps the one it adapts (its `base_layer` is the layer).
    output, embedding = (
        getattr(layer, "base_layer", layer) for layer in (base.get_output_embeddings(), base.get_input_embeddings())
    )
    unservable, tied = [], False
    for name, layer in base.named_modules():
        if not isinstance(layer, LoraLayer):
            continue
        if layer.base_layer is output or not isinstance(layer.base_layer, torch.nn.Linear):
            unservable.append(name)
            # With tied embeddings one weight serves both layers: a merge would change the other one too.
            tied |= layer.base_layer in (output, embedding) and bool(base.config.tie_word_embeddings)
    return unservable, tied, num_parameters


class MergedWeights(Mapping):
    """The base model's parameters under their Hugging Face names, each adapted layer's weight with its
    adapter merged in (W + PEFT's delta weight), computed when read: one weight at a time, never a
    merged copy of the model. What the "merged" sync path streams.

    Args:
        model: The learner's `peft.PeftModel`.
    """

    def __init__(self, model):
        from peft.tuners.lora import LoraLayer

        base = model.get_base_model()
        layers = {name: layer for name, layer in base.named_modules() if isinstance(layer, LoraLayer)}
        self._weights: dict[str, tuple[torch.Tensor, Any]] = {}  # name -> (base parameter, its LoRA layer or None)
        for name, param in base.named_parameters():
            if "lora_" in name:
                continue
            owner, _, leaf = name.rpartition(".")
            layer_name = owner.removesuffix(".base_layer")
            layer = layers.get(layer_name) if owner != layer_name and leaf == "weight" else None
            self._weights[f"{layer_name}.{leaf}" if owner != layer_name else name] = (param, layer)

    def __getitem__(self, name: str) -> torch.Tensor:
        param, layer = self._weights[name]
        if layer is None:
            return param.detach()
        with torch.no_grad():
            return param + layer.get_delta_weight(_ADAPTER).to(param.dtype)

    def sources(self, name: str) -> list[torch.Tensor]:
        """The parameters weight ``name`` is computed from, its base parameter first (its shape and dtype)."""
        param, layer = self._weights[name]
        return [param] if layer is None else [param, *(p for n, p in layer.named_parameters() if "lora_" in n)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._weights)

    def __len__(self) -> int:
        return len(self._weights)


def engine_lora_kwargs(rank: int, league_size: int = 0) -> dict[str, Any]:
    """vLLM engine arguments to serve adapters of ``rank``: the trained policy's (the sync removes the previous
    one before the engine generates again) and the ``league_size`` snapshots of a league, all in one batch
    and all held at once (vLLM would evict and reload an adapter past ``max_cpu_loras``)."""
    max_rank = next(allowed for allowed in VLLM_MAX_LORA_RANKS if allowed >= rank)
    adapters = 1 + league_size
    return {"enable_lora": True, "max_lora_rank": max_rank, "max_loras": adapters, "max_cpu_loras": adapters}
