"""A DAPOTorchLearner (or its DeepSpeed variant) built without Ray, and its updates on fixed batches: one
optimizer step in this process or in data-parallel worker processes (what tests/algorithm/test_learner_equality.py
compares), and the update of a hand-made token batch (tests/algorithm/test_learner.py's presets, the gradient
check).

Kept out of the test modules so that spawned workers can import it.
"""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

import dapo_rllib  # noqa: F401  (vLLM environment defaults)
from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.columns import Columns, Metrics

SPACES = {DEFAULT_MODULE_ID: (gym.spaces.Box(0, 1, (1,)), gym.spaces.Box(0, 1, (1,)))}
MAX_PROMPT_LENGTH = 6
MAX_RESPONSE_LENGTH = 10
GROUP_SIZE = 4
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def build_learner(model_path: str, *, num_learners: int = 0, **training):
    settings = dict(
        model_path=model_path,
        group_size=GROUP_SIZE,
        max_prompt_length=MAX_PROMPT_LENGTH,
        max_response_length=MAX_RESPONSE_LENGTH,
        overlong_buffer_len=0,
        lr=1e-3,
        lr_warmup_steps=0,
        grad_clip=None,
    )
    config = DAPOConfig().training(**settings | training).learners(num_learners=num_learners)
    config.validate()
    return config.build_learner(spaces=SPACES)


def token_batch_learner(model_path: str, **training):
    """A learner for `token_batch`'s batches: responses of at most 8 tokens (the length Dr. GRPO's norm divides
    by), a step large enough to show, and DAPO's gradient clipping (the gradient check's)."""
    return build_learner(
        model_path, **dict(max_response_length=8, lr=1e-2, grad_clip=DAPOConfig().grad_clip) | training
    )


def token_batch(learner, advantages, lengths):
    """Responses of `lengths` tokens after a 2-token prompt; each token carries its response's
    advantage; old log-probs are the current ones, so every ratio is 1."""
    n, width = len(lengths), max(lengths)
    response_mask = np.array([[1.0] * k + [0.0] * (width - k) for k in lengths], dtype=np.float32)
    batch = {
        Columns.OBS: np.tile([[5, 6]], (n, 1)),
        Columns.PROMPT_MASK: np.ones((n, 2), dtype=np.float32),
        Columns.ACTIONS: (np.arange(width) + 7) * response_mask.astype(np.int64),
        Columns.RESPONSE_MASK: response_mask,
        Columns.LOSS_MASK: response_mask,
        Columns.ADVANTAGES: np.asarray(advantages, dtype=np.float32)[:, None] * response_mask,
    }
    batch = {k: torch.as_tensor(v) for k, v in batch.items()}
    with torch.no_grad():
        batch[Columns.OLD_LOGP] = learner.module[DEFAULT_MODULE_ID].forward_inference(batch)[Columns.LOGP]
    return batch


def update(learner, batch):
    n = batch[Columns.OBS].shape[0]
    samples = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch({k: v.numpy() for k, v in batch.items()})}, env_steps=n)
    results = learner.update(batch=samples, timesteps={})[DEFAULT_MODULE_ID]
    return {key: stats.peek() for key, stats in results.items()}


def uneven_batch(model_path: str, num_groups: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    """Groups of GROUP_SIZE responses of uneven lengths after prompts of uneven lengths, some with
    environment tokens inside (out of the loss); old log-probs off the current ones by noise, so ratios
    differ from 1 and some clip."""
    rng = np.random.default_rng(seed)
    n = num_groups * GROUP_SIZE
    prompt_lengths = rng.integers(2, MAX_PROMPT_LENGTH + 1, size=n)
    response_lengths = rng.integers(1, MAX_RESPONSE_LENGTH + 1, size=n)
    prompt_mask = (np.arange(MAX_PROMPT_LENGTH)[None] >= MAX_PROMPT_LENGTH - prompt_lengths[:, None]).astype(np.float32)
    response_mask = (np.arange(MAX_RESPONSE_LENGTH)[None] < response_lengths[:, None]).astype(np.float32)
    advantages = rng.normal(size=n).astype(np.float32)
    batch = {
        Columns.OBS: rng.integers(3, 40, size=(n, MAX_PROMPT_LENGTH)) * prompt_mask.astype(np.int64),
        Columns.PROMPT_MASK: prompt_mask,
        Columns.ACTIONS: rng.integers(3, 40, size=(n, MAX_RESPONSE_LENGTH)) * response_mask.astype(np.int64),
        Columns.RESPONSE_MASK: response_mask,
        Columns.LOSS_MASK: response_mask * (rng.random(n) > 0.15)[:, None],  # some overlong-filtered
        Columns.ADVANTAGES: advantages[:, None] * response_mask,
    }
    # Some responses are multi-turn episodes: environment tokens (a tool's output) at positions 1-2, in the
    # sequence but out of the loss.
    for row in np.flatnonzero((response_lengths >= 4) & (rng.random(n) < 0.5)):
        batch[Columns.LOSS_MASK][row, 1:3] = 0.0
    learner = build_learner(model_path)
    with torch.no_grad():
        logp = (
            learner.module[DEFAULT_MODULE_ID]
            .forward_inference({k: torch.as_tensor(v) for k, v in batch.items()})[Columns.LOGP]
            .numpy()
        )
    batch[Columns.OLD_LOGP] = (logp + rng.normal(scale=0.3, size=logp.shape) * response_mask).astype(np.float32)
    return batch


def one_step(learner, batch: dict[str, np.ndarray]) -> dict:
    """Loss, grad norm, updated weights and (without DeepSpeed) gradients after one optimizer
    step on `batch` (one mini-batch)."""
    n = len(batch[Columns.OBS])
    samples = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(dict(batch))}, env_steps=n)
    results = learner.update(
        batch=samples, timesteps={}, minibatch_size=n, num_epochs=1, shuffle_batch_per_epoch=False
    )[DEFAULT_MODULE_ID]
    out = {key: float(results[key].peek()) for key in (Metrics.POLICY_LOSS, Metrics.GRAD_NORM, Metrics.MICRO_BATCHES)}
    # The whole parameters (gathered if ZeRO-3 shards them), as checkpoints and weight sync see them.
    module_state = learner.get_state(components="rl_module")["rl_module"][DEFAULT_MODULE_ID]
    out["weights"] = {k.removeprefix("model."): torch.as_tensor(v) for k, v in module_state.items()}
    if learner.config.deepspeed_config is None:
        # The step's gradients stay on the parameters until the next step zeroes them (ZeRO
        # keeps its own, partitioned).
        out["grads"] = {
            name: p.grad.detach().clone()
            for name, p in learner.module[DEFAULT_MODULE_ID].unwrapped().model.named_parameters()
            if p.requires_grad  # with LoRA, the adapters only
        }
    return out


def data_parallel_worker(
    rank: int, world_size: int, port: int, model_path: str, batch: dict, runs: list[dict], out_dir: str
) -> None:
    """Rank `rank` of `world_size` learners: one step per entry of `runs` on its contiguous
    share of whole groups; rank 0 saves the results as out_dir/results.pt."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank)
    )
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world_size)
    rows = len(batch[Columns.OBS]) // world_size
    share = {k: v[rank * rows : (rank + 1) * rows] for k, v in batch.items()}
    results = [one_step(build_learner(model_path, num_learners=world_size, **settings), share) for settings in runs]
    if rank == 0:
        torch.save(results, os.path.join(out_dir, "results.pt"))
    torch.distributed.destroy_process_group()
