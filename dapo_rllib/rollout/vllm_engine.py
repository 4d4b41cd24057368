"""vLLM plumbing of the env runner: the engine, its sampling settings, text decoding and weight loading.

Everything here knows vLLM (its private members through `dapo_rllib.vllm_private`);
`dapo_rllib.rollout.env_runner` knows only RLlib's EnvRunner contract and calls these:

    build_vllm_engine    an in-process `vllm.LLM` for the policy (CPU build here, CUDA on GPUs)
    sampling_params      one `SamplingParams` per prompt, each with its own seed
    decode_completions   the completions' text as vLLM's detokenizer would return it
    EngineWeights        streamed weight updates into the running engine (layerwise reload)
    EngineAdapter        streamed LoRA adapter updates, served beside the base model (`AdapterShelf`)

The functions at the end run on vLLM's worker through `collective_rpc` (the worker is their
first argument).
"""

from __future__ import annotations

import dataclasses
import gc
import os
import time
from typing import Any

import numpy as np
import torch

from dapo_rllib.library_logs import known_native_lines_dropped, library_logs_requested
from dapo_rllib.models.adapter_shelf import AdapterShelf
from dapo_rllib.models.lora import POLICY_ADAPTER, LoraSettings, engine_lora_kwargs
from dapo_rllib.rollout.weight_sync import BucketAssembler
from dapo_rllib.settings import FeatureSettings, is_positive_int, require
from dapo_rllib.vllm_private import (
    begin_layerwise_reload,
    detach_shared_state_teardown,
    drop_import_error_frames,
    finish_layerwise_reload,
    forget_reload_records,
    load_into_model,
    processes_weights,
    share_processed_weight,
    worker_model,
)

#: vLLM's own setting of a CPU engine's KV cache (GiB); where it is set, it decides the size.
CPU_KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"
CPU_KV_CACHE_MAX_BYTES = 1 << 30
#: Sequences a vLLM engine runs at once (its `max_num_seqs` default), and the tokens of a KV block, the most
#: a sequence's last block can leave empty (vLLM's CPU backend uses blocks of 16 to 128 tokens).
ENGINE_MAX_SEQUENCES = 256
KV_BLOCK_TOKENS = 128


@dataclasses.dataclass(frozen=True)
class SamplerSettings(FeatureSettings):
    """How the vLLM engines sample (`DAPOConfig.training`).

    Attributes:
        vllm_engine_kwargs: Extra `vllm.LLM(...)` arguments (tensor_parallel_size,
            gpu_memory_utilization, ...); they override the runner's defaults.
        max_prompt_length: Prompt tokens; longer prompts are left-truncated and counted
            (`prompts_left_truncated`). Reference 2048.
        max_response_length: L_max, the token budget of an episode after its prompt: every token the
            model samples and, in episodes of several turns, every token the environment adds (tool
            results, feedback), as verl counts it. Reference 20480.
        temperature, top_p: Rollout sampling. Reference 1.0, 1.0.
    """

    vllm_engine_kwargs: dict = dataclasses.field(default_factory=dict)
    max_prompt_length: int = 2048
    max_response_length: int = 20480
    temperature: float = 1.0
    top_p: float = 1.0

    @property
    def longest_sequence(self) -> int:
        """The longest sequence an episode can make: its prompt and its whole budget."""
        return self.max_prompt_length + self.max_response_length

    def validate(self) -> None:
        for name in ("max_prompt_length", "max_response_length"):
            require(is_positive_int(getattr(self, name)), f"{name}={getattr(self, name)!r} must be a positive integer")
        require(
            self.temperature > 0,
            f"temperature={self.temperature} must be > 0 (log-probs are of softmax(logits / temperature))",
        )
        require(0 < self.top_p <= 1, f"top_p={self.top_p} must be in (0, 1]")
        require(
            isinstance(self.vllm_engine_kwargs, dict),
            f"vllm_engine_kwargs={self.vllm_engine_kwargs!r} must be a dict of vllm.LLM arguments",
        )


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """What an env runner's vLLM engine is built and samples with: the engine's share of the algorithm's
    config, as verl hands its rollout worker a config of its own. `from_config` is the one place that reads
    it from a `DAPOConfig`, so a setting renamed there breaks that mapping, not the engine.

    Attributes:
        policy_model_path: The policy's model directory (`ModelSettings.policy_model_path`).
        model_dtype: The engine's dtype, the learner's (`ModelSettings.model_dtype`).
        sampler: Lengths, rollout sampling and extra engine arguments.
        eval_temperature, eval_top_p: Validation sampling (`EvaluationSettings`).
        adapter: The adapters' settings where the engine serves the policy as a LoRA adapter (`lora_sync_path`
            "adapter"); None where whole weights stream in (full fine-tuning, merged adapters).
        league_size: League snapshots the engine serves beside the policy's adapter (`LeagueSettings.size`).
    """

    policy_model_path: str
    model_dtype: str
    sampler: SamplerSettings
    eval_temperature: float
    eval_top_p: float
    adapter: LoraSettings | None
    league_size: int

    @classmethod
    def from_config(cls, config) -> EngineSettings:
        """The engine settings of `config` (a `DAPOConfig`), the LoRA sync path resolved once."""
        return cls(
            policy_model_path=config.policy_model_path,
            model_dtype=config.model_dtype,
            sampler=config.sampler_settings,
            eval_temperature=config.eval_temperature,
            eval_top_p=config.eval_top_p,
            adapter=config.lora_settings if config.lora_sync_path == "adapter" else None,
            league_size=config.league_size,
        )


def build_vllm_engine(settings: EngineSettings, seed: int):
    """An in-process vLLM engine for the policy's model (CPU build here, CUDA build on GPUs)."""
    from vllm import LLM  # after `import dapo_rllib`, which sets vLLM's environment defaults

    on_gpu = torch.cuda.is_available()
    kwargs = dict(
        model=settings.policy_model_path,
        dtype=settings.model_dtype,
        seed=seed,
        max_model_len=settings.sampler.longest_sequence,
        enforce_eager=not on_gpu,
        gpu_memory_utilization=0.5 if on_gpu else 0.1,
        # The sampled tokens' log-probs after temperature: the distribution sampled from, the
        # one the learner's log-probs are of (rollout_logp_abs_diff, rollout_correction).
        logprobs_mode="processed_logprobs",
        use_tqdm_on_load=library_logs_requested(),  # a quiet start: no loading bar
    )
    if not on_gpu:
        # Per-request seeds (see `sampling_params`) crash vLLM's CPU backend when a prefill is
        # chunked ("CPU Generator does not use offset"): prefill prompts whole.
        kwargs.update(enable_chunked_prefill=False, max_num_batched_tokens=max(4096, kwargs["max_model_len"]))
        kwargs.update(kv_cache_memory_bytes=cpu_kv_cache_bytes(settings))
    if settings.adapter is not None:
        kwargs.update(engine_lora_kwargs(settings.adapter.rank, settings.league_size))
    kwargs.update(settings.sampler.vllm_engine_kwargs)
    with known_native_lines_dropped():
        llm = LLM(**kwargs)
    release_startup_objects()
    detach_shared_state_teardown(llm)
    return llm


def release_startup_objects() -> None:
    """Hand the objects alive when an engine started back to the garbage collector.

    vLLM's engine core freezes every object alive at its start (`gc.freeze`, for shorter collections
    while serving) and unfreezes them only in its shutdown. Frozen objects are never collected: the env
    runner being built is one, and the reference cycle through its turn loops (their `generate` calls
    back into it) then outlived the runner with its engine's KV cache, 1 GiB per in-process runner on
    CPU. vLLM's kept import error holds the frames of that start too (`drop_import_error_frames`).
    """
    gc.unfreeze()
    drop_import_error_frames()


def cpu_kv_cache_bytes(settings: EngineSettings) -> int:
    """The KV cache of a CPU engine: $VLLM_CPU_KVCACHE_SPACE GiB where it is set (vLLM's own setting), else
    room for `ENGINE_MAX_SEQUENCES` sequences of the settings' longest (and a block each to spare), at most
    `CPU_KV_CACHE_MAX_BYTES`.

    vLLM's CPU backend would otherwise take a size whatever the model: 1 GiB held 1M tokens of the tiny
    model, whose runs need ~40k; the cap holds ~45k tokens of a 135M-parameter model in bfloat16.
    """
    from transformers import AutoConfig

    if os.environ.get(CPU_KV_CACHE_ENV):
        return int(os.environ[CPU_KV_CACHE_ENV]) << 30
    hf = AutoConfig.from_pretrained(settings.policy_model_path)
    heads = getattr(hf, "num_attention_heads", None)
    kv_heads = getattr(hf, "num_key_value_heads", None) or heads
    head_dim = getattr(hf, "head_dim", None) or (hf.hidden_size // heads if heads else None)
    layers = getattr(hf, "num_hidden_layers", None)
    if not (kv_heads and head_dim and layers):  # an architecture this rule cannot read: the cap
        return CPU_KV_CACHE_MAX_BYTES
    per_token = layers * 2 * kv_heads * head_dim * 4  # keys and values, float32 at most
    tokens = ENGINE_MAX_SEQUENCES * (settings.sampler.longest_sequence + KV_BLOCK_TOKENS)
    return min(CPU_KV_CACHE_MAX_BYTES, tokens * per_token)


def sampling_params(
    settings: EngineSettings, tokenizer, *, explore: bool, seed: int, max_tokens: int, stop: tuple[str, ...] = ()
):
    """The SamplingParams of one model turn of one episode.

    A seed per request makes a turn a function of (weights, seed, context) only, so a run resumed from a
    checkpoint samples exactly what the uninterrupted run would have, whatever else the engine generated
    in between. Training samples (`explore`) use the rollout temperature and top_p and carry the sampled
    tokens' log-probs (flat: a few lists per completion, not a dict per token); evaluation samples use the
    evaluation settings. A turn stops at EOS, at `max_tokens`, or at one of `stop` (the end of a tool call),
    which stays in the output. Samples without stop strings leave their text to `decode_completions` where
    the tokenizer has a Rust backend: vLLM's detokenizer would also decode every sampled token for its
    log-prob entry, which nothing here reads and which costs ~10% of the generation throughput on the tiny
    example.
    """
    from vllm import SamplingParams

    return SamplingParams(
        n=1,
        seed=seed,
        temperature=settings.sampler.temperature if explore else settings.eval_temperature,
        top_p=settings.sampler.top_p if explore else settings.eval_top_p,
        max_tokens=max_tokens,
        logprobs=0,
        flat_logprobs=True,
        # vLLM matches stop strings on its own detokenized text.
        detokenize=backend_tokenizer(tokenizer) is None or bool(stop),
        stop=list(stop) or None,
        include_stop_str_in_output=True,
    )


# Seed streams of requests: training, evaluation (reused at every evaluation, so that accuracy changes
# reflect the weights, not the dice) and the scripted players of games.
TRAIN_STREAM, EVAL_STREAM, SCRIPT_STREAM = 0, 1, 2


def request_seed(run_seed: int | None, *stream: int) -> int:
    """A 31-bit seed for one request, derived from the run seed and the request's stream: the
    same on whichever env runner samples it."""
    entropy = [run_seed or 0, *stream]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0] >> 1)


def backend_tokenizer(tokenizer):
    """The Rust tokenizer `decode_completions` decodes with; None where the tokenizer has none."""
    return getattr(tokenizer, "backend_tokenizer", None)


def decode_completions(tokenizer, prompt_ids: list[int], completions: list) -> list[str]:
    """The completions' text for the scorer, as vLLM's detokenizer returns it.

    Its algorithm for Rust-backed tokenizers: a DecodeStream primed with the prompt (leading
    spaces decode as in context), the stop token left out (a stop string stays), the bytes of a character still
    unfinished at the end (a response cut mid-character) held back. Without a Rust backend vLLM
    decoded them (`sampling_params(detokenize=True)`).
    """
    from tokenizers.decoders import DecodeStream

    backend = backend_tokenizer(tokenizer)
    if backend is None:
        return [c.text for c in completions]
    texts = []
    for c in completions:
        stream = DecodeStream(ids=prompt_ids, skip_special_tokens=True)
        pieces = []
        ended_by_stop_token = c.finish_reason == "stop" and not isinstance(c.stop_reason, str)
        for token in c.token_ids[:-1] if ended_by_stop_token else c.token_ids:
            try:
                pieces.append(stream.step(backend, token))
            except Exception as error:  # tokenizers' "Invalid prefix": restart, as vLLM does
                if not str(error).startswith("Invalid prefix"):
                    raise
                stream = DecodeStream(skip_special_tokens=True)
                pieces.append(stream.step(backend, token))
        texts.append("".join(filter(None, pieces)))
    return texts


class EngineWeights:
    """New weights for a running engine, streamed in: `begin`, `load` per bucket, `finish`.

    vLLM's layerwise reload is opened and closed around the buckets rather than run in one
    call: it holds each layer's incoming parameters until the layer is complete, then processes
    it into place. Until `finish` the engine must not generate (vLLM has moved the layers still
    to be loaded aside).
    """

    def __init__(self, llm, owner: str):
        self.llm = llm
        self.owner = owner  # named in errors, e.g. "env runner 2"
        self._open = None  # (BucketAssembler, engine names loaded, start time) while an update is open

    def begin(self) -> None:
        self.llm.collective_rpc(begin_layerwise_reload)
        self._open = (BucketAssembler(), set(), time.perf_counter())

    def load_bucket(self, tensors: dict) -> None:
        """Take one received bucket and load the parameters it completes."""
        self.load(self._update()[0].add(tensors))

    def load(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        """Hand whole (HF name, tensor) parameters to the engine; records what they filled."""
        if weights:
            self._update()[1].update(self.llm.collective_rpc(load_into_model, kwargs={"weights": weights})[0])

    def finish(self) -> float:
        """Close the update; raises unless every engine parameter got new values. Returns the
        seconds since `begin`."""
        assembler, loaded, start = self._update()
        self._open = None
        engine_names = self.llm.collective_rpc(_finish_reload)[0]
        missing = sorted(set(engine_names) - loaded) + assembler.incomplete()
        if missing:
            raise RuntimeError(
                f"{self.owner}: the weight update left {len(missing)} parameters without new values: {missing[:5]}"
            )
        # Cached prefixes were computed with the old weights.
        self.llm.reset_prefix_cache()
        return time.perf_counter() - start

    def _update(self):
        if self._open is None:
            raise RuntimeError("no weight update is open: call begin_weight_update first")
        return self._open

    def parameters(self, names: list[str]) -> dict[str, np.ndarray]:
        """Copies of the named parameters as the engine holds them (for tests and debugging)."""
        return self.llm.collective_rpc(_read_parameters, kwargs={"names": tuple(names)})[0]

    def close(self) -> None:
        """Let the engine's model go with the engine (vLLM's reload records would hold it)."""
        self.llm.collective_rpc(forget_reload_records)


class EngineAdapter:
    """New adapter weights for a running engine, streamed in: `begin`, `load_bucket` per bucket,
    `finish`; the same interface as `EngineWeights`. The adapter is served under the name
    `POLICY_ADAPTER` on the engine's `AdapterShelf`, beside any other the shelf serves.

    Args:
        llm: The engine (`vllm.LLM`, built with `engine_lora_kwargs`).
        config: The adapter's ``adapter_config.json`` content (`dapo_rllib.models.lora.lora_adapter_config`).
        owner: Named in errors, e.g. "env runner 2".
    """

    def __init__(self, llm, config: dict[str, Any], owner: str):
        self.config = config
        self.owner = owner
        self.shelf = AdapterShelf(llm, owner)
        self._open = None  # (BucketAssembler, {name: tensor}, start time) while an update is open

    @property
    def lora_request(self):
        """The adapter every generate call carries; None before the first sync (the base model)."""
        return self.shelf.get(POLICY_ADAPTER)

    def begin(self) -> None:
        self._open = (BucketAssembler(), {}, time.perf_counter())

    def load_bucket(self, tensors: dict) -> None:
        self.load(self._update()[0].add(tensors))

    def load(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        self._update()[1].update((name, tensor.clone()) for name, tensor in weights)

    def finish(self) -> float:
        """Serve the adapter in place of the previous one. Returns the seconds since `begin`."""
        assembler, tensors, start = self._update()
        self._open = None
        if assembler.incomplete() or not tensors:
            raise RuntimeError(
                f"{self.owner}: the adapter update is incomplete: {assembler.incomplete()[:5] or 'no tensors'}"
            )
        self.shelf.put(POLICY_ADAPTER, tensors, self.config)
        return time.perf_counter() - start

    def parameters(self, names: list[str]) -> dict[str, np.ndarray]:
        """The adapter tensors last written, by name (for tests and debugging)."""
        if self.lora_request is None:
            return {}
        held = self.shelf.tensors(POLICY_ADAPTER)
        return {name: held[name].float().numpy().copy() for name in names if name in held}  # copies, as above

    def engine_adapters(self) -> set[int]:
        """The ids of the adapters the engine holds (the current version's only, once synced)."""
        return self.shelf.engine_adapter_ids()

    def close(self) -> None:
        self.shelf.close()

    def _update(self):
        if self._open is None:
            raise RuntimeError("no weight update is open: call begin_weight_update first")
        return self._open


# ----- run on vLLM's worker through `collective_rpc` -------------------------------------------


def _finish_reload(worker) -> list[str]:
    """Process what is left and return the names of all engine parameters."""
    finish_layerwise_reload(worker)
    model = worker_model(worker)
    _retie_layers(model)
    return [name for name, _ in model.named_parameters()]


def _read_parameters(worker, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    params = dict(worker_model(worker).named_parameters())
    # Copies: on CPU a float32 tensor's numpy() is a view, which an in-process caller would see change at the next
    # weight update (an actor's caller gets a copy through Ray either way).
    return {n: params[n].detach().float().cpu().numpy().copy() for n in names if n in params}


def _retie_layers(model) -> None:
    """Bring every layer whose weight is another layer's (a tied output head) up to the new weights.

    vLLM's reload processes the layer that owns a weight (the embedding) when the weight arrives,
    never its aliases. On CPU, processing packs a copy of the weight for the layer's matmuls: a
    tied head left alone would go on computing logits with the old weights (mean |log-prob
    difference| 0.02 after one reload instead of 5e-7). The head takes the embedding's fresh
    packing rather than packing the same weight again (0.8 s and 0.6 GB at the 0.5B shape).
    """
    owner_of = {id(weight): name.rpartition(".")[0] for name, weight in model.named_parameters()}
    for prefix, layer in model.named_modules():
        weight = dict(layer.named_parameters(recurse=False)).get("weight")
        if weight is None or not processes_weights(layer) or owner_of[id(weight)] == prefix:
            continue
        share_processed_weight(layer, model.get_submodule(owner_of[id(weight)]))
