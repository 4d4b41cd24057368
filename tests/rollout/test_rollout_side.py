"""The rollout side through RLlib's loop: weights streamed in small buckets, the truncated
importance correction, generation overlapped with the update, a dead env runner, and what an in-process
runner leaves when it stops."""

import gc
import weakref

import numpy as np
import pytest
import ray

from dapo_rllib.columns import Metrics
from dapo_rllib.models.rl_module import hf_weights
from dapo_rllib.reporting.progress import summary_line
from dapo_rllib.rollout.env_runner import VLLMEnvRunner
from dapo_rllib.rollout.vllm_engine import EngineSettings, cpu_kv_cache_bytes
from dapo_rllib.vllm_private import worker_model
from tests.support.runs import CHECKED, engine_weights, learner_weights, resume_once, tiny_config, unpadded

# 100 kB buckets: the tiny model's embedding (303 x 128 floats) and MLP matrices do not fit one,
# so they travel in row slices and are joined by the env runner before vLLM loads them.
SMALL_BUCKET_MB = 0.1


@pytest.fixture(scope="module")
def overlapped(ray_session, tiny_model_path, tmp_path_factory):
    # train_on_partial_batch: as in test_dapo_integration's `trained`, iteration 3 (resumed and
    # continued) trains the same partial batch twice should a model run out of informative groups.
    config = tiny_config(
        tiny_model_path,
        async_rollout=True,
        rollout_correction="tis",
        rollout_is_cap=2.0,
        weight_sync_bucket_mb=SMALL_BUCKET_MB,
        train_on_partial_batch=True,
    )
    algo = config.env_runners(num_env_runners=1).build_algo()
    results = [algo.train() for _ in range(2)]
    checkpoint = tmp_path_factory.mktemp("ckpt") / "async"
    algo.save_to_path(str(checkpoint))
    yield dict(algo=algo, results=results, checkpoint=checkpoint)
    algo.stop()


def test_small_buckets_stream_every_parameter_into_the_engine(overlapped):
    algo = overlapped["algo"]
    assert overlapped["results"][-1][Metrics.ROLLOUT]["weight_sync_buckets"] > 10
    engine = engine_weights(algo)
    learner = hf_weights({f"model.{k}": v for k, v in learner_weights(algo).items()})
    for name in CHECKED:
        np.testing.assert_allclose(
            unpadded(engine[name], learner[name]), learner[name], rtol=0, atol=1e-6, err_msg=name
        )


def test_tis_weights_are_reported_and_named_in_the_summary_line(overlapped):
    for result in overlapped["results"]:
        learner = result["learners"]["default_policy"]
        assert 0 < learner["rollout_is_weight_mean"] <= 2.0
        assert 0 <= learner["rollout_is_capped_fraction"] <= 1
        assert learner["rollout_logp_abs_diff"] <= learner["rollout_logp_abs_diff_max"]
        assert "tis_weight" in summary_line(result)


def test_async_batches_are_one_update_stale(overlapped):
    first, second = overlapped["results"]
    # Step 1 trains a batch sampled before any update, step 2 the batch sampled during step
    # 1's update with the initial weights, which the learner has moved on from: the mismatch
    # grows by one update's worth.
    assert (
        second["learners"]["default_policy"]["rollout_logp_abs_diff"]
        > 10 * first["learners"]["default_policy"]["rollout_logp_abs_diff"]
    )
    assert second["timers"][Metrics.ASYNC_WAIT_S] >= 0


def test_async_run_resumes_exactly_with_its_prefetched_batch(overlapped):
    resumed, resumed_weights = resume_once(overlapped["checkpoint"])
    continued = overlapped["algo"].train()
    assert resumed["training_iteration"] == continued["training_iteration"] == 3
    for key in ("acc_mean", "reward_mean", "response_length_mean", "groups_generated"):
        assert resumed[Metrics.ROLLOUT][key] == continued[Metrics.ROLLOUT][key], key
    r, c = resumed["learners"]["default_policy"], continued["learners"]["default_policy"]
    for key in ("policy_loss", "grad_norm", "rollout_logp_abs_diff", "rollout_is_weight_mean"):
        assert r[key] == pytest.approx(c[key], rel=1e-5, abs=1e-7), key
    for name, value in learner_weights(overlapped["algo"]).items():
        np.testing.assert_allclose(resumed_weights[name], value, rtol=1e-5, atol=1e-7, err_msg=name)


def test_a_killed_env_runner_stops_the_run_with_its_name(ray_session, tiny_model_path):
    # RLlib told to go on without failed runners (and not to restart them: issue 13's part)
    # would sample with one runner fewer; DAPO refuses.
    # Half a CPU each: the module's other algorithm still holds one of the session's two.
    config = tiny_config(tiny_model_path).env_runners(num_env_runners=2, num_cpus_per_env_runner=0.5)
    config = config.fault_tolerance(restart_failed_env_runners=False, ignore_env_runner_failures=True)
    algo = config.build_algo()
    try:
        victim = algo.env_runner_group._worker_manager._actors[2]
        ray.kill(victim, no_restart=True)
        with pytest.raises(RuntimeError, match=r"env runner\(s\) \[2\] did not answer"):
            algo.train()
    finally:
        algo.stop()


def test_async_rollout_needs_env_runner_actors(tiny_model_path):
    with pytest.raises(ValueError, match="async_rollout=True .* set num_env_runners >= 1"):
        tiny_config(tiny_model_path, async_rollout=True).env_runners(num_env_runners=0).validate()


def test_a_stopped_in_process_env_runner_leaves_no_engine_behind(tiny_model_path):
    from transformers import AutoModelForCausalLM

    # vLLM freezes the objects alive at its engine's start, the runner being built among them: without
    # `release_startup_objects` the runner's reference cycle kept each stopped runner's engine (1 GiB of
    # KV cache) for the life of the process. And vLLM's reload records keep an updated model alive through
    # their own keys: without `forget_reload_records` each stopped runner left its model behind (150 MB here).
    runner = VLLMEnvRunner(config=tiny_config(tiny_model_path).env_runners(num_env_runners=0))
    engine = weakref.ref(runner.llm)
    # The layers with weights (vLLM caches the rotary embedding, which has none, across engines).
    model = runner.llm.collective_rpc(worker_model)[0]
    layers = [weakref.ref(layer) for layer in model.modules() if list(layer.parameters(recurse=False))]
    del model
    runner.evaluate(num_samples=1, max_problems=2)
    runner.load_weights(AutoModelForCausalLM.from_pretrained(tiny_model_path).state_dict())
    runner.stop()
    del runner
    gc.collect()
    assert engine() is None
    assert [layer() for layer in layers if layer() is not None] == []


def test_a_cpu_engines_kv_cache_fits_its_longest_sequences(tiny_model_path, monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    config = tiny_config(tiny_model_path)  # max_prompt_length 128, max_response_length 24
    # The tiny Qwen2: 4 layers x (keys, values) x 2 KV heads x head_dim 128 / 4 = 32 x 4 bytes = 2,048 bytes a
    # token; 256 sequences x (128 + 24 + a 128-token block) = 71,680 tokens: 146,800,640 bytes.
    settings = EngineSettings.from_config(config)
    assert cpu_kv_cache_bytes(settings) == 146_800_640
    # A long context reaches the cap: 256 x (2048 + 20480 + 128) x 2,048 bytes is over 1 GiB.
    long_context = tiny_config(tiny_model_path, max_prompt_length=2048, max_response_length=20480)
    assert cpu_kv_cache_bytes(EngineSettings.from_config(long_context)) == 1 << 30
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")  # vLLM's own setting decides where given
    assert cpu_kv_cache_bytes(settings) == 2 << 30
