"""Streamed weight sync: the learner's parameters reach the vLLM engines in bounded buckets.

Three roles (`stream_weights`, run by `DAPO.sync_weights_to_env_runners`, drives them):

    learner     `plan_buckets` cuts its parameters into buckets of at most `bucket_bytes`;
                per bucket it gathers the parameters (ZeRO-3), copies them out and `send`s them
    transport   carries one bucket from learner rank 0 to every env runner (`WeightTransport`)
    env runner  `receive`s a bucket, `BucketAssembler` joins the slices of split parameters,
                and vLLM loads the complete ones while the next bucket is on its way

So neither side ever holds a second full copy of the weights: the learner one bucket, the
object store one or two, each env runner one bucket plus the layer vLLM is reloading.

A parameter larger than a bucket is cut into row slices (dim 0) for the transport; the env
runner joins them before vLLM loads it, because vLLM loads (and on CPU re-packs) a parameter
whole. That parameter's size is then the env runner's floor, whatever the bucket.

Transports: `ObjectStoreTransport` (Ray's object store) is the one built and measured; on this
CPU machine it beat a gloo broadcast (`bench/weight_transport.py`). On GPUs the established
frameworks broadcast over an NCCL group of learner rank 0 and the vLLM workers, or pass CUDA
IPC handles when both share a GPU (docs/design/scaling.md §4): either is a `WeightTransport` whose handle is
what the driver forwards to the env runners. Neither is built yet (no GPU to verify one on).
"""

from __future__ import annotations

import math
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Protocol

import torch

from dapo_rllib.ray_private import learner_results
from dapo_rllib.rollout.env_runner_group import on_env_runners
from dapo_rllib.settings import FeatureSettings, require

MB = 2**20
TRANSPORT = "object_store"  # the transport the driver uses (see `TRANSPORTS`)


@dataclass(frozen=True)
class WeightSyncSettings(FeatureSettings):
    """How the learner's weights reach the vLLM engines after each step (`DAPOConfig.training`).

    Attributes:
        bucket_mb: ``weight_sync_bucket_mb``, the size of the buckets in which the weights stream:
            memory the sync adds is about one bucket on each side. A parameter larger than a bucket
            travels in row slices and is joined on arrival (vLLM loads parameters whole). Default
            1024: the 0.5B shape's embedding (545 MB in float32) then travels whole.
    """

    prefix: ClassVar[str] = "weight_sync_"
    bucket_mb: float = 1024

    @property
    def bucket_bytes(self) -> int:
        return int(self.bucket_mb * MB)

    def validate(self) -> None:
        require(
            isinstance(self.bucket_mb, (int, float)) and self.bucket_mb > 0,
            f"weight_sync_bucket_mb={self.bucket_mb!r} must be a positive number of MB",
        )


@dataclass(frozen=True)
class Piece:
    """Rows [start, stop) of the parameter `name` (all of it when they cover its first dim)."""

    name: str
    shape: tuple[int, ...]
    start: int
    stop: int

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.stop == (self.shape[0] if self.shape else 1)


def plan_buckets(parameters: Iterable[tuple[str, tuple[int, ...], int]], bucket_bytes: int) -> list[list[Piece]]:
    """Cut `(name, shape, bytes per element)` parameters, in order, into buckets of at most
    `bucket_bytes`. Parameters that fit are packed whole; a larger one gets buckets of its own,
    each a slice of whole rows. Raises ValueError when a single row exceeds the bucket."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes={bucket_bytes} must be positive")
    buckets: list[list[Piece]] = []
    current: list[Piece] = []
    used = 0
    for name, shape, itemsize in parameters:
        shape = tuple(int(d) for d in shape)
        size = math.prod(shape) * itemsize
        if size <= bucket_bytes:
            if used + size > bucket_bytes:
                buckets.append(current)
                current, used = [], 0
            current.append(Piece(name, shape, 0, shape[0] if shape else 1))
            used += size
            continue
        row_bytes = math.prod(shape[1:]) * itemsize
        if row_bytes > bucket_bytes:
            raise ValueError(
                f"parameter {name!r} {list(shape)} has rows of {row_bytes / MB:.1f} MB, more than the "
                f"weight sync bucket of {bucket_bytes / MB:.1f} MB: raise weight_sync_bucket_mb"
            )
        if current:
            buckets.append(current)
            current, used = [], 0
        rows = bucket_bytes // row_bytes
        buckets.extend([Piece(name, shape, start, min(start + rows, shape[0]))] for start in range(0, shape[0], rows))
    if current:
        buckets.append(current)
    return buckets


def bucket_tensors(bucket: list[Piece], parameters: dict[str, torch.Tensor]) -> dict[Piece, torch.Tensor]:
    """The bucket's slices of the (whole, gathered) `parameters`: views of the live weights,
    not copies. A transport's `send` copies them (or has sent them) before it returns."""
    return {piece: parameters[piece.name].detach()[piece.start : piece.stop].cpu() for piece in bucket}


class WeightTransport(Protocol):
    """Moves one bucket from learner rank 0 to every env runner.

    `send` runs on learner rank 0 and returns a small handle; the driver forwards the handle
    to each env runner, whose `receive` returns the bucket's tensors.
    """

    def send(self, tensors: dict[Piece, torch.Tensor]) -> Any:
        """Send (or copy aside) `tensors`, views of live weights, before returning."""
        ...

    def receive(self, handle: Any) -> dict[Piece, torch.Tensor]: ...


# numpy has no bfloat16: such a tensor travels as its bits, viewed as int16, and is viewed back.
_NUMPY_STAND_INS = {torch.bfloat16: torch.int16}


class ObjectStoreTransport:
    """Ray's object store: one `ray.put` per bucket (its one copy); every runner reads it from
    shared memory (same node, no copy) or through Ray's object transfer (other nodes). The
    bucket goes as numpy arrays, which Ray stores without pickling their data (plain torch
    tensors measured 6-8x slower here, `bench/weight_transport.py`), each with its torch dtype."""

    def send(self, tensors: dict[Piece, torch.Tensor]) -> Any:
        import ray

        return ray.put(
            {
                piece: (tensor.dtype, tensor.view(_NUMPY_STAND_INS.get(tensor.dtype, tensor.dtype)).numpy())
                for piece, tensor in tensors.items()
            }
        )

    def receive(self, handle: Any) -> dict[Piece, torch.Tensor]:
        import ray

        with warnings.catch_warnings():
            # The arrays are read-only views of shared memory; the engine only copies from them.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return {piece: torch.from_numpy(array).view(dtype) for piece, (dtype, array) in ray.get(handle).items()}


TRANSPORTS = {"object_store": ObjectStoreTransport}


class BucketAssembler:
    """Joins the slices of split parameters; hands out each parameter once it is complete."""

    def __init__(self):
        self._partial: dict[str, tuple[torch.Tensor, int]] = {}  # name -> (buffer, rows filled)

    def add(self, tensors: dict[Piece, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
        """The parameters that `tensors` completes, as (name, tensor)."""
        complete = []
        for piece, tensor in tensors.items():
            if tuple(tensor.shape[1:]) != piece.shape[1:] or tensor.shape[0] != piece.stop - piece.start:
                raise ValueError(f"weight slice {piece} arrived with shape {list(tensor.shape)}")
            if piece.whole:
                complete.append((piece.name, tensor.reshape(piece.shape)))
                continue
            buffer, filled = self._partial.get(piece.name) or (torch.empty(piece.shape, dtype=tensor.dtype), 0)
            buffer[piece.start : piece.stop] = tensor
            filled += piece.stop - piece.start
            if filled == piece.shape[0]:
                del self._partial[piece.name]
                complete.append((piece.name, buffer))
            else:
                self._partial[piece.name] = (buffer, filled)
        return complete

    def incomplete(self) -> list[str]:
        """Parameters of which some slices have not arrived."""
        return sorted(self._partial)


def stream_weights(learner_group, targets: list[tuple[Any, list[int] | None]], bucket_bytes: int) -> int:
    """Stream the learner's weights into the vLLM engines of `targets`, `(env runner group, ids
    or None for all)` pairs, and return the number of buckets once every engine holds them.

    Learner rank 0 sends a bucket (all learners gather it under ZeRO-3) while the engines load
    the one before, so at most two buckets are in flight; a bucket leaves the object store as
    soon as every engine has it (nothing else holds it).
    """

    def on_learners(func) -> list:
        return learner_results(learner_group, learner_group.foreach_learner(func))

    plan, seq_no = on_learners(lambda learner: learner.weight_sync_plan(bucket_bytes))[0]
    for group, ids in targets:
        on_env_runners(group, lambda runner: runner.begin_weight_update(), ids)

    def load_everywhere(handle) -> None:
        for group, ids in targets:
            on_env_runners(group, lambda runner: runner.load_weight_bucket(handle, TRANSPORT), ids)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dapo-weight-load") as loader:
        loading = None
        for bucket in plan:
            sent = on_learners(lambda learner, b=bucket: learner.send_weight_bucket(b, TRANSPORT))
            (handle,) = [h for h in sent if h is not None]
            if loading is not None:
                loading.result()
            loading, handle = loader.submit(load_everywhere, handle), None
        if loading is not None:
            loading.result()
    for group, ids in targets:
        on_env_runners(group, lambda runner: runner.finish_weight_update(seq_no), ids)
    return len(plan)
