"""Named LoRA adapters served side by side by one vLLM engine: the trained policy's newest adapter and, in a
league, frozen snapshots of it. Each name serves one adapter at a time; a generate call picks one per prompt
(`request(name)` in `LLM.generate(..., lora_request=[...])`), so one batch can sample several policies from one
copy of the base model.

A generate call's prompts either all carry an adapter or none do: on vLLM 0.32's CPU backend a prompt without
one, in a batch with adapter prompts, is sampled from one of the engine's adapters (tests/models/test_adapter_shelf.py).
The base model, a LoRA run's initial policy, is served as an adapter whose B matrices are zero.

vLLM 0.32 loads adapters from directories only: each adapter is written as a PEFT adapter directory (its
tensors and its ``adapter_config.json``) in shared memory where there is some, read by the engine right away.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from dapo_rllib.vllm_private import adapter_ids, add_adapter, remove_adapter


class AdapterShelf:
    """The adapters one engine serves, by name.

    Args:
        llm: The engine (`vllm.LLM`, built with LoRA enabled: `dapo_rllib.models.lora.engine_lora_kwargs`, whose
            ``max_cpu_loras`` must hold every name at once).
        owner: Named in errors, e.g. "env runner 2".
    """

    def __init__(self, llm, owner: str):
        self.llm = llm
        self.owner = owner
        base = "/dev/shm" if Path("/dev/shm").is_dir() else None
        self._directory = Path(tempfile.mkdtemp(prefix="dapo-lora-", dir=base))
        self._last_id = 0  # one counter for every name: vLLM knows adapters by id
        self._requests: dict[str, Any] = {}  # name -> vllm.lora.request.LoRARequest

    def put(self, name: str, tensors: dict[str, torch.Tensor], config: dict[str, Any]):
        """Serve `tensors` (PEFT adapter names) under `name`, in place of what `name` served. Returns its request.

        Each put gets a new id and request name (``<name>-v<id>``): vLLM loads an adapter only for an id it does
        not hold, and its prefix cache keys blocks by the adapter's name.
        """
        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest

        self._last_id += 1
        path = self._directory / f"{name}-v{self._last_id}"
        path.mkdir()
        save_file({key: tensor.contiguous() for key, tensor in tensors.items()}, path / "adapter_model.safetensors")
        (path / "adapter_config.json").write_text(json.dumps(config))
        self.remove(name)
        request = LoRARequest(path.name, self._last_id, str(path))
        add_adapter(self.llm, request)
        self._requests[name] = request
        return request

    def remove(self, name: str) -> None:
        """Stop serving `name` (nothing if it serves nothing)."""
        request = self._requests.pop(name, None)
        if request is not None:
            remove_adapter(self.llm, request.lora_int_id)
            shutil.rmtree(request.lora_path, ignore_errors=True)

    def request(self, name: str):
        """The request that samples from `name`'s adapter."""
        if name not in self._requests:
            raise KeyError(f"{self.owner} serves no adapter named {name!r}; it serves {sorted(self._requests)}")
        return self._requests[name]

    def tensors(self, name: str) -> dict[str, torch.Tensor]:
        """The tensors `name` serves, as the engine read them."""
        from safetensors.torch import load_file

        return load_file(Path(self.request(name).lora_path) / "adapter_model.safetensors")

    def get(self, name: str):
        """`request(name)`, or None where `name` serves nothing yet (the base model)."""
        return self._requests.get(name)

    def names(self) -> list[str]:
        return sorted(self._requests)

    def engine_adapter_ids(self) -> set[int]:
        """The ids of the adapters the engine holds (for tests: exactly the shelf's)."""
        return adapter_ids(self.llm)

    def close(self) -> None:
        shutil.rmtree(self._directory, ignore_errors=True)
