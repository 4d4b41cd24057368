"""DAPO's gradient check, one for the plain and the DeepSpeed learner: a step whose gradient is not
finite is skipped and counted (grad_steps_skipped), and leaves no trace: the weights stay as they
were, and the next step is the one a fresh learner takes."""

import math
import os

import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from dapo_rllib.algorithm.deepspeed_learner import load_deepspeed_config
from dapo_rllib.columns import Columns, Metrics
from tests.support.learners import token_batch, token_batch_learner, update

LEARNERS = {"plain": None, "ZeRO-2": {"zero_optimization": {"stage": 2}}, "ZeRO-3": {"zero_optimization": {"stage": 3}}}


@pytest.fixture
def restored_environ():
    """A DeepSpeed learner in this process sets RANK, WORLD_SIZE, ...: they are undone afterwards
    (Ray workers started later would inherit them). Its one-process group stays, as DeepSpeed
    keeps hold of it (and as in a driver that runs a local learner)."""
    environ = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(environ)


def weights(learner) -> dict[str, torch.Tensor]:
    """The whole parameters (gathered under ZeRO-3)."""
    state = learner.get_state(components="rl_module")["rl_module"][DEFAULT_MODULE_ID]
    return {name: torch.as_tensor(value).clone() for name, value in state.items()}


@pytest.mark.parametrize("kind", LEARNERS)
def test_a_non_finite_gradient_skips_the_step_and_is_counted(tiny_model_path, restored_environ, kind):
    learner = token_batch_learner(tiny_model_path, deepspeed_config=LEARNERS[kind])
    before = weights(learner)
    poisoned = token_batch(learner, [1.0, -1.0], [1, 3])
    poisoned[Columns.ADVANTAGES][1, 0] = float("nan")  # a nan loss, so nan gradients
    results = update(learner, poisoned)
    assert results[Metrics.GRAD_STEPS_SKIPPED] == 1 and math.isnan(results[Metrics.GRAD_NORM])
    after = weights(learner)
    assert all(torch.equal(before[name], after[name]) for name in before)

    # The same batch without the nan trains, exactly as on a learner that never saw the nan (no
    # optimizer state or step count was touched): the skip, not the batch, kept the weights.
    clean = token_batch(learner, [1.0, -1.0], [1, 3])
    results = update(learner, clean)
    assert results[Metrics.GRAD_STEPS_SKIPPED] == 0 and math.isfinite(results[Metrics.GRAD_NORM])
    trained = weights(learner)
    assert any(not torch.equal(after[name], trained[name]) for name in after)
    fresh = token_batch_learner(tiny_model_path, deepspeed_config=LEARNERS[kind])
    update(fresh, clean)
    for name, value in weights(fresh).items():
        torch.testing.assert_close(trained[name], value, rtol=0, atol=0, msg=lambda m: f"{name}: {m}")


def test_a_deepspeed_config_without_the_gradient_norm_is_refused():
    # ZeRO-2 can skip computing the global gradient norm; then a nan step would be taken, uncounted.
    with pytest.raises(ValueError, match="compute_grad_norm=false"):
        load_deepspeed_config({"zero_optimization": {"stage": 2, "compute_grad_norm": False}})
