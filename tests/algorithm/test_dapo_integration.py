"""DAPO through RLlib's real loop: vLLM env runner, learner, weight sync, checkpoint restore."""

import json

import numpy as np
import pytest
from ray.rllib.algorithms.algorithm import Algorithm

import dapo_rllib  # noqa: F401
from dapo_rllib.columns import Metrics
from dapo_rllib.models.rl_module import hf_weights
from dapo_rllib.reporting.progress import summary_line
from tests.support.runs import CHECKED, engine_weights, learner_weights, tiny_config, unpadded


@pytest.fixture(scope="module")
def trained(ray_session, tiny_model_path, tmp_path_factory):
    # train_on_partial_batch: were the groups a model leaves informative to run out at the round
    # cap, iterations 3 and 4 (`resumed`) would train the same partial batch twice, not stop.
    config = tiny_config(tiny_model_path, train_on_partial_batch=True).env_runners(num_env_runners=1)
    config = config.evaluation(evaluation_interval=2, val_before_train=True)
    algo = config.build_algo()
    initial_engine = engine_weights(algo)
    initial_learner = learner_weights(algo)
    results = [algo.train() for _ in range(2)]
    checkpoint = tmp_path_factory.mktemp("ckpt") / "dapo"
    algo.save_to_path(str(checkpoint))
    yield dict(
        algo=algo,
        results=results,
        initial_engine=initial_engine,
        initial_learner=initial_learner,
        checkpoint=checkpoint,
    )
    algo.stop()


def test_two_iterations_train_and_report_dapo_metrics(trained):
    for result in trained["results"]:
        rollout = result[Metrics.ROLLOUT]
        assert rollout["groups_kept"] == 8
        assert 1 <= rollout["generation_rounds"] <= 8
        assert 0 < rollout["groups_kept_fraction"] <= 1
        learner = result["learners"]["default_policy"]
        for key in (
            "policy_loss",
            "entropy",
            "pg_clipfrac_low",
            "pg_clipfrac_high",
            "pg_clipfrac_dual",
            "approx_kl",
            "grad_norm",
            "mean_token_prob",
        ):
            assert np.isfinite(learner[key]), key
        assert 0 < learner["mean_token_prob"] <= 1
    # Warmup (lr_warmup_steps=2): step 0 uses lr/2 = 3e-4/2 = 1.5e-4, step 1 the full lr 3e-4.
    lrs = [r["learners"]["default_policy"]["default_optimizer_learning_rate"] for r in trained["results"]]
    assert lrs == pytest.approx([1.5e-4, 3e-4])
    changed = [
        k for k, v in learner_weights(trained["algo"]).items() if not np.array_equal(v, trained["initial_learner"][k])
    ]
    assert "model.embed_tokens.weight" in changed


def test_vllm_and_the_learner_agree_on_the_sampled_tokens_log_probs(trained):
    # float32 on both sides, same weights (the batch gets two optimizer steps, so the old
    # log-probs are recomputed by the learner before the first): only kernels differ.
    for result in trained["results"]:
        learner = result["learners"]["default_policy"]
        assert 0 <= learner["rollout_logp_abs_diff"] <= learner["rollout_logp_abs_diff_max"]
        assert learner["rollout_logp_abs_diff"] < 0.01
        assert "rollout_is_weight_mean" not in learner  # rollout_correction is off by default
        assert "tis_weight" not in summary_line(result)
        assert result[Metrics.ROLLOUT]["weight_sync_buckets"] == 1  # the tiny model fits one bucket


def test_validation_runs_before_training_and_on_the_evaluation_interval(trained):
    first, second = trained["results"]
    before = first["evaluation_before_training"]["arithmetic"]
    assert (before["num_problems"], before["num_samples"]) == (16, 32)
    assert 0.0 <= before["avg@2"] <= before["pass@2"] <= 1.0
    # evaluation_interval=2: iteration 1 reports no validation, iteration 2 does.
    assert "evaluation" not in first
    assert "evaluation_before_training" not in second
    after = second["evaluation"]["arithmetic"]
    assert set(after) >= {
        "avg@2",
        "pass@1",
        "pass@2",
        "maj@2",
        "response_length_mean",
        "truncation_ratio",
        "scoring_timeouts",
    }
    assert after["num_problems"] == 16


def test_engine_weights_follow_the_learner_after_sync(trained):
    engine = engine_weights(trained["algo"])
    learner = hf_weights({f"model.{k}": v for k, v in learner_weights(trained["algo"]).items()})
    for name in CHECKED:
        np.testing.assert_allclose(unpadded(engine[name], learner[name]), learner[name], rtol=0, atol=1e-6)
    assert not np.array_equal(
        engine["model.embed_tokens.weight"], trained["initial_engine"]["model.embed_tokens.weight"]
    )


def test_checkpoint_restores_identical_weights_and_step_count(trained):
    restored = Algorithm.from_checkpoint(str(trained["checkpoint"]))
    try:
        original, again = learner_weights(trained["algo"]), learner_weights(restored)
        assert original.keys() == again.keys()
        for k in original:
            np.testing.assert_array_equal(original[k], again[k])
        assert restored.learner_group._learner._num_training_steps == 2
        embed = again["model.embed_tokens.weight"]
        np.testing.assert_allclose(
            unpadded(engine_weights(restored)["model.embed_tokens.weight"], embed), embed, atol=1e-6
        )
    finally:
        restored.stop()


def test_evaluate_reports_the_paper_metrics_per_data_source(trained):
    results = trained["algo"].evaluate()
    arithmetic = results["arithmetic"]
    assert (arithmetic["num_problems"], arithmetic["num_samples"]) == (16, 32)
    assert results["env_runners"]["num_env_steps_sampled"] == 32
    for key in ("avg@2", "pass@1", "pass@2", "maj@2", "truncation_ratio"):
        assert 0.0 <= arithmetic[key] <= 1.0, key
    assert arithmetic["pass@1"] == pytest.approx(arithmetic["avg@2"])
    assert arithmetic["avg@2"] <= arithmetic["pass@2"]
    assert 0 < arithmetic["response_length_mean"] <= 24
    assert arithmetic["scoring_timeouts"] == 0


def test_dynamic_sampling_stops_at_the_cap_with_a_clear_error(ray_session, tiny_model_path, tmp_path):
    # Nothing the model writes can match these answers: every group is all-wrong.
    rows = [
        {
            "data_source": "math_dapo",
            "prompt": [{"role": "user", "content": f"What is {i} + 1?"}],
            "ability": "MATH",
            "reward_model": {"ground_truth": f"unreachable-{i}", "style": "rule"},
            "extra_info": {"index": i},
        }
        for i in range(20)
    ]
    data = tmp_path / "impossible.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    config = tiny_config(tiny_model_path, max_num_gen_batches=2, gen_batch_size_prompts=4).environment(
        "dapo_math", env_config={"dataset": str(data)}
    )
    algo = config.env_runners(num_env_runners=0).build_algo()
    try:
        with pytest.raises(
            RuntimeError,
            match=r"max_num_gen_batches=2.*0\.0% of the 8 generated groups.*accuracy was 0\.0% over the "
            r"\d+ samples \(8 groups all wrong, 0 all right\): the tasks are too hard",
        ):
            algo.training_step()
    finally:
        algo.stop()


def test_export_hf_model_writes_the_learner_weights(trained, tmp_path):
    from transformers import AutoModelForCausalLM

    out = trained["algo"].export_hf_model(tmp_path / "hf")
    exported = AutoModelForCausalLM.from_pretrained(out).state_dict()
    for name, value in learner_weights(trained["algo"]).items():
        np.testing.assert_array_equal(exported[name].numpy(), value, err_msg=name)
    assert (tmp_path / "hf" / "tokenizer.json").is_file() or (tmp_path / "hf" / "tokenizer_config.json").is_file()


@pytest.fixture(scope="module")
def resumed(trained):
    """Iterations 3 and 4 twice: by a new algorithm restored from the checkpoint taken after
    iteration 2, and by the algorithm that took it, going on as if never interrupted."""
    restored = Algorithm.from_checkpoint(str(trained["checkpoint"]))
    try:
        resumed_results = [restored.train() for _ in range(2)]
        resumed_weights = learner_weights(restored)
    finally:
        restored.stop()
    continued_results = [trained["algo"].train() for _ in range(2)]
    return dict(
        resumed=resumed_results,
        continued=continued_results,
        resumed_weights=resumed_weights,
        continued_weights=learner_weights(trained["algo"]),
    )


def test_resumed_run_continues_exactly_where_it_stopped(resumed):
    for r, c in zip(resumed["resumed"], resumed["continued"], strict=True):
        assert r["training_iteration"] == c["training_iteration"]
        # Same prompts, same completions: the data position and sampling seeds were restored.
        for key in ("acc_mean", "reward_mean", "response_length_mean", "groups_generated", "groups_kept"):
            assert r[Metrics.ROLLOUT][key] == c[Metrics.ROLLOUT][key], key
        rl, cl = r["learners"]["default_policy"], c["learners"]["default_policy"]
        assert rl["default_optimizer_learning_rate"] == cl["default_optimizer_learning_rate"]
        for key in ("policy_loss", "entropy", "grad_norm", "mean_token_prob"):
            assert rl[key] == pytest.approx(cl[key], rel=1e-5, abs=1e-7), key
    assert [r["training_iteration"] for r in resumed["resumed"]] == [3, 4]
    # Optimizer state and LR schedule came back too: the weights after 4 iterations agree.
    for name, value in resumed["continued_weights"].items():
        np.testing.assert_allclose(resumed["resumed_weights"][name], value, rtol=1e-5, atol=1e-7, err_msg=name)


def test_partial_batch_at_the_round_cap_trains_whole_minibatches_and_is_counted(ray_session, tiny_model_path):
    # 2 rounds of 6 prompts can never fill 16 groups: the cap is always reached.
    config = tiny_config(
        tiny_model_path,
        train_batch_size_prompts=16,
        gen_batch_size_prompts=6,
        max_num_gen_batches=2,
        minibatch_size_prompts=4,
        train_on_partial_batch=True,
    )
    algo = config.env_runners(num_env_runners=0).build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    rollout = result[Metrics.ROLLOUT]
    informative = round(rollout["groups_kept_fraction"] * rollout["groups_generated"])
    assert rollout["generation_rounds"] == 2 and rollout["groups_generated"] == 12
    assert 4 <= informative < 16, "the tiny model should leave some groups mixed (not all right or all wrong)"
    assert rollout["partial_batch"] == 1
    assert rollout["groups_kept"] == informative // 4 * 4
    learner = result["learners"]["default_policy"]
    # Every kept group's 4 episodes were trained on, in one optimizer step per mini-batch of 4 groups.
    assert learner["num_module_steps_trained"] == rollout["groups_kept"] * 4
