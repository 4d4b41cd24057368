"""DAPOTorchLearner on the tiny model: the loss each preset asks for and RLlib's gradient clipping
(the skip of a step whose gradient is not finite: test_gradient_safety.py)."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.columns import Columns, Metrics

# The module ignores the spaces (its shapes come from the model); RLlib needs some to build it.
SPACES = {DEFAULT_MODULE_ID: (gym.spaces.Box(0, 1, (1,)), gym.spaces.Box(0, 1, (1,)))}
MAX_RESPONSE_LENGTH = 8


def build_learner(model_path, **training):
    config = DAPOConfig().training(
        model_path=model_path,
        max_response_length=MAX_RESPONSE_LENGTH,
        overlong_buffer_len=0,
        lr=1e-2,
        lr_warmup_steps=0,
        **training,
    )
    config.validate()
    return config.build_learner(spaces=SPACES)


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


def loss_of(learner, batch):
    module = learner.module[DEFAULT_MODULE_ID]
    config = learner.config.get_config_for_module(DEFAULT_MODULE_ID)
    return learner.compute_loss_for_module(
        module_id=DEFAULT_MODULE_ID, config=config, batch=batch, fwd_out=module.forward_train(batch)
    ).item()


PRESETS = {
    # At ratio 1 every token's loss is -A. Advantages (+1, -1) on responses of 1 and 3 tokens:
    # GRPO averages per response first: ((-1) + (+1)) / 2 = 0; its KL to the (identical) initial
    # policy is 0.
    "naive GRPO": (
        dict(
            policy_loss="ppo_clip",
            clip_eps_high=0.2,
            clip_ratio_c=None,
            loss_agg_mode="seq-mean-token-mean",
            adv_estimator="grpo",
            kl_coef=0.001,
        ),
        0.0,
    ),
    # DAPO weighs every token the same: (-1 + 3 * 1) / 4 tokens = 0.5.
    "DAPO": (dict(), 0.5),
    # Dr. GRPO divides each response's token sum by max_response_length = 8: (-1/8 + 3/8) / 2.
    "Dr. GRPO": (dict(loss_agg_mode="seq-mean-token-sum-norm", adv_estimator="dr_grpo", clip_eps_high=0.2), 0.125),
}


@pytest.mark.parametrize("preset", PRESETS)
def test_each_preset_is_a_config_that_reaches_the_learners_loss(tiny_model_path, preset):
    settings, expected = PRESETS[preset]
    learner = build_learner(tiny_model_path, **settings)
    assert loss_of(learner, token_batch(learner, [1.0, -1.0], [1, 3])) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("grad_clip_by", ["value", "norm", "global_norm"])
def test_rllibs_grad_clip_by_is_honoured(tiny_model_path, grad_clip_by):
    learner = build_learner(tiny_model_path, grad_clip=0.5, grad_clip_by=grad_clip_by)
    params = list(learner.module[DEFAULT_MODULE_ID].parameters())
    grads = {learner.get_param_ref(p): torch.full_like(p, 3.0) for p in params}
    clipped = learner.postprocess_gradients_for_module(
        module_id=DEFAULT_MODULE_ID, config=learner.config, module_gradients_dict=grads
    )
    values = list(clipped.values())
    if grad_clip_by == "value":
        assert all(torch.all(g == 0.5) for g in values)
    elif grad_clip_by == "norm":
        assert all(torch.linalg.vector_norm(g).item() == pytest.approx(0.5, rel=1e-4) for g in values)
    else:
        assert torch.nn.utils.get_total_norm(values).item() == pytest.approx(0.5, rel=1e-4)


def update(learner, batch):
    n = batch[Columns.OBS].shape[0]
    samples = MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch({k: v.numpy() for k, v in batch.items()})}, env_steps=n)
    results = learner.update(batch=samples, timesteps={})[DEFAULT_MODULE_ID]
    return {key: stats.peek() for key, stats in results.items()}


def test_one_optimizer_step_per_batch_needs_no_old_log_probs(tiny_model_path):
    # One mini-batch per training step: the connector leaves OLD_LOGP out and the learner uses its
    # own forward pass, detached (every ratio is 1, nothing clips).
    learner = build_learner(tiny_model_path, train_batch_size_prompts=32, minibatch_size_prompts=32)
    assert not learner.config.recomputes_old_logp
    batch = token_batch(learner, [1.0, -1.0], [1, 3])
    del batch[Columns.OLD_LOGP]
    results = update(learner, batch)
    assert results[Metrics.RATIO_MEAN] == pytest.approx(1.0) and results[Metrics.APPROX_KL] == 0.0
    assert results[Metrics.PG_CLIPFRAC_LOW] == results[Metrics.PG_CLIPFRAC_HIGH] == 0.0
    assert results[Metrics.POLICY_LOSS] == pytest.approx(0.5, abs=1e-6)  # DAPO's token mean at ratio 1
