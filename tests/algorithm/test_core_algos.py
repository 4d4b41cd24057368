"""Tests for dapo_rllib.algorithm.core_algos against values worked out by hand.

Every expected number is written out as a literal with the arithmetic in a
comment; none is obtained by running the formula under test again.
"""

import math

import numpy as np
import pytest
import torch

from dapo_rllib.algorithm import core_algos
from dapo_rllib.algorithm.core_algos import (
    KL_PENALTY_KINDS,
    LOSS_AGG_MODES,
    adv_estimator_fn,
    adv_estimators,
    agg_loss,
    compute_group_advantages,
    compute_policy_loss,
    filter_groups,
    kl_penalty,
    masked_mean,
    policy_loss_fn,
    policy_losses,
    register_adv_estimator,
    register_policy_loss,
)
from dapo_rllib.columns import Metrics
from dapo_rllib.models.rl_module import entropy_from_logits
from dapo_rllib.tasks.rewards.overlong import overlong_penalty

F64 = torch.float64


def t(values, dtype=F64):
    return torch.tensor(values, dtype=dtype)


def assert_close(actual, expected, rel=1e-9, abs_=1e-12):
    actual = actual.detach().numpy() if isinstance(actual, torch.Tensor) else actual
    assert np.shape(actual) == np.shape(expected)
    assert np.asarray(actual) == pytest.approx(np.asarray(expected), rel=rel, abs=abs_)


# --------------------------------------------------------------------------
# agg_loss
# --------------------------------------------------------------------------

# Row sums / counts over the unmasked entries:
#   row 0: 1+2+3 = 6 over 3 tokens (mean 2)    -- the masked 4th entry is nan
#   row 1: 5 over 1 token (mean 5)
#   row 2: 9+10+11+12 = 42 over 4 tokens (mean 10.5)
#   row 3: nothing unmasked (must contribute nothing)
LOSS = t(
    [
        [1.0, 2.0, 3.0, float("nan")],
        [5.0, 6.0, 7.0, 8.0],
        [9.0, 10.0, 11.0, 12.0],
        [100.0, 100.0, 100.0, 100.0],
    ]
)
MASK = t([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])


def test_loss_agg_modes_registry():
    assert LOSS_AGG_MODES == (
        "token-mean",
        "seq-mean-token-mean",
        "seq-mean-token-sum",
        "seq-mean-token-sum-norm",
    )


def test_agg_token_mean():
    # (6 + 5 + 42) / 8 tokens = 53 / 8
    assert_close(agg_loss(LOSS, MASK, "token-mean"), 6.625)


def test_agg_token_mean_with_num_tokens_override():
    # 53 / 10
    assert_close(agg_loss(LOSS, MASK, "token-mean", num_tokens=10), 5.3)


def test_agg_seq_mean_token_mean():
    # (2 + 5 + 10.5) / 3 non-empty sequences = 17.5 / 3
    assert_close(agg_loss(LOSS, MASK, "seq-mean-token-mean"), 5.833333333333333)


def test_agg_seq_mean_token_sum():
    # (6 + 5 + 42) / 3 = 53 / 3
    assert_close(agg_loss(LOSS, MASK, "seq-mean-token-sum"), 17.666666666666668)


def test_agg_seq_mean_token_sum_with_num_seqs_override():
    # 53 / 4
    assert_close(agg_loss(LOSS, MASK, "seq-mean-token-sum", num_seqs=4), 13.25)


def test_agg_seq_mean_token_sum_norm_default_factor():
    # default factor = mask width 4: (6/4 + 5/4 + 42/4) / 3 = 53 / 12
    assert_close(agg_loss(LOSS, MASK, "seq-mean-token-sum-norm"), 4.416666666666667)


def test_agg_seq_mean_token_sum_norm_explicit_factor():
    # (6/10 + 5/10 + 42/10) / 3 = 53 / 30
    assert_close(
        agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", loss_scale_factor=10),
        1.7666666666666666,
    )


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_agg_all_masked_is_zero_not_nan(mode):
    loss = agg_loss(t([[1.0, float("inf")]]), t([[0, 0]]), mode)
    assert loss.item() == 0.0


def test_agg_mask_may_be_bool():
    # same example, bool mask: 53 / 8
    assert_close(agg_loss(LOSS, MASK.bool(), "token-mean"), 6.625)


def test_agg_unknown_mode_lists_valid_modes():
    with pytest.raises(ValueError) as err:
        agg_loss(LOSS, MASK, "token-sum")
    assert "token-sum" in str(err.value)
    for mode in LOSS_AGG_MODES:
        assert mode in str(err.value)


def test_agg_rejects_non_positive_denominator():
    with pytest.raises(ValueError, match="num_tokens"):
        agg_loss(LOSS, MASK, "token-mean", num_tokens=0)


def test_agg_rejects_shape_mismatch():
    with pytest.raises(ValueError, match=r"\(4, 4\).*\(4, 3\)"):
        agg_loss(LOSS, MASK[:, :3], "token-mean")


# --------------------------------------------------------------------------
# compute_policy_loss: one token at a time
# --------------------------------------------------------------------------


def one_token(ratio, advantage, **kwargs):
    """Loss and d loss / d log_prob of a single token (token-mean of one
    token is the token's loss)."""
    log_probs = t([[math.log(ratio)]]).requires_grad_()
    loss, metrics = compute_policy_loss(log_probs, t([[0.0]]), t([[advantage]]), t([[1.0]]), **kwargs)
    loss.backward()
    return loss.item(), log_probs.grad.item(), metrics


def test_clip_high_binds_above_one_plus_eps_high():
    # A=+1, r=1.5 > 1.28: max(-1.5, -1.28) = -1.28; clipped, so no gradient
    loss, grad, metrics = one_token(1.5, 1.0)
    assert loss == pytest.approx(-1.28)
    assert grad == 0.0
    assert metrics["pg_clipfrac_high"].item() == 1.0


def test_clip_higher_lets_ratio_between_1_2_and_1_28_through():
    # A=+1, r=1.25 in (1.2, 1.28]: max(-1.25, -1.25) = -1.25, gradient
    # d(-A r)/d log r = -A r = -1.25. Symmetric PPO (eps 0.2) would clip here.
    loss, grad, metrics = one_token(1.25, 1.0)
    assert loss == pytest.approx(-1.25)
    assert grad == pytest.approx(-1.25)
    assert metrics["pg_clipfrac_high"].item() == 0.0


def test_symmetric_clip_would_clip_the_same_token():
    # same token with eps_high = 0.2: max(-1.25, -1.2) = -1.2, no gradient
    loss, grad, metrics = one_token(1.25, 1.0, clip_eps_high=0.2)
    assert loss == pytest.approx(-1.2)
    assert grad == 0.0
    assert metrics["pg_clipfrac_high"].item() == 1.0


def test_clip_low_binds_for_negative_advantage():
    # A=-1, r=0.5 < 0.8: max(0.5, 0.8) = 0.8; clipped, so no gradient
    loss, grad, metrics = one_token(0.5, -1.0)
    assert loss == pytest.approx(0.8)
    assert grad == 0.0
    assert metrics["pg_clipfrac_low"].item() == 1.0


def test_low_ratio_with_positive_advantage_is_not_clipped():
    # A=+1, r=0.5: max(-0.5, -0.8) = -0.5 (pessimistic bound), gradient -0.5
    loss, grad, metrics = one_token(0.5, 1.0)
    assert loss == pytest.approx(-0.5)
    assert grad == pytest.approx(-0.5)
    assert metrics["pg_clipfrac_low"].item() == 0.0


def test_dual_clip_off_lets_negative_advantage_loss_grow():
    # A=-1, r=100: max(100, 1.28) = 100, gradient -A r = 100
    loss, grad, metrics = one_token(100.0, -1.0)
    assert loss == pytest.approx(100.0)
    assert grad == pytest.approx(100.0)
    assert metrics["pg_clipfrac_dual"].item() == 0.0


def test_dual_clip_on_caps_negative_advantage_loss():
    # A=-1, r=100, c=10: min(max(100, 1.28), -A c = 10) = 10, no gradient
    loss, grad, metrics = one_token(100.0, -1.0, clip_ratio_c=10.0)
    assert loss == pytest.approx(10.0)
    assert grad == 0.0
    assert metrics["pg_clipfrac_dual"].item() == 1.0


def test_dual_clip_does_not_touch_positive_advantage():
    # A=+2, r=100, c=10: max(-200, -2*1.28) = -2.56 (upper clip), dual not applied
    loss, _, metrics = one_token(100.0, 2.0, clip_ratio_c=10.0)
    assert loss == pytest.approx(-2.56)
    assert metrics["pg_clipfrac_dual"].item() == 0.0


@pytest.mark.parametrize("c", [1.0, 0.5])
def test_dual_clip_constant_must_exceed_one(c):
    with pytest.raises(ValueError, match=rf"clip_ratio_c.*{c}"):
        one_token(1.0, -1.0, clip_ratio_c=c)


def test_extreme_log_ratio_stays_finite():
    # float32, log-ratio 200: exp(200) overflows to inf and -0 * inf = nan.
    # With the clamp at 20 the A=0 token gives 0 and the A=-1 token e^20.
    log_probs = torch.tensor([[200.0, 200.0]], requires_grad=True)
    loss, _ = compute_policy_loss(
        log_probs,
        torch.zeros(1, 2),
        torch.tensor([[0.0, -1.0]]),
        torch.ones(1, 2),
    )
    loss.backward()
    # (0 + e^20) / 2 = 485165195.4097903 / 2
    assert loss.item() == pytest.approx(242582597.70489514, rel=1e-6)
    assert torch.isfinite(log_probs.grad).all()


def test_policy_loss_rejects_shape_mismatch():
    with pytest.raises(ValueError, match=r"advantages \(2,\)"):
        compute_policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2), torch.ones(2, 3))


def test_policy_loss_unknown_mode():
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        one_token(1.0, 1.0, loss_agg_mode="sum")


# --------------------------------------------------------------------------
# compute_policy_loss: a batch, metrics and gradient
# --------------------------------------------------------------------------

#            ratio   A     token loss (c = 10)            clip
# row 0 t0   1.5    +1    max(-1.5, -1.28) = -1.28        high
# row 0 t1   1.25   +1    max(-1.25, -1.25) = -1.25       -
# row 0 t2   0.5    -1    max(0.5, 0.8) = 0.8             low
# row 0 t3   20     -1    min(max(20, 1.28), 10) = 10     dual (20 without c)
# row 1 t0   1.0    -1    max(1, 1) = 1                   -
# row 1 t1   0.5    +1    max(-0.5, -0.8) = -0.5          -
# row 1 t2   1.5    +1    masked (would be high)
# row 1 t3   0.1    -1    masked (would be low)
BATCH_RATIOS = [[1.5, 1.25, 0.5, 20.0], [1.0, 0.5, 1.5, 0.1]]
BATCH_ADV = [[1.0, 1.0, -1.0, -1.0], [-1.0, 1.0, 1.0, -1.0]]
BATCH_MASK = [[1, 1, 1, 1], [1, 1, 0, 0]]


def batch_loss(**kwargs):
    log_probs = t(BATCH_RATIOS).log().requires_grad_()
    loss, metrics = compute_policy_loss(log_probs, torch.zeros(2, 4, dtype=F64), t(BATCH_ADV), t(BATCH_MASK), **kwargs)
    loss.backward()
    return loss, metrics, log_probs.grad


def test_batch_loss_with_dual_clip():
    loss, _, _ = batch_loss(clip_ratio_c=10.0)
    # (-1.28 - 1.25 + 0.8 + 10 + 1 - 0.5) / 6 = 8.77 / 6
    assert_close(loss, 1.4616666666666667)


def test_batch_loss_without_dual_clip():
    loss, _, _ = batch_loss()
    # (-1.28 - 1.25 + 0.8 + 20 + 1 - 0.5) / 6 = 18.77 / 6
    assert_close(loss, 3.128333333333333)


def test_clip_fraction_metrics():
    _, metrics, _ = batch_loss(clip_ratio_c=10.0)
    # one token of each kind among the 6 unmasked ones; masked ones not counted
    assert_close(metrics["pg_clipfrac_high"], 1 / 6)
    assert_close(metrics["pg_clipfrac_low"], 1 / 6)
    assert_close(metrics["pg_clipfrac_dual"], 1 / 6)
    # (1.5 + 1.25 + 0.5 + 20 + 1 + 0.5) / 6 = 24.75 / 6
    assert_close(metrics["ratio_mean"], 4.125)
    # mean(old - new) = -ln(1.5 * 1.25 * 0.5 * 20 * 1 * 0.5) / 6 = -ln(9.375) / 6
    assert_close(metrics["approx_kl"], -0.37300776197607904)
    for value in metrics.values():
        assert value.dim() == 0 and not value.requires_grad


def test_dual_clip_fraction_is_zero_when_off():
    _, metrics, _ = batch_loss()
    assert metrics["pg_clipfrac_dual"].item() == 0.0


def test_token_mean_gradient_is_per_token_gradient_over_total_tokens():
    _, _, grad = batch_loss(clip_ratio_c=10.0)
    # per-token d l / d log r: -A r where unclipped, 0 where clipped/masked:
    #   row 0: clipped, -1.25, clipped, clipped   row 1: +1.0, -0.5, masked, masked
    # divided by the 6 unmasked tokens
    assert_close(
        grad,
        [
            [0.0, -0.20833333333333334, 0.0, 0.0],  # -1.25 / 6
            [0.16666666666666666, -0.08333333333333333, 0.0, 0.0],  # 1/6, -0.5/6
        ],
    )


def test_token_mean_split_across_pieces_equals_full_batch():
    # r = 1 everywhere, so l = -A and d l / d log r = -A on unmasked tokens.
    # Sequence 0: A = +1 on 4 tokens; sequence 1: A = -1 on 1 token.
    advantages = t([[1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, -1.0, -1.0]])
    mask = t([[1, 1, 1, 1], [1, 0, 0, 0]])

    def run(rows, **kwargs):
        log_probs = torch.zeros(len(rows), 4, dtype=F64, requires_grad=True)
        loss, _ = compute_policy_loss(
            log_probs, torch.zeros(len(rows), 4, dtype=F64), advantages[rows], mask[rows], **kwargs
        )
        loss.backward()
        return loss, log_probs.grad

    full_loss, full_grad = run([0, 1])
    # (-4 + 1) / 5 tokens
    assert_close(full_loss, -0.6)
    assert_close(full_grad, [[-0.2, -0.2, -0.2, -0.2], [0.2, 0.0, 0.0, 0.0]])

    # Each half divided by the mini-batch's 5 tokens: -4/5 + 1/5 = -0.6
    loss_0, grad_0 = run([0], num_tokens=5)
    loss_1, grad_1 = run([1], num_tokens=5)
    assert_close(loss_0 + loss_1, -0.6)
    assert_close(torch.cat([grad_0, grad_1]), full_grad.tolist())

    # The mean of per-half token means is (-4/4 + 1/1) / 2 = 0: wrong.
    mean_0, _ = run([0])
    mean_1, _ = run([1])
    assert_close((mean_0 + mean_1) / 2, 0.0)
    assert ((mean_0 + mean_1) / 2).item() != pytest.approx(full_loss.item())


# --------------------------------------------------------------------------
# compute_group_advantages
# --------------------------------------------------------------------------


def test_advantages_normal_group():
    # R = [1, -1, -1, -1]: mean -0.5, deviations [1.5, -0.5, -0.5, -0.5],
    # squares sum 2.25 + 3 * 0.25 = 3, unbiased var 3 / 3 = 1, std 1.
    adv = compute_group_advantages(t([1.0, -1.0, -1.0, -1.0]), torch.tensor([0, 0, 0, 0]))
    # 1.5 / (1 + 1e-6), -0.5 / (1 + 1e-6)
    assert_close(adv, [1.4999985000015, -0.4999995000005, -0.4999995000005, -0.4999995000005])


def test_advantages_one_member_group_uses_mean_0_std_1():
    # 0.7 / (1 + 1e-6)
    adv = compute_group_advantages(t([0.7]), torch.tensor([3]))
    assert_close(adv, [0.6999993000007])


def test_advantages_all_equal_group_is_zero():
    adv = compute_group_advantages(t([1.0, 1.0, 1.0]), torch.tensor([5, 5, 5]))
    assert adv.tolist() == [0.0, 0.0, 0.0]


def test_advantages_all_equal_float32_group_has_no_rounding_residue():
    # 0.1 is not exact in float32; a float32 mean could be off by one ulp
    # (~7e-9), which divided by eps = 1e-6 would give ~0.007.
    adv = compute_group_advantages(torch.full((3,), 0.1), torch.tensor([0, 0, 0]))
    assert adv.dtype == torch.float32
    assert adv.abs().max().item() < 1e-6


def test_advantages_non_contiguous_groups():
    # group 7 at positions 0, 2, 4: R = [1, 2, 6], mean 3, deviations [-2, -1, 3],
    #   squares 4 + 1 + 9 = 14, var 14 / 2 = 7, std sqrt(7) = 2.6457513110645907
    # group 3 at positions 1, 3, 5: R = [1, -1, 1], mean 1/3, deviations
    #   [2/3, -4/3, 2/3], squares 24/9, var (24/9) / 2 = 4/3, std 1.1547005383792517
    scores = t([1.0, 1.0, 2.0, -1.0, 6.0, 1.0])
    adv = compute_group_advantages(scores, torch.tensor([7, 3, 7, 3, 7, 3]))
    expected = [
        -0.7559286603042766,  # -2 / (sqrt 7 + 1e-6)
        0.5773497691900588,  # (2/3) / (1.1547005383792517 + 1e-6)
        -0.3779643301521383,  # -1 / (sqrt 7 + 1e-6)
        -1.1546995383801175,  # (-4/3) / (1.1547005383792517 + 1e-6)
        1.133892990456415,  # 3 / (sqrt 7 + 1e-6)
        0.5773497691900588,
    ]
    assert_close(adv, expected)


@pytest.mark.parametrize(
    "ids",
    [["q7", "q3", "q7", "q3", "q7", "q3"], np.array(["q7", "q3", "q7", "q3", "q7", "q3"])],
    ids=["list-of-str", "numpy-str"],
)
def test_advantages_accept_hashable_group_ids(ids):
    # same groups as the non-contiguous test, under string names
    adv = compute_group_advantages(t([1.0, 1.0, 2.0, -1.0, 6.0, 1.0]), ids)
    assert_close(adv[:2], [-0.7559286603042766, 0.5773497691900588])


def test_advantages_without_std_normalisation():
    # Dr. GRPO: R - mean. Group a: [1, -1, -1, -1] - (-0.5); group b: single
    # member keeps its score (mean 0).
    adv = compute_group_advantages(t([1.0, -1.0, -1.0, -1.0, 0.7]), ["a", "a", "a", "a", "b"], norm_by_std=False)
    assert_close(adv, [1.5, -0.5, -0.5, -0.5, 0.7])


def test_advantages_shape_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"\(3,\).*\(2,\)"):
        compute_group_advantages(t([1.0, 2.0, 3.0]), torch.tensor([0, 0]))


NAN = float("nan")


# --------------------------------------------------------------------------
# Registries: built-ins, lookup errors, a user's own variant
# --------------------------------------------------------------------------


def test_builtin_names():
    assert policy_losses() == ("ppo_clip", "gspo_token", "gspo", "cispo", "clip_cov", "kl_cov")
    assert adv_estimators() == (
        "grpo",
        "dr_grpo",
        "rloo",
        "opo",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
        "rae",
    )
    assert policy_loss_fn("ppo_clip") is compute_policy_loss
    assert adv_estimator_fn("grpo") is compute_group_advantages


def test_an_import_path_names_a_function_in_any_process():
    # Learners and Tune trials do not run the driver's decorators: "module:function" imports it.
    assert policy_loss_fn("dapo_rllib.algorithm.core_algos:compute_policy_loss") is compute_policy_loss
    assert adv_estimator_fn("dapo_rllib.algorithm.core_algos:dr_grpo_advantages") is core_algos.dr_grpo_advantages
    with pytest.raises(ModuleNotFoundError, match="no_such_module"):
        policy_loss_fn("no_such_module:loss")


def test_ppo_clip_by_name_gives_the_batch_loss():
    log_probs = t(BATCH_RATIOS).log()
    loss, _ = policy_loss_fn("ppo_clip")(
        log_probs,
        torch.zeros(2, 4, dtype=F64),
        t(BATCH_ADV),
        t(BATCH_MASK),
        clip_eps_low=0.2,
        clip_eps_high=0.28,
        clip_ratio_c=10.0,
        loss_agg_mode="token-mean",
    )
    # as test_batch_loss_with_dual_clip: 8.77 / 6
    assert_close(loss, 1.4616666666666667)


def test_adv_estimators_by_name():
    scores, ids = t([1.0, -1.0, -1.0, -1.0, 0.7]), ["a", "a", "a", "a", "b"]
    # grpo: group a has mean -0.5 and std 1 (see test_advantages_normal_group):
    # 1.5 / (1 + 1e-6), -0.5 / (1 + 1e-6); the single member b: 0.7 / (1 + 1e-6)
    assert_close(
        adv_estimator_fn("grpo")(scores, ids),
        [1.4999985000015, -0.4999995000005, -0.4999995000005, -0.4999995000005, 0.6999993000007],
    )
    # dr_grpo: R - mean_g; the single member keeps its score
    assert_close(adv_estimator_fn("dr_grpo")(scores, ids), [1.5, -0.5, -0.5, -0.5, 0.7])


@pytest.mark.parametrize(
    ("lookup", "listing", "bad"),
    [(policy_loss_fn, policy_losses, "ppo"), (adv_estimator_fn, adv_estimators, "remax")],
)
def test_unknown_name_lists_valid_names(lookup, listing, bad):
    with pytest.raises(ValueError) as err:
        lookup(bad)
    assert repr(bad) in str(err.value)
    for name in listing():
        assert name in str(err.value)


@pytest.mark.usefixtures("restore_registries")
@pytest.mark.parametrize(
    ("register", "lookup", "name", "original"),
    [
        (register_policy_loss, policy_loss_fn, "ppo_clip", compute_policy_loss),
        (register_adv_estimator, adv_estimator_fn, "grpo", compute_group_advantages),
    ],
)
def test_registering_a_name_twice_is_an_error(register, lookup, name, original):
    with pytest.raises(ValueError, match=f"'{name}' is already registered"):
        register(name)(lambda *args, **kwargs: None)
    assert lookup(name) is original


def test_register_needs_a_name():
    # @register_policy_loss without "(name)" would pass the function as the name
    with pytest.raises(ValueError, match="non-empty string, got <function"):
        register_policy_loss(compute_policy_loss)


@pytest.mark.usefixtures("restore_registries")
def test_user_policy_loss_found_by_name():
    @register_policy_loss("test_reinforce")
    def reinforce(log_probs, old_log_probs, advantages, response_mask, *, loss_agg_mode, **unused):
        # REINFORCE: l = -A log pi_theta, no ratio and no clip
        loss = agg_loss(-advantages * log_probs, response_mask, loss_agg_mode)
        return loss, {}

    assert "test_reinforce" in policy_losses()
    log_probs = t([[-1.0, -2.0], [-0.5, NAN]]).requires_grad_()
    loss, metrics = policy_loss_fn("test_reinforce")(
        log_probs,
        torch.zeros(2, 2, dtype=F64),
        t([[1.0, 1.0], [-2.0, -2.0]]),
        t([[1, 1], [1, 0]]),
        clip_eps_low=0.2,
        clip_eps_high=0.28,
        clip_ratio_c=10.0,
        loss_agg_mode="token-mean",
        num_tokens=None,
        num_seqs=None,
        loss_scale_factor=None,
    )
    loss.backward()
    # -A log p = [1, 2] and [-(-2)(-0.5)] = [-1]; token-mean (1 + 2 - 1) / 3
    assert_close(loss, 2 / 3)
    # d l / d log p = -A / 3 tokens
    assert_close(log_probs.grad, [[-1 / 3, -1 / 3], [2 / 3, 0.0]])
    assert metrics == {}


@pytest.mark.usefixtures("restore_registries")
def test_user_adv_estimator_found_by_name():
    @register_adv_estimator("test_rloo")
    def rloo(scores, group_ids):
        # leave-one-out baseline, one group only: R_i - mean of the other G - 1
        return scores - (scores.sum() - scores) / (len(scores) - 1)

    # sum 4: baselines 3/3, 4/3, 4/3, 1/3
    adv = adv_estimator_fn("test_rloo")(t([1.0, 0.0, 0.0, 3.0]), [0, 0, 0, 0])
    assert_close(adv, [0.0, -4 / 3, -4 / 3, 8 / 3])


def test_user_variants_did_not_leak():
    assert "test_reinforce" not in policy_losses()
    assert "test_rloo" not in adv_estimators()


# --------------------------------------------------------------------------
# Presets as config values: naive GRPO, DAPO, Dr. GRPO on one batch
# --------------------------------------------------------------------------

# One group of 3 responses, scores [1, 0, -1]: mean 0, squares 2, unbiased var
# 2 / 2 = 1, std 1. grpo: A = [1, 0, -1] / (1 + 1e-6); dr_grpo: A = [1, 0, -1].
# Responses of 1, 2 and 3 tokens (width 3, loss_scale_factor 4):
#   seq 0: r = [1.25]            A > 0
#   seq 1: r = [1.5, 0.5]        A = 0: loss 0 whatever r
#   seq 2: r = [1.0, 20, 0.5]    A < 0
PRESET_SCORES = [1.0, 0.0, -1.0]
PRESET_RATIOS = [[1.25, 1.0, 1.0], [1.5, 0.5, 1.0], [1.0, 20.0, 0.5]]
PRESET_MASK = [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
PRESETS = {
    "naive GRPO": dict(
        adv_estimator="grpo",
        policy_loss="ppo_clip",
        clip_eps_low=0.2,
        clip_eps_high=0.2,
        clip_ratio_c=None,
        loss_agg_mode="seq-mean-token-mean",
    ),
    "DAPO": dict(
        adv_estimator="grpo",
        policy_loss="ppo_clip",
        clip_eps_low=0.2,
        clip_eps_high=0.28,
        clip_ratio_c=10.0,
        loss_agg_mode="token-mean",
    ),
    "Dr. GRPO": dict(
        adv_estimator="dr_grpo",
        policy_loss="ppo_clip",
        clip_eps_low=0.2,
        clip_eps_high=0.2,
        clip_ratio_c=None,
        loss_agg_mode="seq-mean-token-sum-norm",
    ),
}


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        # a = 1 / (1 + 1e-6). Tokens: seq 0 max(-1.25a, -1.2a) = -1.2a (clip at 1.2);
        # seq 2 [1a, 20a (no dual clip), max(0.5a, 0.8a) = 0.8a] sum 21.8a.
        # Mean of sequence means: (-1.2a + 0 + 21.8a / 3) / 3 = 18.2a / 9
        ("naive GRPO", 2.0222202000020224),
        # seq 0: -1.25a (1.25 < 1.28, not clipped); seq 2: [1a, min(20a, 10a), 0.8a]
        # sum 11.8a. Token mean over 6 tokens: (-1.25 + 11.8)a / 6 = 10.55a / 6
        ("DAPO", 1.7583315750017587),
        # A exactly [1, 0, -1]: seq 0 -1.2, seq 2 21.8 as in naive GRPO; each
        # sequence's sum / 4, then mean over 3: (-0.3 + 0 + 5.45) / 3 = 5.15 / 3
        ("Dr. GRPO", 1.7166666666666668),
    ],
)
def test_presets_differ_where_they_should(preset, expected):
    settings = dict(PRESETS[preset])
    advantages = adv_estimator_fn(settings.pop("adv_estimator"))(t(PRESET_SCORES), [0, 0, 0])
    loss, _ = policy_loss_fn(settings.pop("policy_loss"))(
        t(PRESET_RATIOS).log(),
        torch.zeros(3, 3, dtype=F64),
        advantages[:, None].expand(3, 3),
        t(PRESET_MASK),
        loss_scale_factor=4,
        **settings,
    )
    assert_close(loss, expected)


# --------------------------------------------------------------------------
# filter_groups
# --------------------------------------------------------------------------


def test_filter_groups():
    #            all-correct  all-wrong  mixed     single  rounding noise   small real spread
    #  group:    a a a        b b b      c c c     d       e e              f f
    groups = ["a", "b", "c", "a", "b", "c", "d", "e", "f", "a", "b", "c", "e", "f"]
    values = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.1 + 0.2, 0.0, 1.0, 0.0, 1.0, 0.3, 1e-3]
    # e: 0.1 + 0.2 = 0.30000000000000004 vs 0.3 -- unequal as floats, so a
    #    plain `std > 0` would keep it; its std (~2.8e-17) is below tol.
    assert np.std([0.1 + 0.2, 0.3]) > 0
    # f: std of [0, 0.001] = 0.0005 > 1e-6, kept.
    keep = filter_groups(torch.tensor(values, dtype=F64), groups)
    assert keep.dtype == torch.bool
    expected = {"a": False, "b": False, "c": True, "d": True, "e": False, "f": True}
    assert keep.tolist() == [expected[g] for g in groups]


def test_filter_groups_accepts_lists_and_integer_tensor_ids():
    # group 0: [1, 1] dropped; group 1: [1, 0] kept
    keep = filter_groups([1, 1, 1, 0], torch.tensor([0, 0, 1, 1]))
    assert keep.tolist() == [False, False, True, True]


def test_filter_groups_tests_spread_not_mean():
    # both groups have mean 0.5; only the one with spread is kept
    keep = filter_groups([0.5, 0.5, 0.0, 1.0], [0, 0, 1, 1])
    assert keep.tolist() == [False, False, True, True]


def test_filter_groups_shape_mismatch():
    with pytest.raises(ValueError, match=r"\(3,\).*\(2,\)"):
        filter_groups([1.0, 0.0, 1.0], [0, 0])


# --------------------------------------------------------------------------
# overlong_penalty: L_max = 20, L_cache = 4, free budget L_max - L_cache = 16
# --------------------------------------------------------------------------


def test_overlong_penalty():
    lengths = torch.tensor([10, 16, 17, 18, 20, 21, 30])
    penalty = overlong_penalty(lengths, max_response_length=20, overlong_buffer_len=4)
    # 10, 16 -> 0 (within budget); 17 -> (16 - 17)/4 = -0.25; 18 -> -2/4 = -0.5;
    # 20 -> -4/4 = -1; 21, 30 -> -1 (past L_max)
    assert_close(penalty, [0.0, 0.0, -0.25, -0.5, -1.0, -1.0, -1.0])


def test_overlong_penalty_factor():
    penalty = overlong_penalty([16, 17, 20, 25], max_response_length=20, overlong_buffer_len=4, penalty_factor=0.5)
    # [0, -0.25, -1, -1] * 0.5
    assert_close(penalty, [0.0, -0.125, -0.5, -0.5])


def test_overlong_penalty_buffer_equal_to_max_length():
    # L_cache = L_max = 20: budget 0, length 10 -> (0 - 10) / 20 = -0.5
    penalty = overlong_penalty([0, 10], max_response_length=20, overlong_buffer_len=20)
    assert_close(penalty, [0.0, -0.5])


def test_overlong_penalty_disabled_with_zero_buffer():
    penalty = overlong_penalty([5, 20, 50], max_response_length=20, overlong_buffer_len=0)
    assert penalty.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("buffer_len", [-1, 21])
def test_overlong_penalty_rejects_bad_buffer(buffer_len):
    with pytest.raises(ValueError, match=rf"overlong_buffer_len.*got {buffer_len}"):
        overlong_penalty([1], max_response_length=20, overlong_buffer_len=buffer_len)


def test_overlong_penalty_rejects_bad_length_and_factor():
    with pytest.raises(ValueError, match="max_response_length"):
        overlong_penalty([1], max_response_length=0, overlong_buffer_len=0)
    with pytest.raises(ValueError, match="penalty_factor"):
        overlong_penalty([1], max_response_length=20, overlong_buffer_len=4, penalty_factor=-1.0)


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def test_masked_mean():
    x = t([[1.0, 2.0], [3.0, 4.0], [float("nan"), 5.0]])
    mask = t([[1, 0], [1, 1], [0, 0]])
    # (1 + 3 + 4) / 3
    assert_close(masked_mean(x, mask), 2.6666666666666665)
    # rows: 1 / 1, (3 + 4) / 2, empty row -> 0
    assert_close(masked_mean(x, mask, dim=-1), [1.0, 3.5, 0.0])


def test_entropy_of_uniform_is_log_vocab():
    # 8 equal logits: H = ln 8, whatever the shared value
    logits = torch.cat([torch.zeros(2, 3, 8), torch.full((1, 3, 8), 50.0)]).to(F64)
    assert_close(entropy_from_logits(logits), [[2.0794415416798357] * 3] * 3)


def test_entropy_two_class_and_stability():
    # logits [0, ln 3] -> p = [1/4, 3/4]; H = 0.25 ln 4 + 0.75 ln(4/3)
    # logits [1000, 0] -> p = [1, e^-1000]; H ~ 0 and finite (no overflow)
    logits = t([[0.0, math.log(3.0)], [1000.0, 0.0]])
    assert_close(entropy_from_logits(logits), [0.5623351446188083, 0.0])


def test_kl_penalty_kinds():
    log_probs = t([[-1.0, -2.0]])
    ref = t([[-1.5, -1.0]])
    # logp - ref = [0.5, -1.0]
    assert KL_PENALTY_KINDS == ("kl", "abs", "mse", "low_var_kl")
    assert_close(kl_penalty(log_probs, ref, "kl"), [[0.5, -1.0]])
    assert_close(kl_penalty(log_probs, ref, "abs"), [[0.5, 1.0]])
    # 0.5 * [0.25, 1.0]
    assert_close(kl_penalty(log_probs, ref, "mse"), [[0.125, 0.5]])
    # x = ref - logp = [-0.5, 1.0]: e^-0.5 + 0.5 - 1, e^1 - 1 - 1
    assert_close(kl_penalty(log_probs, ref), [[0.10653065971263342, 0.7182818284590451]])


def test_low_var_kl_is_capped_at_10():
    # x = 5: e^5 - 5 - 1 = 142.41... -> 10
    assert kl_penalty(t([[0.0]]), t([[5.0]]), "low_var_kl").item() == 10.0


def test_kl_penalty_unknown_kind():
    with pytest.raises(ValueError) as err:
        kl_penalty(t([[0.0]]), t([[0.0]]), "k4")
    for kind in KL_PENALTY_KINDS:
        assert kind in str(err.value)


# ----- rollout / learner mismatch -------------------------------------------------------


def test_rollout_mismatch_is_the_masked_mean_and_max_of_the_absolute_difference():
    old = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]])
    rollout = torch.tensor([[-1.1, -2.0, -2.5], [-0.5, -0.8, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    metrics = core_algos.rollout_mismatch(old, rollout, mask)
    # |diffs| on masked tokens: 0.1, 0, 0.5, 0, 0.3 (the padded 9.0 does not count)
    assert metrics[Metrics.ROLLOUT_LOGP_ABS_DIFF].item() == pytest.approx(0.9 / 5)
    assert metrics[Metrics.ROLLOUT_LOGP_ABS_DIFF_MAX].item() == pytest.approx(0.5)


def test_truncated_importance_weights_by_hand():
    # pi_old / pi_rollout = 0.5, 1, 1.5, 4 (capped at 2), and a padded position
    old = torch.log(torch.tensor([[0.2, 0.3, 0.6, 0.8, 0.1]]))
    rollout = torch.log(torch.tensor([[0.4, 0.3, 0.4, 0.2, 0.9]]))
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    weights, metrics = core_algos.rollout_correction_weights(old, rollout, mask, mode="tis", cap=2.0)
    torch.testing.assert_close(weights, torch.tensor([[0.5, 1.0, 1.5, 2.0, 1.0]]))
    assert not weights.requires_grad
    assert metrics[Metrics.ROLLOUT_IS_WEIGHT_MEAN].item() == pytest.approx(5.0 / 4)
    assert metrics[Metrics.ROLLOUT_IS_CAPPED_FRACTION].item() == pytest.approx(1 / 4)


def test_no_correction_and_bad_settings():
    x = torch.zeros(1, 2)
    assert core_algos.rollout_correction_weights(x, x, torch.ones(1, 2), mode=None) == (None, {})
    with pytest.raises(ValueError, match=r"rollout_correction='is'; expected one of \(None, 'tis', 'seq_tis'"):
        core_algos.rollout_correction_weights(x, x, torch.ones(1, 2), mode="is")
    with pytest.raises(ValueError, match="rollout_is_cap must be >= 1, got 0.5"):
        core_algos.rollout_correction_weights(x, x, torch.ones(1, 2), cap=0.5)


def test_weighting_the_advantage_weights_each_tokens_clipped_loss():
    # The learner applies the TIS weight through the advantage: for PPO's clip (and dual
    # clip) that is the weight times the token's loss, token by token.
    torch.manual_seed(0)
    logp, old = torch.randn(3, 5) * 0.5 - 1, torch.randn(3, 5) * 0.5 - 1
    adv = torch.randn(3, 1).expand(3, 5).clone()
    w = torch.rand(3, 5) * 2
    mask = torch.ones(3, 5)
    settings = dict(clip_eps_low=0.2, clip_eps_high=0.28, clip_ratio_c=3.0, loss_agg_mode="token-mean")
    weighted, _ = core_algos.compute_policy_loss(logp, old, adv * w, mask, **settings)
    per_token = torch.stack(
        [
            torch.stack(
                [
                    core_algos.compute_policy_loss(
                        logp[i : i + 1, t : t + 1],
                        old[i : i + 1, t : t + 1],
                        adv[i : i + 1, t : t + 1],
                        mask[i : i + 1, t : t + 1],
                        **settings,
                    )[0]
                    for t in range(5)
                ]
            )
            for i in range(3)
        ]
    )
    torch.testing.assert_close(weighted, (per_token * w).mean())
