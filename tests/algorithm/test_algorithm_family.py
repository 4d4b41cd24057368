"""The GRPO family's math in core_algos (GSPO, CISPO, Clip-Cov, KL-Cov, RLOO, OPO, REINFORCE++,
the rollout corrections, the dynamic-sampling filters) against values worked out by hand.

Every expected number is a literal with its arithmetic in a comment, never the function under
test run again.
"""

import math

import numpy as np
import pytest
import torch

from dapo_rllib.algorithm import core_algos
from dapo_rllib.algorithm.core_algos import (
    compute_advantages,
    filter_groups,
    policy_loss_fn,
    rollout_correction_weights,
)
from dapo_rllib.columns import Metrics

F64 = torch.float64


def t(values):
    return torch.tensor(values, dtype=F64)


def close(actual, expected, rel=1e-9, abs_=1e-12):
    actual = actual.detach().numpy() if isinstance(actual, torch.Tensor) else actual
    assert np.shape(actual) == np.shape(expected)
    assert np.asarray(actual) == pytest.approx(np.asarray(expected), rel=rel, abs=abs_)


# --------------------------------------------------------------------------
# GSPO
# --------------------------------------------------------------------------

# Row 0: log r = [-1.0 - (-1.2), -2.0 - (-2.0)] = [0.2, 0.0] over 2 tokens (the third is padding):
#        log s_0 = 0.1, s_0 = e^0.1 = 1.1051709180756477.
# Row 1: log r = -0.5 - (-0.2) = -0.3 at each of 3 tokens: s_1 = e^-0.3 = 0.7408182206817179.
GSPO_LOGP = [[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]]
GSPO_OLD = [[-1.2, -2.0, 0.0], [-0.2, -0.2, -0.2]]
GSPO_MASK = t([[1, 1, 0], [1, 1, 1]])
S0, S1 = 1.1051709180756477, 0.7408182206817179
CLIP = dict(clip_eps_low=0.2, clip_eps_high=0.2)  # range [0.8, 1.2]


def gspo(name, advantages, **settings):
    log_probs = t(GSPO_LOGP).requires_grad_()
    loss, metrics = policy_loss_fn(name)(log_probs, t(GSPO_OLD), t(advantages), GSPO_MASK, **CLIP | settings)
    loss.backward()
    return loss, log_probs.grad, metrics


def test_gspo_clips_the_sequence_ratio_and_averages_over_sequences():
    # Row 0 (A = 1): s_0 = 1.105 is inside [0.8, 1.2]: l_0 = -A s_0 = -1.1051709180756477.
    # Row 1 (A = -1): s_1 = 0.741 < 0.8: l_1 = max(-A s_1, -A 0.8) = max(0.741, 0.8) = 0.8, clipped.
    # Sequence mean: (-1.1051709180756477 + 0.8) / 2 = -0.15258545903782385.
    loss, grad, metrics = gspo("gspo", [[1.0, 1.0, 0.0], [-1.0, -1.0, -1.0]])
    close(loss, -0.15258545903782385)
    # d l_0 / d log pi_t = -A s_0 / |o_0| = -1.1051709180756477 / 2, times 1/2 sequences:
    # -0.27629272951891193 on each of row 0's tokens; row 1 is clipped: 0.
    close(grad, [[-0.27629272951891193, -0.27629272951891193, 0.0], [0.0, 0.0, 0.0]])
    # Row 1's 3 of the 5 tokens have A < 0 and s < 0.8.
    close(metrics[Metrics.PG_CLIPFRAC_LOW], 3 / 5)
    close(metrics[Metrics.PG_CLIPFRAC_HIGH], 0.0)
    # Mean of s over tokens: (2 x 1.1051709180756477 + 3 x 0.7408182206817179) / 5
    close(metrics[Metrics.RATIO_MEAN], 0.8865592996392898)
    # approx_kl: mean of -log r over tokens: -(0.2 + 0 - 0.9) / 5 = 0.14
    close(metrics[Metrics.APPROX_KL], 0.14)


def test_gspo_takes_each_sequences_mean_advantage_and_gspo_token_each_tokens():
    # Row 0's token advantages [2, 0] have the mean 1: GSPO's loss and gradient are those above.
    loss, grad, _ = gspo("gspo", [[2.0, 0.0, 0.0], [-1.0, -1.0, -1.0]])
    close(loss, -0.15258545903782385)
    close(grad[0], [-0.27629272951891193, -0.27629272951891193, 0.0])
    # GSPO-token: per token -A_t s_0 = [-2 s_0, 0], row 0's token mean -s_0: the same value, but
    # the gradient follows each token's advantage: -A_t s_0 / 2 / 2 = [-s_0 / 2, 0].
    loss, grad, _ = gspo("gspo_token", [[2.0, 0.0, 0.0], [-1.0, -1.0, -1.0]])
    close(loss, -0.15258545903782385)
    close(grad[0], [-0.5525854590378239, 0.0, 0.0])


def test_gspo_token_with_a_token_mean_weighs_sequences_by_length():
    # token-mean over 5 tokens: (2 x -s_0 + 3 x 0.8) / 5 = (-2.2103418361512954 + 2.4) / 5
    loss, _, _ = gspo("gspo_token", [[1.0, 1.0, 0.0], [-1.0, -1.0, -1.0]], loss_agg_mode="token-mean")
    close(loss, 0.037931632769740896)


def test_gspo_refuses_an_aggregation_its_sequence_ratio_does_not_define():
    with pytest.raises(
        ValueError,
        match="policy_loss='gspo' defines one loss per sequence: loss_agg_mode must be 'seq-mean-token-mean', got 'token-mean'",
    ):
        gspo("gspo", [[1.0, 1.0, 0.0], [-1.0, -1.0, -1.0]], loss_agg_mode="token-mean")
    assert core_algos.policy_loss_traits("gspo")["loss_agg_modes"] == ("seq-mean-token-mean",)


# --------------------------------------------------------------------------
# CISPO
# --------------------------------------------------------------------------


def test_cispo_weights_every_tokens_log_prob_by_its_clipped_ratio():
    # Row 0: log r = [0, ln 10] -> r = [1, 10]; row 1: log r = -ln 4 -> r = 0.25 (then padding).
    # Range [1 - 0.5, 1 + 4] = [0.5, 5]: weights w = [1, 5] and [0.5].
    log_probs = t([[-1.0, -2.0], [-3.0, 0.0]]).requires_grad_()
    old = t([[-1.0, -2.0 - math.log(10)], [-3.0 + math.log(4), 0.0]])
    advantages = t([[1.0, 1.0], [-2.0, -2.0]])
    mask = t([[1, 1], [1, 0]])
    loss, metrics = policy_loss_fn("cispo")(
        log_probs, old, advantages, mask, clip_eps_low=0.5, clip_eps_high=4.0, loss_agg_mode="token-mean"
    )
    loss.backward()
    # l = -w A log pi: [-1 x 1 x -1, -5 x 1 x -2] = [1, 10] and [-0.5 x -2 x -3] = [-3]; mean (1 + 10 - 3) / 3
    close(loss, 8 / 3)
    # d l / d log pi = -w A / 3 tokens: [-1/3, -5/3] and [0.5 x 2 / 3 = 1/3]; the clipped tokens keep theirs.
    close(log_probs.grad, [[-1 / 3, -5 / 3], [1 / 3, 0.0]])
    close(metrics[Metrics.PG_CLIPFRAC_HIGH], 1 / 3)  # r = 10 > 5
    close(metrics[Metrics.PG_CLIPFRAC_LOW], 1 / 3)  # r = 0.25 < 0.5
    close(metrics[Metrics.RATIO_MEAN], (1 + 10 + 0.25) / 3)


def test_cispo_without_a_lower_bound_and_the_clip_range_checks():
    # clip_eps_low = 1: the weight's range starts at 0, so r = 0.25 keeps its own weight:
    # l = -0.25 x -2 x -3 = -1.5 over one token.
    log_probs = t([[-3.0]]).requires_grad_()
    loss, _ = policy_loss_fn("cispo")(
        log_probs, t([[-3.0 + math.log(4)]]), t([[-2.0]]), t([[1]]), clip_eps_low=1.0, clip_eps_high=4.0
    )
    close(loss, -1.5)
    with pytest.raises(ValueError, match=r"clip_eps_low must be in \[0, 1\], got 1.5"):
        policy_loss_fn("cispo")(log_probs, log_probs, t([[1.0]]), t([[1]]), clip_eps_low=1.5, clip_eps_high=4.0)
    with pytest.raises(ValueError, match=r"clip_eps_low must be in \[0, 1\), got 1.0"):
        policy_loss_fn("gspo_token")(log_probs, log_probs, t([[1.0]]), t([[1]]), clip_eps_low=1.0, clip_eps_high=0.1)


# --------------------------------------------------------------------------
# Clip-Cov and KL-Cov
# --------------------------------------------------------------------------

# Five loss tokens (row 0's third position is padding, its values must not count):
# mean A = (2 + 2 - 1 - 1 - 1) / 5 = 0.2; mean log pi = (-1 - 3 - 2 - 2 - 7) / 5 = -3.
# cov = (A - 0.2)(log pi + 3): row 0: 1.8 x 2 = 3.6, 1.8 x 0 = 0; row 1: -1.2 x 1 = -1.2 (twice),
# -1.2 x -4 = 4.8.
COV_A = [[2.0, 2.0, 9.0], [-1.0, -1.0, -1.0]]
COV_LOGP = [[-1.0, -3.0, 7.0], [-2.0, -2.0, -7.0]]
COV_MASK = t([[1, 1, 0], [1, 1, 1]])


def select(**settings):
    return core_algos.covariance_token_selection(t(COV_A), t(COV_LOGP), COV_MASK, **settings).tolist()


def test_token_covariance_by_hand():
    close(core_algos.token_covariance(t(COV_A), t(COV_LOGP), COV_MASK), [[3.6, 0.0, 0.0], [-1.2, -1.2, 4.8]])


def test_kl_cov_selects_the_largest_covariances():
    # k = max(1, int(0.4 x 5)) = 2: 4.8 and 3.6; int(0.1 x 5) = 0 -> k = 1: 4.8.
    assert select(ratio=0.4) == [[True, False, False], [False, False, True]]
    assert select(ratio=0.1) == [[False, False, False], [False, False, True]]
    # k = 5: every loss token, never the padding (its covariance, 0, beats the two -1.2s).
    assert select(ratio=1.0) == [[True, True, False], [True, True, True]]


def test_clip_cov_draws_within_the_band_with_its_generator():
    # Band (1, 5) holds 3.6 and 4.8; k = 5 > 2 candidates: both.
    assert select(ratio=1.0, band=(1.0, 5.0)) == [[True, False, False], [False, False, True]]
    # k = 1: one of the two, drawn; the same generator seed draws the same one.
    draws = {
        seed: select(ratio=0.2, band=(1.0, 5.0), generator=torch.Generator().manual_seed(seed)) for seed in range(8)
    }
    assert {str(d) for d in draws.values()} == {
        str([[True, False, False], [False, False, False]]),
        str([[False, False, False], [False, False, True]]),
    }
    assert select(ratio=0.2, band=(1.0, 5.0), generator=torch.Generator().manual_seed(3)) == draws[3]
    # A band nothing falls in selects nothing; so does a batch without loss tokens.
    assert not any(sum(select(ratio=1.0, band=(5.0, 9.0)), []))
    empty = core_algos.covariance_token_selection(t(COV_A), t(COV_LOGP), COV_MASK * 0, ratio=0.5)
    assert not empty.any()


def test_covariance_selection_settings_are_checked():
    with pytest.raises(ValueError, match=r"ratio must be in \(0, 1\], got 0.0"):
        select(ratio=0.0)
    with pytest.raises(ValueError, match=r"band \(lb, ub\) must have lb < ub, got \(5.0, 1.0\)"):
        select(ratio=0.5, band=(5.0, 1.0))


# Two sequences of two tokens: log r = [[0, ln 1.5], [0, 0]] -> r = [[1, 1.5], [1, 1]];
# A = [[1, 1], [-1, -1]].
COV_LOSS_LOGP = [[-1.0, -2.0], [-1.0, -3.0]]
COV_LOSS_OLD = [[-1.0, -2.0 - math.log(1.5)], [-1.0, -3.0]]
COV_LOSS_A = t([[1.0, 1.0], [-1.0, -1.0]])


def test_clip_cov_drops_the_selected_tokens_from_the_clipped_loss():
    log_probs = t(COV_LOSS_LOGP).requires_grad_()
    selected = torch.tensor([[False, False], [True, False]])
    loss, metrics = policy_loss_fn("clip_cov")(
        log_probs,
        t(COV_LOSS_OLD),
        COV_LOSS_A,
        t([[1, 1], [1, 1]]),
        selected=selected,
        clip_eps_low=0.2,
        clip_eps_high=0.28,
    )
    loss.backward()
    # Token losses: -1 x 1 = -1; max(-1.5, -1.28) = -1.28 (clipped); the selected one 0; -(-1) x 1 = 1.
    # Token mean over all 4 (the selected token still counts): (-1 - 1.28 + 0 + 1) / 4 = -0.32.
    close(loss, -0.32)
    # d/d log pi = -A r / 4 where neither clipped nor selected: -0.25, 0, 0, 0.25.
    close(log_probs.grad, [[-0.25, 0.0], [0.0, 0.25]])
    close(metrics[Metrics.COV_SELECTED_FRACTION], 0.25)
    close(metrics[Metrics.PG_CLIPFRAC_HIGH], 0.25)


def test_kl_cov_adds_an_absolute_log_ratio_at_the_selected_tokens_and_never_clips():
    log_probs = t(COV_LOSS_LOGP).requires_grad_()
    selected = torch.tensor([[False, True], [True, False]])
    loss, metrics = policy_loss_fn("kl_cov")(
        log_probs, t(COV_LOSS_OLD), COV_LOSS_A, t([[1, 1], [1, 1]]), selected=selected, kl_cov_coef=0.5
    )
    loss.backward()
    # -A r = [[-1, -1.5], [1, 1]] (r = 1.5 is not clipped); + 0.5 |ln 1.5| = 0.2027325540540822 at
    # (0, 1) and 0.5 |0| at (1, 0): (-1 - 1.5 + 0.2027325540540822 + 1 + 1) / 4 = -0.07431686148647945.
    close(loss, -0.07431686148647945)
    # d/d log pi = (-A r + 0.5 sign(log r)) / 4: (0, 1): (-1.5 + 0.5) / 4 = -0.25; at (1, 0) log r = 0,
    # where |.| has gradient 0: 1 / 4.
    close(log_probs.grad, [[-0.25, -0.25], [0.25, 0.25]])
    close(metrics[Metrics.COV_SELECTED_FRACTION], 0.5)
    close(metrics[Metrics.PG_CLIPFRAC_HIGH], 0.0)
    with pytest.raises(ValueError, match="kl_cov_coef must be >= 0, got -1"):
        policy_loss_fn("kl_cov")(
            log_probs, t(COV_LOSS_OLD), COV_LOSS_A, t([[1, 1], [1, 1]]), selected=selected, kl_cov_coef=-1
        )


# --------------------------------------------------------------------------
# Advantage estimators
# --------------------------------------------------------------------------


def test_rloo_subtracts_the_mean_of_the_other_members():
    # Group 0 = [1, 0, 0]: 1 - mean(0, 0) = 1; 0 - mean(1, 0) = -0.5 (twice). Group 1 = [5]: alone, A = R.
    adv = core_algos.adv_estimator_fn("rloo")(t([1.0, 0.0, 5.0, 0.0]), [0, 0, 1, 0])
    close(adv, [1.0, -0.5, 5.0, -0.5])


def test_opo_baseline_is_the_length_weighted_group_mean():
    # Group 0: R = [1, 0], lengths [1, 3]: b = (1 x 1 + 3 x 0) / 4 = 0.25 -> [0.75, -0.25].
    # Group 1: R = [1, 1, 0], lengths [2, 2, 4]: b = (2 + 2 + 0) / 8 = 0.5 -> [0.5, 0.5, -0.5].
    # Group 2: one member: A = R = 3.
    mask = t(
        [
            [1, 0, 0, 0],
            [1, 1, 1, 0],
            [1, 1, 0, 0],
            [1, 1, 0, 0],
            [1, 1, 1, 1],
            [1, 1, 0, 0],
        ]
    )
    adv = compute_advantages("opo", t([1.0, 0.0, 1.0, 1.0, 0.0, 3.0]), [0, 0, 1, 1, 1, 2], mask)
    per_response = [0.75, -0.25, 0.5, 0.5, -0.5, 3.0]
    close(adv, np.array(per_response)[:, None] * mask.numpy())


def test_reinforce_plus_plus_normalises_over_the_batchs_tokens():
    # Tokens of the batch: [1] (1 token of R = 1) and [0, 0, 0]: mean 0.25; unbiased variance
    # (0.75^2 + 3 x 0.25^2) / 3 = 0.25, std 0.5: A = [0.75 / 0.5, -0.25 / 0.5] = [1.5, -0.5].
    mask = t([[1, 0, 0], [1, 1, 1]])
    adv = compute_advantages("reinforce_plus_plus", t([1.0, 0.0]), [0, 0], mask)
    close(adv, [[1.5, 0.0, 0.0], [-0.5, -0.5, -0.5]], rel=1e-7)


def test_reinforce_plus_plus_baseline_centres_on_the_group_first():
    # Groups [1, 0] and [1, 1], one token each. Centred: [0.5, -0.5, 0, 0]; mean 0, unbiased
    # variance (0.25 + 0.25) / 3 = 1/6: A = 0.5 x sqrt(6) = 1.224744871391589.
    mask = t([[1], [1], [1], [1]])
    adv = compute_advantages("reinforce_plus_plus_baseline", t([1.0, 0.0, 1.0, 1.0]), [0, 0, 1, 1], mask)
    close(adv, [[1.224744871391589], [-1.224744871391589], [0.0], [0.0]], rel=1e-7)
    # Without the baseline the same scores give [1, 0, 1, 1]: mean 0.75, variance
    # (3 x 0.0625 + 0.5625) / 3 = 0.25: [0.5, -1.5, 0.5, 0.5].
    adv = compute_advantages("reinforce_plus_plus", t([1.0, 0.0, 1.0, 1.0]), [0, 0, 1, 1], mask)
    close(adv, [[0.5], [-1.5], [0.5], [0.5]], rel=1e-7)


def test_a_per_response_estimator_is_broadcast_over_the_loss_tokens():
    # GRPO on [1, 0]: mean 0.5, unbiased std sqrt(0.5) = 0.7071067811865476:
    # A = +-0.5 / (0.7071067811865476 + 1e-6) = +-0.7071057811879616; 0 outside the mask.
    adv = compute_advantages("grpo", torch.tensor([1.0, 0.0]), [0, 0], t([[1, 1, 0], [1, 0, 0]]))
    close(adv, [[0.7071057811879616, 0.7071057811879616, 0.0], [-0.7071057811879616, 0.0, 0.0]], rel=1e-6)
    assert adv.dtype == torch.float32


def one_advantage_too_few(scores, group_ids):
    """An estimator with a bug: it drops the last response's advantage."""
    return scores[:-1]


def test_an_estimator_of_the_wrong_shape_is_a_clear_error():
    with pytest.raises(
        ValueError,
        match=r"adv_estimator='test_algorithm_family:one_advantage_too_few' returned advantages of shape \(1, 1\); expected \[2\] or \[2, 3\]",
    ):
        compute_advantages(
            "test_algorithm_family:one_advantage_too_few", t([1.0, 0.0]), [0, 0], t([[1, 1, 1], [1, 1, 1]])
        )


# --------------------------------------------------------------------------
# Rollout corrections
# --------------------------------------------------------------------------

# log rho = old - rollout: row 0 [ln 3, -ln 2] (rho 3 and 0.5), row 1 [ln 3] then padding.
CORR_MASK = t([[1, 1], [1, 0]])
CORR_OLD = t([[math.log(3), -math.log(2)], [math.log(3), 0.0]])
CORR_ROLLOUT = torch.zeros(2, 2, dtype=F64)


def correction(mode, **settings):
    return rollout_correction_weights(CORR_OLD, CORR_ROLLOUT, CORR_MASK, mode=mode, **settings)


@pytest.mark.parametrize(
    "mode, settings, weights, weight_mean, fraction_key, fraction",
    [
        # min(rho, 2) per token: [2, 0.5], [2]; mean 4.5 / 3; 2 of 3 capped.
        ("tis", {"cap": 2.0}, [[2.0, 0.5], [2.0, 1.0]], 1.5, Metrics.ROLLOUT_IS_CAPPED_FRACTION, 2 / 3),
        # Sequence products: row 0 3 x 0.5 = 1.5, row 1 3 -> min(., 2): [1.5, 1.5], [2]; mean 5/3; row 1's token capped.
        ("seq_tis", {"cap": 2.0}, [[1.5, 1.5], [2.0, 1.0]], 5 / 3, Metrics.ROLLOUT_IS_CAPPED_FRACTION, 1 / 3),
        # rho in [0.5, 2]: 3 out, 0.5 in (the band is closed), 3 out.
        ("token_mask", {}, [[0.0, 1.0], [0.0, 1.0]], 1 / 3, Metrics.ROLLOUT_IS_MASKED_FRACTION, 2 / 3),
        # Products 1.5 (in [0.5, 2]) and 3 (out): row 1 dropped.
        ("seq_mask", {}, [[1.0, 1.0], [0.0, 1.0]], 2 / 3, Metrics.ROLLOUT_IS_MASKED_FRACTION, 1 / 3),
        # Geometric means sqrt(3 x 0.5) = 1.2247 (in [0.9, 1.3]) and 3 (out).
        ("geo_mask", {"band": (0.9, 1.3)}, [[1.0, 1.0], [0.0, 1.0]], 2 / 3, Metrics.ROLLOUT_IS_MASKED_FRACTION, 1 / 3),
        # The default geometric band (0.999, 1.001) holds neither.
        ("geo_mask", {}, [[0.0, 0.0], [0.0, 1.0]], 0.0, Metrics.ROLLOUT_IS_MASKED_FRACTION, 1.0),
    ],
)
def test_rollout_corrections_by_hand(mode, settings, weights, weight_mean, fraction_key, fraction):
    # Padding (row 1, column 1) always weighs 1 and counts in no metric.
    w, metrics = correction(mode, **settings)
    close(w, weights, rel=1e-12)
    assert set(metrics) == {Metrics.ROLLOUT_IS_WEIGHT_MEAN, fraction_key}
    close(metrics[Metrics.ROLLOUT_IS_WEIGHT_MEAN], weight_mean)
    close(metrics[fraction_key], fraction)


def test_rollout_correction_settings_are_checked():
    with pytest.raises(
        ValueError,
        match=r"rollout_correction='is'; expected one of \(None, 'tis', 'seq_tis', 'token_mask', 'seq_mask', 'geo_mask'\)",
    ):
        correction("is")
    with pytest.raises(ValueError, match=r"rollout_mask_band=\(2.0, 0.5\) must have 0 < low < high"):
        correction("seq_mask", band=(2.0, 0.5))
    with pytest.raises(ValueError, match="rollout_is_cap must be >= 1, got 0.5"):
        correction("seq_tis", cap=0.5)


# --------------------------------------------------------------------------
# Dynamic sampling filters
# --------------------------------------------------------------------------

# Group 0 [1, 1, 1, 0]: mean 0.75, population std sqrt(0.1875) = 0.433; group 1 [1, 0, 0, 0]:
# mean 0.25, std 0.433; group 2 [1, 1, 1, 1]: std 0; group 3 [1, 0]: mean 0.5, std 0.5;
# group 4 [1]: one member.
FILTER_VALUES = [1, 1, 1, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1, 0, 1]
FILTER_IDS = [0] * 4 + [1] * 4 + [2] * 4 + [3] * 2 + [4]


def kept_groups(**settings) -> list[int]:
    keep = filter_groups(FILTER_VALUES, FILTER_IDS, **settings)
    return sorted({g for g, k in zip(FILTER_IDS, keep.tolist()) if k})


def test_filters_by_spread_band_and_minimum_std():
    assert kept_groups() == [0, 1, 3, 4]  # every group with a spread, and the single member
    # Means strictly inside (0.3, 0.9): 0.75 and 0.5; the single member's 1 is outside.
    assert kept_groups(band=(0.3, 0.9)) == [0, 3]
    # Population std >= 0.45: group 3 only (0.433 < 0.45); the single member is exempt.
    assert kept_groups(min_std=0.45) == [3, 4]
    assert kept_groups(band=(0.3, 0.9), min_std=0.45) == [3]


def test_filter_settings_are_checked():
    with pytest.raises(ValueError, match=r"filter_band=\(0.9, 0.1\) must have low < high"):
        kept_groups(band=(0.9, 0.1))
    with pytest.raises(ValueError, match="filter_min_std must be >= 0, got -0.1"):
        kept_groups(min_std=-0.1)
