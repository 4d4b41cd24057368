"""DAPO with two DeepSpeed ZeRO-3 learners (Ray learner actors, gloo on CPU) in RLlib's real loop:
whole parameters reach vLLM and the exported model, and a checkpoint holding both learners'
optimizer shards resumes exactly; with LoRA, the adapter gathered from both shards reaches vLLM and
a checkpoint resumes exactly.

The engine runs in the driver (num_env_runners=0): what is sharded here is the learners, and the gathered
weights stream into a driver's engine as into an actor's. Each run restores its checkpoint in place (the
learner actors load their own optimizer shards), as a restarted trial does; a new algorithm restored from a
checkpoint is tests/algorithm/test_dapo_integration.py's."""

import numpy as np
import pytest

from dapo_rllib.columns import Metrics
from tests.support.runs import CHECKED, engine_weights, tiny_config, unpadded


def learner_weights(algo):
    """The learners' whole parameters (gathered from their ZeRO-3 shards) under Hugging Face names."""
    state = algo.learner_group.get_state(components="learner/rl_module")["learner"]["rl_module"]["default_policy"]
    return {k.removeprefix("model."): np.asarray(v) for k, v in state.items()}


@pytest.fixture(scope="module")
def zero3(ray_session, tiny_model_path, tmp_path_factory):
    config = (
        tiny_config(
            tiny_model_path, deepspeed_config={"zero_optimization": {"stage": 3}}, max_tokens_per_micro_batch=256
        )
        .env_runners(num_env_runners=0)
        .learners(num_learners=2, num_cpus_per_learner=0.5)
    )
    algo = config.build_algo()
    try:
        initial = learner_weights(algo)
        first = algo.train()
        checkpoint = tmp_path_factory.mktemp("zero3") / "ckpt"
        algo.save_to_path(str(checkpoint))
        after_first = learner_weights(algo)
        engine_after_first = engine_weights(algo)
        continued = algo.train()
        continued_weights = learner_weights(algo)
        export_dir = algo.export_hf_model(tmp_path_factory.mktemp("zero3_hf") / "hf")
        algo.restore_from_path(str(checkpoint))
        resumed = algo.train()
        resumed_weights = learner_weights(algo)
    finally:
        algo.stop()
    return dict(
        initial=initial,
        first=first,
        after_first=after_first,
        engine_after_first=engine_after_first,
        continued=continued,
        continued_weights=continued_weights,
        resumed=resumed,
        resumed_weights=resumed_weights,
        export_dir=export_dir,
    )


def test_two_zero3_learners_train_on_whole_groups(zero3):
    learner = zero3["first"]["learners"]["default_policy"]
    # 8 groups of 4: each learner trained 4 groups (16 episodes) in 2 steps of 2 groups.
    assert learner["num_module_steps_trained"] == 32
    assert np.isfinite(learner[Metrics.GRAD_NORM]) and learner[Metrics.GRAD_NORM] > 0
    moved = max(np.abs(zero3["after_first"][k] - v).max() for k, v in zero3["initial"].items())
    assert moved > 1e-4


def test_vllm_gets_the_whole_gathered_parameters(zero3):
    for name in CHECKED:
        learner = zero3["after_first"][name]
        np.testing.assert_allclose(
            unpadded(zero3["engine_after_first"][name], learner), learner, atol=1e-6, err_msg=name
        )


def test_export_writes_the_whole_parameters(zero3):
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(zero3["export_dir"]).state_dict()
    for name, value in zero3["continued_weights"].items():
        np.testing.assert_array_equal(exported[name].numpy(), value, err_msg=name)


def test_checkpoint_with_both_optimizer_shards_resumes_exactly(zero3):
    resumed, continued = zero3["resumed"], zero3["continued"]
    assert resumed["training_iteration"] == continued["training_iteration"] == 2
    for key in ("acc_mean", "reward_mean", "response_length_mean"):
        assert resumed[Metrics.ROLLOUT][key] == continued[Metrics.ROLLOUT][key], key
    rl, cl = resumed["learners"]["default_policy"], continued["learners"]["default_policy"]
    for key in (Metrics.POLICY_LOSS, Metrics.GRAD_NORM, Metrics.ENTROPY):
        assert rl[key] == pytest.approx(cl[key], rel=1e-5, abs=1e-7), key
    for name, value in zero3["continued_weights"].items():
        np.testing.assert_allclose(zero3["resumed_weights"][name], value, rtol=1e-5, atol=1e-7, err_msg=name)


def test_two_zero3_learners_sync_the_adapter_and_resume_exactly(ray_session, tiny_model_path, tmp_path):
    """LoRA under ZeRO-3."""

    def adapters(algo):  # the learners' whole adapters, gathered from their ZeRO-3 shards
        state = algo.learner_group.get_state(components="learner/rl_module")["learner"]["rl_module"]
        return {k: np.asarray(v) for k, v in state["default_policy"].items()}

    config = (
        tiny_config(
            tiny_model_path,
            lora_rank=8,
            lora_sync="adapter",  # the path that streams the adapter gathered from its shards
            lr=2e-3,
            train_on_partial_batch=True,
            deepspeed_config={"zero_optimization": {"stage": 3}},
        )
        .env_runners(num_env_runners=0)
        .learners(num_learners=2, num_cpus_per_learner=0.5)
    )
    algo = config.build_algo()
    try:
        algo.train()
        algo.save_to_path(str(tmp_path / "checkpoint"))
        continued = algo.train()
        continued_adapters = adapters(algo)
        # Back to the checkpoint in the same algorithm (its learners load their optimizer shards).
        algo.restore_from_path(str(tmp_path / "checkpoint"))
        resumed = algo.train()
        resumed_adapters = adapters(algo)
    finally:
        algo.stop()
    # The second step sampled with the adapter gathered from both learners' shards after the first.
    assert continued["learners"]["default_policy"][Metrics.ROLLOUT_LOGP_ABS_DIFF] < 1e-5
    r, c = resumed["learners"]["default_policy"], continued["learners"]["default_policy"]
    for key in (Metrics.POLICY_LOSS, Metrics.GRAD_NORM):
        assert r[key] == pytest.approx(c[key], rel=1e-5, abs=1e-7), key
    assert continued_adapters and all("lora_" in name for name in continued_adapters)
    for name, value in continued_adapters.items():
        np.testing.assert_allclose(resumed_adapters[name], value, rtol=1e-5, atol=1e-7, err_msg=name)
