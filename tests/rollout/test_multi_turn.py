"""Episodes over several turns through DAPO's real loop, with the docs' number-guessing environment.

The learner's sequence of an episode is replayed from the parts (the environment, the chat template and the
vLLM engine with the episode's seeds): it equals vLLM's sampled ids plus the environment's rendered ids,
and the loss mask covers exactly the sampled ones. Training on such episodes reports the turn metrics and
keeps the rollout/learner log-prob mismatch at float32 noise (the environment's tokens are outside it).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from ray.rllib.core import DEFAULT_MODULE_ID

from dapo_rllib.algorithm.connectors import PadTokenBatch
from dapo_rllib.columns import Columns, Extras, Metrics
from dapo_rllib.reporting.progress import summary_line
from dapo_rllib.reporting.tensorboard import readable_scalars
from dapo_rllib.rollout.turn_loop import EndReason
from dapo_rllib.rollout.vllm_engine import TRAIN_STREAM, request_seed, sampling_params
from dapo_rllib.tasks.chat_turns import TurnRenderer
from tests.support.runs import guess_config, resume_once

GROUP_ID = 1000


def test_the_example_env_gives_hints_until_the_guess_is_right(guess_number_example):
    env = guess_number_example.GuessEnv({"num_problems": 10})
    messages, info = env.reset(options={"problem_index": 0})
    secret = int(env.problem(0).ground_truth)
    assert messages == [{"role": "user", "content": guess_number_example.RULES}] and info["tools"] == []
    low = env.step(f"My guess: {secret - 1}")
    assert low[:4] == ([{"role": "user", "content": "Higher."}], 0.0, False, False)
    assert env.step("no idea")[0] == [{"role": "user", "content": "Reply with one number."}]
    assert env.step(str(secret + 1))[0] == [{"role": "user", "content": "Lower."}]
    found = env.step(str(secret))
    assert found[:4] == ([], 1.0, True, False) and found[4]["acc"] is True


@pytest.fixture(scope="module")
def algo(ray_session, tiny_model_path, guess_number_example):
    config = guess_config(tiny_model_path)
    config = config.evaluation(evaluation_config={"env_config": {"num_problems": 40}})
    algo = config.build_algo()
    yield algo
    algo.stop()


def test_the_learner_sequence_is_vllms_ids_plus_the_environments_ids(algo, guess_number_example):
    runner = algo.env_runner  # the local env runner (num_env_runners=0)
    cfg = runner.config
    problem_index = 3
    episodes = runner.sample(requests=[(problem_index, GROUP_ID)])
    assert len(episodes) == cfg.group_size
    multi = [ep for ep in episodes if len(ep) > 1]
    assert multi, "the tiny model found the number at once in every episode"

    renderer = TurnRenderer(runner.tokenizer)
    batch = PadTokenBatch(pad_token_id=0, overlong_filtering=False)(rl_module=None, batch={}, episodes=episodes)
    rows = batch[DEFAULT_MODULE_ID]
    for k, ep in enumerate(episodes):
        # Replay the episode from its parts: the environment, the template, the engine with its seeds.
        env = guess_number_example.GuessEnv({"num_problems": 40})
        messages, _ = env.reset(options={"problem_index": problem_index})
        context = renderer.prompt_ids(messages)
        assert list(ep.get_observations(0)) == context
        response, mask = [], []
        for t in range(len(ep)):
            seed = request_seed(cfg.seed, TRAIN_STREAM, GROUP_ID, k, t)
            params = sampling_params(
                runner.settings.engine, runner.tokenizer, explore=True, seed=seed, max_tokens=96 - len(response)
            )
            (out,) = runner.llm.generate([{"prompt_token_ids": context + response}], params, use_tqdm=False)
            sampled = list(out.outputs[0].token_ids)
            assert list(ep.get_actions(t)) == sampled
            # The log-probs to float32 noise: the replay runs in a batch of one, the round in a batch of all.
            np.testing.assert_allclose(
                ep.get_extra_model_outputs(Extras.ROLLOUT_LOGP, t), out.outputs[0].logprobs.logprobs, atol=1e-5
            )
            reply, *_ = env.step(runner.tokenizer.decode(sampled, skip_special_tokens=True))
            env_ids = renderer.turn_ids(reply) if t < len(ep) - 1 else []
            assert list(ep.get_observations(t + 1)) == env_ids
            response += sampled + env_ids
            mask += [1] * len(sampled) + [0] * len(env_ids)
        width = rows[Columns.ACTIONS].shape[1]
        assert rows[Columns.ACTIONS][k, : len(response)].tolist() == response
        assert rows[Columns.LOSS_MASK][k].tolist() == mask + [0] * (width - len(mask))
        assert rows[Columns.RESPONSE_MASK][k].sum() == len(response)
        # The decoded sequence is the conversation as the template renders it whole.
        text = runner.tokenizer.decode(context + response)
        assert text.startswith(f"<|im_start|>user\n{guess_number_example.RULES}<|im_end|>\n<|im_start|>assistant\n")
        assert text.count("<|im_start|>assistant\n") == len(ep)


def test_training_on_multi_turn_episodes_reports_turns_and_keeps_the_mismatch_at_noise(algo):
    results = [algo.train() for _ in range(2)]
    for result in results:
        rollout = result[Metrics.ROLLOUT]
        assert 1 < rollout[Metrics.TURNS_MEAN] <= rollout[Metrics.TURNS_MAX] <= 3
        assert rollout[Metrics.ENV_TOKENS_MEAN] > 0 and rollout[Metrics.MODEL_TOKENS_MEAN] > 0
        shares = rollout[Metrics.ENDED_BY]
        assert set(shares) == {str(reason) for reason in EndReason}
        assert sum(shares.values()) == pytest.approx(1.0)
        assert shares[str(EndReason.MAX_TURNS)] > 0
        assert rollout[Metrics.TOOL_CALLS] == 0 and set(rollout[Metrics.TOOL_ERRORS].values()) == {0}
        learner = result["learners"]["default_policy"]
        # Only the model's tokens are compared: the environment's would differ by their whole log-prob.
        assert learner[Metrics.ROLLOUT_LOGP_ABS_DIFF] < 0.01
        assert np.isfinite(learner[Metrics.POLICY_LOSS])
        assert result["timers"][Metrics.GENERATION_S] > 0
        # In TensorBoard (every readable scalar is written) and in the summary line.
        scalars = readable_scalars(result)
        for name in ("turns_mean", "tool_calls", "tool_errors/malformed", "ended_by/max_turns", "env_tokens_mean"):
            assert f"rollout/{name}" in scalars, name
        assert "timing/tool_s" in scalars
        assert re.search(r"turns [\d.]+  tools 0\.00", summary_line(result))


def test_validation_runs_multi_turn_episodes(algo):
    results = algo.evaluate()
    guess = results["guess"]
    assert (guess["num_problems"], guess["num_samples"]) == (16, 32)
    assert 0.0 <= guess["avg@2"] <= guess["pass@2"] <= 1.0
    # Every token after the prompt counts: up to 3 turns and the hints between them.
    assert 0 < guess["response_length_mean"] <= 96


@pytest.fixture(scope="module")
def overlapped_multi_turn(ray_session, tiny_model_path, guess_number_example, tmp_path_factory):
    """Multi-turn episodes with what the single-step ones have: two env runners, async rollout, TIS."""
    config = guess_config(tiny_model_path, overlong_buffer_len=8, async_rollout=True, rollout_correction="tis")
    # Half a CPU each: the session has two, and the resumed run's runners start beside these.
    algo = config.env_runners(num_env_runners=2, num_cpus_per_env_runner=0.5).build_algo()
    results = [algo.train() for _ in range(2)]
    checkpoint = tmp_path_factory.mktemp("ckpt") / "multi_turn"
    algo.save_to_path(str(checkpoint))
    yield dict(algo=algo, results=results, checkpoint=checkpoint)
    algo.stop()


def test_async_multi_turn_with_two_env_runners_and_tis(overlapped_multi_turn):
    for result in overlapped_multi_turn["results"]:
        assert result[Metrics.ROLLOUT][Metrics.TURNS_MEAN] > 1
        learner = result["learners"]["default_policy"]
        assert 0 < learner[Metrics.ROLLOUT_IS_WEIGHT_MEAN] <= 2.0
    # The first batch is sampled with the learner's weights: the mismatch is float32 noise.
    assert overlapped_multi_turn["results"][0]["learners"]["default_policy"][Metrics.ROLLOUT_LOGP_ABS_DIFF] < 0.01


def test_a_multi_turn_run_resumes_exactly(overlapped_multi_turn):

    resumed, _ = resume_once(overlapped_multi_turn["checkpoint"], read=None)
    continued = overlapped_multi_turn["algo"].train()
    for key in (Metrics.ACC_MEAN, Metrics.REWARD_MEAN, Metrics.RESPONSE_LENGTH_MEAN, Metrics.TURNS_MEAN):
        assert resumed[Metrics.ROLLOUT][key] == continued[Metrics.ROLLOUT][key], key
    r, c = resumed["learners"]["default_policy"], continued["learners"]["default_policy"]
    for key in (Metrics.POLICY_LOSS, Metrics.GRAD_NORM, Metrics.ROLLOUT_LOGP_ABS_DIFF):
        assert r[key] == pytest.approx(c[key], rel=1e-5, abs=1e-7), key


def test_an_answer_cut_at_the_budget_is_truncated_though_the_environment_ended_the_episode(algo):
    """A one-turn task scores a cut answer and ends the episode: the episode still counts as truncated
    (overlong filtering and the truncation ratio read that)."""
    from envs.math_env import MathEnv

    runner = algo.env_runner
    loop = runner._turn_loop(explore=True)
    loop.budget = 3  # tokens: every answer of the tiny model is longer
    rollouts = runner._start_episodes(MathEnv({"num_problems": 5}), loop, [(0, (0, 7, k)) for k in range(4)])
    loop.run(rollouts)
    for rollout in rollouts:
        assert (rollout.end, len(rollout.turns), rollout.response_length) == (EndReason.ENV, 1, 3)
        assert rollout.truncated
        assert runner._episode(rollout, group_id=7, penalty=0.0).get_extra_model_outputs(Extras.TRUNCATED, 0)
