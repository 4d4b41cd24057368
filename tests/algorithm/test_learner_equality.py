"""Proof by equality: one optimizer step on the same uneven batch gives the same loss, grad norm
and updated weights whether the mini-batch runs in one piece, in micro-batches of a small token
budget, or on two data-parallel learners (DDP, and DeepSpeed ZeRO-3), for every loss
aggregation mode; and a step of LoRA adapters in one piece, in micro-batches and on two
learners (DDP, ZeRO-2, ZeRO-3). Some of the batch's sequences are multi-turn episodes, with environment tokens inside
the response that are out of the loss."""

import multiprocessing
import socket

import numpy as np
import pytest
import torch

from dapo_rllib.columns import Columns, Metrics
from tests.support.learners import LOSS_AGG_MODES, build_learner, data_parallel_worker, one_step, uneven_batch

# One Adam step moves a weight by lr * g / (|g| + eps) (lr = 1e-3): about lr, whatever the size
# of g. Where g is at the level of float noise (k_proj's bias gets a zero gradient in exact
# arithmetic: softmax ignores a constant added to every key), its sign and so the step are
# noise; elsewhere the weights must agree to 1% of a step.
WEIGHT_ATOL = 1e-5
NOISE_GRAD = 1e-5  # times the gradient norm


# The policy loss is a sum of terms +-A * ratio whose advantages cancel within each group, so the
# net loss is ~1/50 of the terms' size and float32 rounding of the terms (a few 1e-7 of each, from
# different padding widths) shows up ~50x larger relative to it: 1.0e-5 to 1.4e-5 measured on
# one tiny model build. A wrong denominator or a dropped piece moves it by far more than 1e-4.
LOSS_RTOL = 1e-4
# The gradient is the same sum of cancelling terms (+-A * grad ratio), so its norm carries that rounding too:
# up to 1.04e-5 measured (Clip-Cov, 14 micro-batches against one piece, on the reference tiny model build).
GRAD_NORM_RTOL = 5e-5


def assert_same_step(result, reference, loss_atol=1e-7):
    assert result[Metrics.POLICY_LOSS] == pytest.approx(reference[Metrics.POLICY_LOSS], rel=LOSS_RTOL, abs=loss_atol)
    assert result[Metrics.GRAD_NORM] == pytest.approx(reference[Metrics.GRAD_NORM], rel=GRAD_NORM_RTOL)
    noise = NOISE_GRAD * reference[Metrics.GRAD_NORM]
    for name, grad in reference["grads"].items():
        if "grads" in result:
            torch.testing.assert_close(
                result["grads"][name], grad, atol=noise, rtol=1e-4, msg=lambda m: f"grad of {name}: {m}"
            )
        decisive = grad.abs() > noise
        torch.testing.assert_close(
            result["weights"][name][decisive],
            reference["weights"][name][decisive],
            atol=WEIGHT_ATOL,
            rtol=0,
            msg=lambda m: f"{name}: {m}",
        )


@pytest.fixture(scope="module")
def batch(tiny_model_path):
    return uneven_batch(str(tiny_model_path))


@pytest.fixture(scope="module")
def whole(tiny_model_path, batch):
    """The reference: each loss mode's step with the mini-batch in one piece."""
    return {mode: one_step(build_learner(str(tiny_model_path), loss_agg_mode=mode), batch) for mode in LOSS_AGG_MODES}


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batches_of_a_small_token_budget_give_the_same_step(tiny_model_path, batch, whole, mode):
    # 16 tokens: one or two sequences per forward pass.
    learner = build_learner(str(tiny_model_path), loss_agg_mode=mode, max_tokens_per_micro_batch=16)
    result = one_step(learner, batch)
    assert result[Metrics.MICRO_BATCHES] >= 8 and whole[mode][Metrics.MICRO_BATCHES] == 1
    assert_same_step(result, whole[mode])


# The GRPO family's losses and the rollout corrections, each with settings under which some tokens
# (or sequences) clip or drop and others do not.
FAMILY_SETTINGS = {
    "gspo": dict(
        policy_loss="gspo",
        loss_agg_mode="seq-mean-token-mean",
        clip_ratio_c=None,
        clip_eps_low=0.05,
        clip_eps_high=0.05,
    ),
    "gspo_token": dict(policy_loss="gspo_token", clip_ratio_c=None, clip_eps_low=0.05, clip_eps_high=0.05),
    "cispo": dict(policy_loss="cispo", clip_ratio_c=None, clip_eps_low=1.0, clip_eps_high=0.2),
    # A fifth of the loss tokens selected (the papers' 2e-4 would select one token here).
    "clip_cov": dict(policy_loss="clip_cov", clip_ratio_c=None, clip_cov_ratio=0.2, clip_cov_lb=0.0, clip_cov_ub=10.0),
    "kl_cov": dict(policy_loss="kl_cov", clip_ratio_c=None, kl_cov_ratio=0.2),
    # One optimizer step per batch: no old log-probs are recomputed, Clip-Cov selects by the sampler's.
    "clip_cov_on_policy": dict(
        policy_loss="clip_cov",
        clip_ratio_c=None,
        clip_cov_ratio=0.2,
        clip_cov_lb=0.0,
        clip_cov_ub=10.0,
        minibatch_size_prompts=512,
    ),
    "seq_tis": dict(rollout_correction="seq_tis", rollout_is_cap=1.5),
    "token_mask": dict(rollout_correction="token_mask", rollout_mask_band=(0.8, 1.25)),
    "seq_mask": dict(rollout_correction="seq_mask", rollout_mask_band=(0.5, 2.0)),
    "geo_mask": dict(rollout_correction="geo_mask", rollout_mask_band=(0.9, 1.1)),
}
COVARIANCE_LOSSES = ("clip_cov", "kl_cov")


@pytest.fixture(scope="module")
def sampled_batch(batch):
    """The batch with the sampler's log-probs: the old ones off by more noise, so importance
    ratios spread around 1."""
    rng = np.random.default_rng(1)
    noise = rng.normal(scale=0.3, size=batch[Columns.OLD_LOGP].shape) * batch[Columns.RESPONSE_MASK]
    return batch | {Columns.ROLLOUT_LOGP: (batch[Columns.OLD_LOGP] + noise).astype(np.float32)}


@pytest.mark.parametrize("name", FAMILY_SETTINGS)
def test_the_family_losses_and_corrections_are_exact_in_micro_batches(tiny_model_path, sampled_batch, whole, name):
    reference = one_step(build_learner(str(tiny_model_path), **FAMILY_SETTINGS[name]), sampled_batch)
    result = one_step(
        build_learner(str(tiny_model_path), max_tokens_per_micro_batch=16, **FAMILY_SETTINGS[name]), sampled_batch
    )
    assert result[Metrics.MICRO_BATCHES] >= 8 and reference[Metrics.MICRO_BATCHES] == 1
    # Weighted or dropped terms cancel further: the net loss is ~1e-3 of the terms' size, so their
    # float32 rounding (as above) reaches ~2e-7 of it (seq_tis: 2.0e-7 measured). A wrong
    # denominator or a dropped piece moves the loss by a factor.
    assert_same_step(result, reference, loss_atol=1e-6)
    # Not DAPO's step under another name: the loss differs from the default's on the same batch.
    assert reference[Metrics.POLICY_LOSS] != pytest.approx(whole["token-mean"][Metrics.POLICY_LOSS], rel=1e-3)


def test_an_on_policy_covariance_selection_needs_the_samplers_log_probs(tiny_model_path, batch):
    learner = build_learner(str(tiny_model_path), **FAMILY_SETTINGS["clip_cov_on_policy"])
    with pytest.raises(
        ValueError, match="policy_loss='clip_cov' selects tokens .* the batch has no 'rollout_logp' column"
    ):
        one_step(learner, batch)


def test_the_reference_step_trains_and_differs_between_modes(whole):
    # The comparisons above are not between trivially equal numbers.
    losses = {mode: r[Metrics.POLICY_LOSS] for mode, r in whole.items()}
    assert len({round(v, 6) for v in losses.values()}) == len(LOSS_AGG_MODES), losses
    assert all(r[Metrics.GRAD_NORM] > 0 for r in whole.values())
    # Most weights get a gradient above the noise level that the weight comparisons skip.
    for r in whole.values():
        grads = torch.cat([g.flatten() for g in r["grads"].values()])
        assert (grads.abs() > NOISE_GRAD * r[Metrics.GRAD_NORM]).float().mean() > 0.8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_data_parallel(model_path, batch, runs, out_dir, world_size=2):
    ctx = multiprocessing.get_context("spawn")
    port = free_port()
    workers = [
        ctx.Process(target=data_parallel_worker, args=(rank, world_size, port, model_path, batch, runs, str(out_dir)))
        for rank in range(world_size)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=600)
    assert all(w.exitcode == 0 for w in workers), [w.exitcode for w in workers]
    return torch.load(out_dir / "results.pt")


ZERO2 = {"zero_optimization": {"stage": 2}}
ZERO3 = {"zero_optimization": {"stage": 3}}


@pytest.fixture(scope="module")
def two_learners(tiny_model_path, batch, tmp_path_factory):
    """Each loss mode's step on two learners, each holding 2 of the 4 groups and cutting them
    into micro-batches of its own: with DDP, then under DeepSpeed ZeRO-3 (one pair of worker
    processes runs both)."""
    runs = [dict(loss_agg_mode=mode, max_tokens_per_micro_batch=24) for mode in LOSS_AGG_MODES]
    runs += [dict(run, deepspeed_config=ZERO3) for run in runs]
    lora = dict(LORA, max_tokens_per_micro_batch=24)
    runs += [lora, dict(lora, deepspeed_config=ZERO2), dict(lora, deepspeed_config=ZERO3)]
    runs += [dict(FAMILY_SETTINGS[name], max_tokens_per_micro_batch=24) for name in COVARIANCE_LOSSES]
    results = run_data_parallel(str(tiny_model_path), batch, runs, tmp_path_factory.mktemp("two_learners"))
    return {
        "ddp": dict(zip(LOSS_AGG_MODES, results[:4])),
        "zero3": dict(zip(LOSS_AGG_MODES, results[4:8])),
        "lora": dict(zip(("ddp", "zero2", "zero3"), results[8:11])),
        "covariance": dict(zip(COVARIANCE_LOSSES, results[11:])),
    }


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_two_ddp_learners_give_the_same_step(two_learners, whole, mode):
    assert_same_step(two_learners["ddp"][mode], whole[mode])


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_two_zero3_learners_give_the_same_step(two_learners, whole, mode):
    assert_same_step(two_learners["zero3"][mode], whole[mode])


@pytest.mark.parametrize("name", COVARIANCE_LOSSES)
def test_covariance_selection_spans_both_learners(tiny_model_path, batch, two_learners, name):
    # Clip-Cov's draw and KL-Cov's top-k run over the tokens of both learners (gathered), so two
    # learners select the tokens one learner selects.
    reference = one_step(build_learner(str(tiny_model_path), **FAMILY_SETTINGS[name]), batch)
    assert_same_step(two_learners["covariance"][name], reference, loss_atol=1e-6)


# LoRA adapters: the B matrices start at zero, so a first step moves B (A's gradient is zero).
LORA = dict(lora_rank=8, lora_alpha=16)


@pytest.fixture(scope="module")
def lora_whole(tiny_model_path, batch):
    return one_step(build_learner(str(tiny_model_path), **LORA), batch)


def test_a_lora_step_trains_the_adapters_only(lora_whole):
    assert lora_whole["grads"] and all("lora_" in name for name in lora_whole["grads"])
    assert max(g.abs().max() for name, g in lora_whole["grads"].items() if "lora_B" in name) > 0


@pytest.mark.parametrize("checkpointing", [False, True])
def test_lora_in_micro_batches_gives_the_same_step(tiny_model_path, batch, lora_whole, checkpointing):
    settings = dict(LORA, max_tokens_per_micro_batch=16, gradient_checkpointing=checkpointing)
    result = one_step(build_learner(str(tiny_model_path), **settings), batch)
    assert result[Metrics.MICRO_BATCHES] >= 8
    assert_same_step(result, lora_whole)


@pytest.mark.parametrize("parallelism", ["ddp", "zero2", "zero3"])
def test_lora_on_two_learners_gives_the_same_step(two_learners, lora_whole, parallelism):
    assert_same_step(two_learners["lora"][parallelism], lora_whole)


def test_a_lora_runs_kl_reference_is_the_base_model(tiny_model_path, batch):
    from ray.rllib.core import DEFAULT_MODULE_ID

    from dapo_rllib.columns import Columns

    learner = build_learner(str(tiny_model_path), **LORA, kl_coef=0.1)
    one_step(learner, batch)  # the adapters move away from the base model
    torch_batch = {key: torch.as_tensor(value) for key, value in batch.items()}
    reference = learner.reference_logprobs(DEFAULT_MODULE_ID, torch_batch, 1.0)
    base = build_learner(str(tiny_model_path)).module[DEFAULT_MODULE_ID]
    with torch.no_grad():
        torch.testing.assert_close(reference, base.forward_inference(torch_batch)[Columns.LOGP], atol=1e-6, rtol=0)
        policy = learner.module[DEFAULT_MODULE_ID].forward_inference(torch_batch)[Columns.LOGP]
    assert (policy - reference).abs().max() > 1e-3  # (the adapters did move)
    assert not learner._ref_models  # no copy of the base model


def test_bfloat16_full_fine_tuning_keeps_float32_master_weights(tiny_model_path, batch, whole):
    learner = build_learner(str(tiny_model_path), model_dtype="bfloat16", lr=1e-5)
    model = learner.module["default_policy"].unwrapped().model
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    assert {p.dtype for p in before.values()} == {torch.float32}
    result = one_step(learner, batch)
    # It computes in bfloat16 (autocast): the same step's loss differs from float32's.
    assert result[Metrics.POLICY_LOSS] != pytest.approx(whole["token-mean"][Metrics.POLICY_LOSS], rel=1e-2)
    # Adam moves a weight by about lr = 1e-5 per step: far below bfloat16's spacing at the weights'
    # size (2^-8 * 0.05 = 2e-4), so in bfloat16 weights most of these steps would round to nothing.
    steps = torch.cat([(model.state_dict()[name] - value).abs().flatten() for name, value in before.items()])
    assert ((steps > 0.5e-5) & (steps < 2e-5)).float().mean() > 0.5


def test_lora_in_bfloat16_keeps_the_base_in_bfloat16_and_the_adapters_in_float32(tiny_model_path, batch):
    learner = build_learner(str(tiny_model_path), **LORA, model_dtype="bfloat16")
    model = learner.module["default_policy"].unwrapped().model
    dtypes = (
        {p.dtype for p in model.parameters() if p.requires_grad},
        {p.dtype for p in model.parameters() if not p.requires_grad},
    )
    assert dtypes == ({torch.float32}, {torch.bfloat16})
    one_step(learner, batch)
    state = learner.get_state(components="rl_module")["rl_module"]["default_policy"]
    assert state and all("lora_" in key and value.dtype == np.float32 for key, value in state.items())


def test_one_zero3_learner_with_optimizer_offload_gives_the_same_step(tiny_model_path, batch, whole, tmp_path):
    # ZeRO-3 with the AdamW state in host memory, one learner process of its own.
    offload = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}
    (result,) = run_data_parallel(
        str(tiny_model_path),
        batch,
        [dict(deepspeed_config=offload, max_tokens_per_micro_batch=24)],
        tmp_path,
        world_size=1,
    )
    assert_same_step(result, whole["token-mean"])
