"""DAPOTorchLearner on the tiny model: the loss each preset asks for and RLlib's gradient clipping
(the skip of a step whose gradient is not finite: test_gradient_safety.py)."""

import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from dapo_rllib.columns import Columns, Metrics
from tests.support.learners import token_batch, token_batch_learner, update


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
    learner = token_batch_learner(tiny_model_path, **settings)
    assert loss_of(learner, token_batch(learner, [1.0, -1.0], [1, 3])) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("grad_clip_by", ["value", "norm", "global_norm"])
def test_rllibs_grad_clip_by_is_honoured(tiny_model_path, grad_clip_by):
    learner = token_batch_learner(tiny_model_path, grad_clip=0.5, grad_clip_by=grad_clip_by)
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


def test_one_optimizer_step_per_batch_needs_no_old_log_probs(tiny_model_path):
    # One mini-batch per training step: the connector leaves OLD_LOGP out and the learner uses its
    # own forward pass, detached (every ratio is 1, nothing clips).
    learner = token_batch_learner(tiny_model_path, train_batch_size_prompts=32, minibatch_size_prompts=32)
    assert not learner.config.recomputes_old_logp
    batch = token_batch(learner, [1.0, -1.0], [1, 3])
    del batch[Columns.OLD_LOGP]
    results = update(learner, batch)
    assert results[Metrics.RATIO_MEAN] == pytest.approx(1.0) and results[Metrics.APPROX_KL] == 0.0
    assert results[Metrics.PG_CLIPFRAC_LOW] == results[Metrics.PG_CLIPFRAC_HIGH] == 0.0
    assert results[Metrics.POLICY_LOSS] == pytest.approx(0.5, abs=1e-6)  # DAPO's token mean at ratio 1
