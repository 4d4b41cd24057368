"""DAPO's learner under DeepSpeed ZeRO: parameters, gradients and optimizer state sharded.

RLlib's TorchLearner knows one device per learner and DDP (docs/design/rllib.md §5); this learner
hands DAPO's own model and AdamW to `deepspeed.initialize`, so ZeRO stage 2 (gradients and
optimizer state sharded) or 3 (parameters too), with optional optimizer offload to host
memory, trains the same loss. On CPU DeepSpeed runs with `DS_ACCELERATOR=cpu` and gloo.

What stays DAPO's (a DeepSpeed config that sets these is refused, see `load_deepspeed_config`):
batch sizes and accumulation (mini-batches of `minibatch_size_prompts` groups, micro-batches of
`max_tokens_per_micro_batch` tokens), clipping (`grad_clip`), the optimizer and its schedule
(AdamW, `lr`, `weight_decay`, `lr_warmup_steps`), and the precision (`model_dtype`).

State: the module state is always the full parameters (ZeRO-3 gathers them), so weight sync,
Hugging Face export and checkpoints see an ordinary model; the optimizer state stays sharded:
each learner keeps its own shard, and `DeepSpeedLearnerGroup` collects the shards of all
learners into the checkpoint and gives each its own back on restore.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
from pathlib import Path
from typing import Any, ClassVar

import torch
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_OPTIMIZER, COMPONENT_RL_MODULE
from ray.rllib.core.learner.learner_group import LearnerGroup
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils.annotations import override

from dapo_rllib.algorithm.learner import DAPOTorchLearner
from dapo_rllib.deepspeed_private import skip_shared_memory_comm_build
from dapo_rllib.ray_private import learner_results, subcomponents, wants_component
from dapo_rllib.settings import NOT_FLAT, FeatureSettings, require

ZERO_OPTIMIZER_SHARDS = "zero_optimizer_shards"  # learner state: {rank: that rank's ZeRO optimizer state}

# DeepSpeed settings DAPO owns, and the DAPO setting to use instead.
DAPO_OWNED = {
    "train_batch_size": "train_batch_size_prompts / minibatch_size_prompts",
    "train_micro_batch_size_per_gpu": "max_tokens_per_micro_batch",
    "gradient_accumulation_steps": "max_tokens_per_micro_batch (micro-batches per optimizer step follow from it)",
    "gradient_clipping": "grad_clip",
    "optimizer": "lr and weight_decay (DAPO's AdamW)",
    "scheduler": "lr_warmup_steps",
    "fp16": "model_dtype (float16 training with loss scaling is not supported)",
}


def load_deepspeed_config(value: dict | str | os.PathLike) -> dict:
    """The user's DeepSpeed config (a dict or a JSON file), checked against DAPO's settings.

    Raises:
        ValueError: not a dict or JSON object, a setting DAPO owns, or a ZeRO stage other than 2 or 3.
        OSError: the JSON file cannot be read.
    """
    if isinstance(value, (str, os.PathLike)):
        text = Path(value).read_text()
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{str(value)!r} is not a JSON file: {error}") from None
    if not isinstance(value, dict):
        raise ValueError(f"expected a dict or the path of a JSON file, got {type(value).__name__}")
    for key, instead in DAPO_OWNED.items():
        if key in value:
            raise ValueError(f"{key!r} is DAPO's to set, not DeepSpeed's: use {instead}")
    zero = value.get("zero_optimization", {})
    if zero.get("stage") not in (2, 3):
        raise ValueError(f"zero_optimization.stage={zero.get('stage')!r}; expected 2 or 3")
    if zero["stage"] == 2 and zero.get("offload_optimizer", {}).get("device", "none") != "none":
        # DeepSpeed 0.19.8's stage 2 loses its fp32 gradient buffer at an accumulation boundary
        # set by hand (AttributeError in copy_grads_in_partition); stage 3 offloads fine.
        raise ValueError(
            "offload_optimizer needs zero_optimization.stage=3 here: stage 2 with offload fails under gradient accumulation"
        )
    if not zero.get("compute_grad_norm", True):
        raise ValueError("zero_optimization.compute_grad_norm=false: DAPO checks the gradient norm of every step")
    return value


def engine_config(user_config: dict, *, grad_clip: float | None, model_dtype: str) -> dict:
    """The config handed to `deepspeed.initialize`: the user's ZeRO settings plus DAPO's."""
    bf16 = user_config.get("bf16", {}).get("enabled")
    if bf16 is not None and bf16 != (model_dtype == "bfloat16"):
        raise ValueError(
            f"deepspeed_config bf16.enabled={bf16} contradicts model_dtype={model_dtype!r}; leave bf16 out, it follows model_dtype"
        )
    return user_config | {
        # One micro-batch per backward; DAPO decides where an optimizer step ends.
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": grad_clip or 0.0,
        "bf16": {"enabled": model_dtype == "bfloat16"},
        # The optimizer is DAPO's torch AdamW, also when its state is offloaded to host memory.
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 2**31 - 1,
    }


@dataclasses.dataclass(frozen=True)
class DeepSpeedSettings(FeatureSettings):
    """The learner under DeepSpeed ZeRO (`DAPOConfig.training`).

    Attributes:
        config: ``deepspeed_config``: a DeepSpeed config dict or the path of a JSON file (stage 2 or 3,
            optional optimizer offload). Batch sizes, clipping and the optimizer stay DAPO's settings
            and must not be set there (`DAPO_OWNED`). None: plain PyTorch (DDP with several learners).
        grad_clip, grad_clip_by, model_dtype: The config's own settings that the engine's config
            follows (not settings of their own).
    """

    prefix: ClassVar[str] = "deepspeed_"
    config: dict | str | None = None
    grad_clip: float | None = dataclasses.field(default=None, metadata=NOT_FLAT)
    grad_clip_by: str = dataclasses.field(default="global_norm", metadata=NOT_FLAT)
    model_dtype: str = dataclasses.field(default="float32", metadata=NOT_FLAT)

    @classmethod
    def from_config(cls, config) -> DeepSpeedSettings:
        """The settings in `config` (a `DAPOConfig`), with the config's own settings the engine's config follows."""
        return cls.from_flat(
            config, grad_clip=config.grad_clip, grad_clip_by=config.grad_clip_by, model_dtype=config.model_dtype
        )

    def initialize_config(self) -> dict:
        """The config handed to `deepspeed.initialize` (`engine_config`)."""
        return engine_config(load_deepspeed_config(self.config), grad_clip=self.grad_clip, model_dtype=self.model_dtype)

    def validate(self) -> None:
        if self.config is None:
            return
        try:
            self.initialize_config()
        except (ValueError, OSError) as error:
            raise ValueError(f"deepspeed_config={self.config!r}: {error}") from None
        require(
            self.grad_clip_by == "global_norm",
            f"grad_clip_by={self.grad_clip_by!r}: under DeepSpeed gradients are clipped by their global norm only",
        )


def init_single_process_group() -> None:
    """A one-process gloo group for a local learner (`num_learners` 0 or 1): DeepSpeed needs
    torch.distributed, which RLlib only starts for several learners."""
    if torch.distributed.is_initialized():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)


class DAPODeepSpeedLearner(DAPOTorchLearner):
    """DAPOTorchLearner with the model and AdamW wrapped by a DeepSpeed engine."""

    @override(TorchLearner)
    def build(self) -> None:
        if not torch.cuda.is_available():
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed

        skip_shared_memory_comm_build()
        init_single_process_group()
        # Each learner sees one device (RLlib's learner actors do not share GPUs): local rank 0.
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("RANK", str(torch.distributed.get_rank()))
        os.environ.setdefault("WORLD_SIZE", str(torch.distributed.get_world_size()))
        super().build()
        self._engines = {}
        self._restoring, self._pending_shards = False, None  # see restore_from_path
        for module_id in self.module.keys():
            settings = DeepSpeedSettings.from_config(self.config.get_config_for_module(module_id))
            ((_, optimizer),) = self.get_optimizers_for_module(module_id)
            engine, *_ = deepspeed.initialize(
                model=self.module[module_id].unwrapped().model, optimizer=optimizer, config=settings.initialize_config()
            )
            self.module[module_id].unwrapped().run_forward_with(engine)
            self._engines[module_id] = engine

    @override(TorchLearner)
    def _make_modules_ddp_if_necessary(self) -> None:
        """No DDP wrapper: DeepSpeed does the data parallelism."""

    @property
    def zero_stage(self) -> int:
        return next(iter(self._engines.values())).zero_optimization_stage()

    # ----- the update: DeepSpeed's backward and step -----------------------------------------
    def num_forward_passes(self, num_micro_batches: int) -> int:
        """The most micro-batches of any learner: under ZeRO-3 every forward pass gathers
        parameters from all learners, so all must run the same number of passes."""
        return int(self.all_reduce(torch.tensor(num_micro_batches), torch.distributed.ReduceOp.MAX))

    def backward(self, module_id, loss: torch.Tensor, *, last: bool) -> None:
        engine = self._engines[module_id]
        # The gradients are reduced across learners once, after the last pass of the step.
        engine.set_gradient_accumulation_boundary(last)
        # DeepSpeed averages the learners' gradients; DAPO's loss pieces are shares of the
        # global sum, so scale them up by the learner count.
        engine.backward(loss * self.world_size(), scale_wrt_gas=False)

    def optimizer_step(self, module_ids: list) -> None:
        """DeepSpeed's step (clipping at `grad_clip`; a non-finite global norm is an overflow that it
        skips, fp32 and bf16 alike, and reports as inf), then DAPO's check of that norm."""
        for module_id in module_ids:
            self._engines[module_id].step()
            self.check_grad_norm(module_id, self._engines[module_id].get_global_grad_norm())

    # ----- state: full parameters, sharded optimizer -------------------------------------
    @override(TorchLearner)
    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict[str, Any]:
        """RLlib's learner state, with the full parameters (gathered under ZeRO-3; a collective:
        every learner must call it, see `DeepSpeedLearnerGroup`) and, instead of the torch
        optimizer's state, this learner's ZeRO optimizer shard."""
        with self._full_parameters():
            state = super().get_state(
                components, not_components=[*_as_list(not_components), COMPONENT_OPTIMIZER], **kwargs
            )
        wanted = wants_component(self, COMPONENT_OPTIMIZER, components, not_components)
        if wanted and not kwargs.get("inference_only"):
            # ZeRO's state dict points at its live buffers: a copy, or training would change it.
            state[ZERO_OPTIMIZER_SHARDS] = {
                torch.distributed.get_rank(): {
                    mid: _copied(e.optimizer.state_dict()) for mid, e in self._engines.items()
                }
            }
        return state

    @override(TorchLearner)
    def set_state(self, state: dict[str, Any]) -> None:
        shards = state.get(ZERO_OPTIMIZER_SHARDS)
        rest = {k: v for k, v in state.items() if k not in (ZERO_OPTIMIZER_SHARDS, COMPONENT_OPTIMIZER)}
        gather = COMPONENT_RL_MODULE in rest and not self._restoring
        with self._full_parameters(modify=True) if gather else contextlib.nullcontext():
            super().set_state(rest)
        if self._restoring:
            self._pending_shards = shards
        else:
            self._load_optimizer_shards(shards)

    @override(TorchLearner)
    def restore_from_path(self, *args, **kwargs) -> None:
        # RLlib restores the RL module as a component of its own, past `set_state`: gather
        # around all of it, and load the optimizer shards once the parameters are partitioned.
        self._restoring, self._pending_shards = True, None
        try:
            with self._full_parameters(modify=True):
                super().restore_from_path(*args, **kwargs)
        finally:
            self._restoring = False
        self._load_optimizer_shards(self._pending_shards)

    def _load_optimizer_shards(self, shards: dict | None) -> None:
        if shards is None:
            # Weights without optimizer state: ZeRO's fp32 master copy must follow them.
            for engine in self._engines.values():
                engine.optimizer.refresh_fp32_params()
            return
        if sorted(shards) != list(range(self.world_size())):
            raise ValueError(
                f"the checkpoint holds ZeRO optimizer shards of learners {sorted(shards)}; this run has {self.world_size()} learners: resume with num_learners={len(shards)}"
            )
        for module_id, engine in self._engines.items():
            # DeepSpeed takes every learner's shard and picks its own; the fp32 master weights
            # come from the shard, so a bf16 model resumes exactly too.
            engine.optimizer.load_state_dict(
                [shards[rank][module_id] for rank in sorted(shards)], load_from_fp32_weights=True
            )

    @staticmethod
    def full_shape(param: torch.Tensor) -> tuple[int, ...]:
        # ZeRO-3 leaves each learner an empty placeholder and records the real shape.
        return tuple(getattr(param, "ds_shape", param.shape))

    def gathered(self, params: list, modify: bool = False):
        """Under ZeRO-3, a context in which `params` are whole (changes made in it are kept
        when `modify`); a collective: every learner must enter it. Under ZeRO-2 parameters
        are whole anyway."""
        import deepspeed

        if self.zero_stage < 3:
            return contextlib.nullcontext()
        return deepspeed.zero.GatheredParameters(params, modifier_rank=0 if modify else None)

    def _full_parameters(self, modify: bool = False):
        return self.gathered([p for engine in self._engines.values() for p in engine.module.parameters()], modify)


def _copied(value):
    """`value` with every tensor in it cloned (ZeRO-2's flat buffers refuse `copy.deepcopy`)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(v) for v in value)
    return value


def _as_list(components) -> list:
    if components is None:
        return []
    return [components] if isinstance(components, str) else list(components)


class DeepSpeedLearnerGroup(LearnerGroup):
    """RLlib's LearnerGroup, but state is read from every learner at once.

    RLlib reads a learner group's state from learner 0 alone. Under ZeRO that would hang
    (gathering parameters is a collective) and lose the other learners' optimizer shards, so
    here all learners take part, learner 0's state is kept, and the shards of all are merged.
    """

    @override(LearnerGroup)
    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict[str, Any]:
        if self.is_local or not wants_component(self, COMPONENT_LEARNER, components, not_components):
            return super().get_state(components, not_components=not_components, **kwargs)
        comps = subcomponents(self, COMPONENT_LEARNER, components)
        kwargs["not_components"] = subcomponents(self, COMPONENT_LEARNER, not_components)
        states = learner_results(self, self.foreach_learner(lambda learner: learner.get_state(comps, **kwargs)))
        merged = dict(states[0])
        if ZERO_OPTIMIZER_SHARDS in merged:
            merged[ZERO_OPTIMIZER_SHARDS] = {
                rank: shard for s in states for rank, shard in s[ZERO_OPTIMIZER_SHARDS].items()
            }
        return {COMPONENT_LEARNER: merged}
