"""The registered algorithms (GRPO, Dr. GRPO, GSPO, CISPO, RLOO, REINFORCE++ beside DAPO): their
names in Tune, their papers' defaults, the settings that contradict them, and the comparison
grid over them."""

import pytest
from ray.tune.registry import get_trainable_cls
from ray.tune.search.variant_generator import generate_variants

import dapo_rllib  # noqa: F401  (registers the algorithms)
from dapo_rllib.algorithm.core_algos import CovarianceSelection
from dapo_rllib.algorithm.dapo import DAPO, DAPOConfig
from dapo_rllib.algorithm.family import (
    ALGORITHMS,
    CISPOConfig,
    DrGRPOConfig,
    GRPOConfig,
    GSPOConfig,
    REINFORCEPlusPlusConfig,
    RLOOConfig,
    algorithm_class,
)
from dapo_rllib.experiments.algorithm_comparison import (
    ALGORITHM_KEY,
    COMPARED_SETTINGS,
    algorithm_settings,
    comparison_search_space,
)

NAMES = ["DAPO", "GRPO", "DrGRPO", "GSPO", "CISPO", "RLOO", "REINFORCE++"]


def test_every_algorithm_is_registered_with_tune_under_its_name():
    assert list(ALGORITHMS) == NAMES
    for name in NAMES:
        cls = get_trainable_cls(name)
        assert cls is ALGORITHMS[name] and cls.NAME == name and issubclass(cls, DAPO)
        config = cls.get_default_config()
        assert config.algo_class is cls and type(config) is cls.config_class


# (policy_loss, adv_estimator, loss_agg_mode, clip_eps_low, clip_eps_high, clip_ratio_c, kl_coef, dynamic_sampling)
PAPER_DEFAULTS = {
    "DAPO": ("ppo_clip", "grpo", "token-mean", 0.2, 0.28, 10.0, 0.0, True),
    "GRPO": ("ppo_clip", "grpo", "seq-mean-token-mean", 0.2, 0.2, None, 0.04, False),
    "DrGRPO": ("ppo_clip", "dr_grpo", "seq-mean-token-sum-norm", 0.2, 0.2, None, 0.0, False),
    "GSPO": ("gspo", "grpo", "seq-mean-token-mean", 3e-4, 4e-4, None, 0.0, False),
    "CISPO": ("cispo", "grpo", "token-mean", 1.0, 4.0, None, 0.0, False),
    "RLOO": ("ppo_clip", "rloo", "seq-mean-token-sum", 0.2, 0.2, None, 0.0, False),
    "REINFORCE++": ("ppo_clip", "reinforce_plus_plus", "token-mean", 0.2, 0.2, None, 0.0, False),
}
KEYS = (
    "policy_loss",
    "adv_estimator",
    "loss_agg_mode",
    "clip_eps_low",
    "clip_eps_high",
    "clip_ratio_c",
    "kl_coef",
    "dynamic_sampling",
)


@pytest.mark.parametrize("name", NAMES)
def test_each_algorithm_has_its_papers_defaults_and_validates(name):
    config = ALGORITHMS[name].get_default_config()
    assert tuple(getattr(config, key) for key in KEYS) == PAPER_DEFAULTS[name]
    if name != "DAPO":  # DAPO's soft overlong punishment is its own
        assert (config.overlong_buffer_len, config.overlong_filtering) == (0, False)
    config.validate()


def test_the_compared_settings_are_every_default_that_differs_from_dapos():
    dapo = DAPOConfig().to_dict()
    for name, cls in ALGORITHMS.items():
        mine = cls.get_default_config().to_dict()
        differing = {key for key in mine if key not in ("algo_class", "_algo_class") and mine[key] != dapo.get(key)}
        assert differing <= set(COMPARED_SETTINGS), (name, differing - set(COMPARED_SETTINGS))
        assert differing or name == "DAPO", name  # the comparison sees every neighbour's own settings


def test_an_unknown_algorithm_lists_the_registered_ones():
    with pytest.raises(
        ValueError,
        match=r"unknown algorithm 'PPO'; the registered algorithms are \['DAPO', 'GRPO', 'DrGRPO', 'GSPO', 'CISPO', 'RLOO', 'REINFORCE\+\+'\]",
    ):
        algorithm_class("PPO")


@pytest.mark.parametrize(
    "config, message",
    [
        (
            GSPOConfig().training(loss_agg_mode="token-mean"),
            r"loss_agg_mode='token-mean' is not defined for policy_loss='gspo'; expected one of \('seq-mean-token-mean',\)",
        ),
        (
            GSPOConfig().training(clip_ratio_c=3.0),
            "clip_ratio_c=3.0: policy_loss='gspo' has no dual clip; set clip_ratio_c=None",
        ),
        (CISPOConfig().training(clip_ratio_c=3.0), "clip_ratio_c=3.0: policy_loss='cispo' has no dual clip"),
        (GRPOConfig().training(clip_eps_low=1.0), r"clip_eps_low=1.0 must be in \[0, 1\)"),
        (CISPOConfig().training(clip_eps_low=1.5), r"clip_eps_low=1.5 must be in \[0, 1\] \(1: no lower bound\)"),
        (DrGRPOConfig().training(clip_eps_high=-0.1), "clip_eps_high=-0.1 must be >= 0"),
        (RLOOConfig().training(adv_estimator="loo"), "adv_estimator='loo'"),
        (REINFORCEPlusPlusConfig().training(policy_loss="reinforce"), "policy_loss='reinforce'"),
        (
            GRPOConfig().training(rollout_correction="seq_mask", rollout_mask_band=(2.0, 0.5)),
            r"rollout_mask_band=\(2.0, 0.5\) must be \(low, high\) with 0 < low < high",
        ),
        (GRPOConfig().training(rollout_correction="mask"), "rollout_correction='mask'; expected one of"),
        (
            DAPOConfig().training(filter_band=(0.9, 0.1)),
            r"filter_band=\(0.9, 0.1\) must be \(low, high\) with low < high",
        ),
        (DAPOConfig().training(filter_min_std=-1), "filter_min_std=-1 must be >= 0"),
        (
            DAPOConfig().training(policy_loss="clip_cov", clip_ratio_c=10.0),
            "clip_ratio_c=10.0: policy_loss='clip_cov' has no dual clip",
        ),
        (
            DAPOConfig().training(policy_loss="clip_cov", clip_ratio_c=None, clip_cov_ratio=0.0),
            r"clip_cov_ratio=0.0 must be in \(0, 1\]: a fraction of the loss tokens",
        ),
        (
            DAPOConfig().training(policy_loss="clip_cov", clip_ratio_c=None, clip_cov_lb=5.0, clip_cov_ub=1.0),
            r"clip_cov_lb=5.0 must be < clip_cov_ub=1.0: the covariance band is \(lb, ub\)",
        ),
        (
            DAPOConfig().training(policy_loss="kl_cov", clip_ratio_c=None, kl_cov_coef=-0.1),
            "kl_cov_coef=-0.1 must be >= 0",
        ),
    ],
)
def test_a_setting_that_contradicts_the_algorithm_is_a_clear_error(config, message):
    with pytest.raises(ValueError, match=message):
        config.validate()


def test_cispo_may_drop_its_lower_bound_and_gspo_token_takes_a_token_mean():
    CISPOConfig().training(clip_eps_low=1.0).validate()
    GSPOConfig().training(policy_loss="gspo_token", loss_agg_mode="token-mean").validate()


def test_clip_cov_and_kl_cov_take_their_own_selection_settings():
    # The authors' Clip-Cov: clip bounds 1 and 1 (the weight-like range [0, 2]), ratio 2e-4, band (1, 5).
    clip_cov = DAPOConfig().training(policy_loss="clip_cov", clip_ratio_c=None, clip_eps_low=1.0, clip_eps_high=1.0)
    clip_cov.validate()
    assert clip_cov.loss_settings.covariance_selection == CovarianceSelection(ratio=2e-4, band=(1.0, 5.0))
    kl_cov = DAPOConfig().training(policy_loss="kl_cov", clip_ratio_c=None, kl_cov_ratio=2e-3)
    kl_cov.validate()
    assert kl_cov.loss_settings.covariance_selection == CovarianceSelection(ratio=2e-3)
    assert DAPOConfig().loss_settings.covariance_selection is None


def test_the_comparison_grid_is_one_trial_per_algorithm_and_seed_with_its_settings(tiny_model_path):
    base = (
        DAPOConfig()
        .environment("dapo_math", env_config={"dataset": "arithmetic"})
        .training(model_path=tiny_model_path, max_response_length=32)
    )
    space = comparison_search_space(base, seeds=2, soft_overlong_buffer=8)
    trials = [resolved for _, resolved in generate_variants(space.to_dict())]
    assert sorted((t[ALGORITHM_KEY], t["seed"]) for t in trials) == sorted((n, s) for n in NAMES for s in (0, 1))
    for trial in trials:
        expected = algorithm_settings(trial[ALGORITHM_KEY], soft_overlong_buffer=8)
        assert {key: trial[key] for key in COMPARED_SETTINGS} == expected
        DAPOConfig().update_from_dict(trial).validate()  # every arm is a valid config
    # DAPO's 4,096-token soft overlong buffer is scaled to the task; the others have none.
    assert algorithm_settings("DAPO", soft_overlong_buffer=8)["overlong_buffer_len"] == 8
    assert algorithm_settings("GSPO", soft_overlong_buffer=8)["overlong_buffer_len"] == 0
