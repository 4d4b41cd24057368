"""DAPO's neighbours as registered RLlib algorithms: GRPO, Dr. GRPO, GSPO, CISPO, RLOO, REINFORCE++.

Each is DAPO's training loop (the same env runners, connectors and learner) under its own
name, with a config class whose defaults are its paper's: a policy loss, an advantage
estimator and aggregation from `core_algos`' registries, and DAPO's extras (Clip-Higher,
dynamic sampling, overlong shaping) switched off where the paper has none. Every setting can
still be changed like DAPO's, so `GSPOConfig().training(dynamic_sampling=True)` is GSPO with
DAPO's dynamic sampling. `dapo_rllib.registry` registers each class with Tune under its `NAME`
(`tune.Tuner("GSPO", ...)`); a checkpoint records the class that wrote it and is restored only
as that algorithm (`DAPO.from_checkpoint`).

Settings every algorithm here shares unless its docstring says otherwise: PPO's clip at 0.2 on
both sides, group-normalised advantages, no dynamic sampling, no overlong shaping or
filtering, no dual clip, no KL term.
"""

from __future__ import annotations

from dapo_rllib.algorithm.dapo import DAPO, DAPOConfig


class _PaperDefaultsConfig(DAPOConfig):
    """DAPOConfig without DAPO's extras (PPO's clip, symmetric at 0.2, on group-normalised
    advantages): the base of the neighbours' configs."""

    def __init__(self, algo_class):
        super().__init__(algo_class=algo_class)
        self.policy_loss = "ppo_clip"
        self.adv_estimator = "grpo"
        self.clip_eps_low = 0.2
        self.clip_eps_high = 0.2
        self.dynamic_sampling = False
        self.overlong_buffer_len = 0
        self.overlong_filtering = False
        self.clip_ratio_c = None
        self.kl_coef = 0.0


class GRPOConfig(_PaperDefaultsConfig):
    """GRPO (Shao et al., 2024, "DeepSeekMath", arXiv 2402.03300), the naive baseline of the DAPO
    paper: group-normalised advantages, PPO's symmetric clip (0.2), each response's token mean
    averaged over responses ("seq-mean-token-mean"), and a KL penalty to the initial policy
    (DeepSeekMath's beta = 0.04 with the k3 estimator; `kl_coef=0` for the KL-free variant DAPO
    starts from)."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or GRPO)
        self.loss_agg_mode = "seq-mean-token-mean"
        self.kl_coef = 0.04
        self.kl_penalty = "low_var_kl"


class DrGRPOConfig(_PaperDefaultsConfig):
    """Dr. GRPO (Liu et al., 2025, "Understanding R1-Zero-Like Training", arXiv 2503.20783):
    GRPO without its two length and difficulty biases: advantages centred on the group mean
    without the std division ("dr_grpo"), and token sums divided by one constant, the maximum
    response length ("seq-mean-token-sum-norm"); clip 0.2, no KL."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or DrGRPO)
        self.adv_estimator = "dr_grpo"
        self.loss_agg_mode = "seq-mean-token-sum-norm"


class GSPOConfig(_PaperDefaultsConfig):
    """GSPO (Zheng et al., 2025, "Group Sequence Policy Optimization", arXiv 2507.18071): PPO's
    clip on the sequence ratio, the geometric mean of the token ratios ("gspo"), with the paper's
    clip range 3e-4 / 4e-4 (§5.1), group-normalised advantages, one loss per sequence
    ("seq-mean-token-mean", the only aggregation the sequence ratio defines), no KL."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or GSPO)
        self.policy_loss = "gspo"
        self.clip_eps_low = 3e-4
        self.clip_eps_high = 4e-4
        self.loss_agg_mode = "seq-mean-token-mean"


class CISPOConfig(_PaperDefaultsConfig):
    """CISPO (MiniMax, 2025, "MiniMax-M1", arXiv 2506.13585): a REINFORCE term per token weighted
    by its importance ratio clipped without gradient ("cispo"), so no token's gradient is dropped;
    token-mean aggregation, group-normalised advantages. The paper bounds the weight from above
    only (`clip_eps_low=1`: no lower bound) and does not state its upper bound; the default, a
    cap of 5 (`clip_eps_high=4`), is ScaleRL's (arXiv 2510.13786), which TRL recommends."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or CISPO)
        self.policy_loss = "cispo"
        self.clip_eps_low = 1.0
        self.clip_eps_high = 4.0
        self.loss_agg_mode = "token-mean"


class RLOOConfig(_PaperDefaultsConfig):
    """RLOO (Ahmadian et al., 2024, "Back to Basics: Revisiting REINFORCE Style Optimization",
    arXiv 2402.14740): the leave-one-out baseline ("rloo"), and each whole response one action,
    its token log-probs summed ("seq-mean-token-sum"). The paper's update is on-policy
    REINFORCE: with one optimizer step per batch (`minibatch_size_prompts =
    train_batch_size_prompts`) the ratio is 1 and PPO's clip never binds; with several, the clip
    (0.2) bounds the later ones."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or RLOO)
        self.adv_estimator = "rloo"
        self.loss_agg_mode = "seq-mean-token-sum"


class REINFORCEPlusPlusConfig(_PaperDefaultsConfig):
    """REINFORCE++ (Hu, 2025, arXiv 2501.03262): returns normalised over every token of the batch
    instead of per group ("reinforce_plus_plus"; "reinforce_plus_plus_baseline" subtracts the
    group mean first), PPO's clip 0.2, token-mean aggregation. The paper puts a per-token KL
    penalty into the reward; that form is not built (`kl_coef` adds a KL loss term instead)."""

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or REINFORCEPlusPlus)
        self.adv_estimator = "reinforce_plus_plus"
        self.loss_agg_mode = "token-mean"


class GRPO(DAPO):
    """GRPO on DAPO's loop; settings: `GRPOConfig`."""

    NAME = "GRPO"
    config_class = GRPOConfig


class DrGRPO(DAPO):
    """Dr. GRPO on DAPO's loop; settings: `DrGRPOConfig`."""

    NAME = "DrGRPO"
    config_class = DrGRPOConfig


class GSPO(DAPO):
    """GSPO on DAPO's loop; settings: `GSPOConfig`."""

    NAME = "GSPO"
    config_class = GSPOConfig


class CISPO(DAPO):
    """CISPO on DAPO's loop; settings: `CISPOConfig`."""

    NAME = "CISPO"
    config_class = CISPOConfig


class RLOO(DAPO):
    """RLOO on DAPO's loop; settings: `RLOOConfig`."""

    NAME = "RLOO"
    config_class = RLOOConfig


class REINFORCEPlusPlus(DAPO):
    """REINFORCE++ on DAPO's loop (registered as "REINFORCE++"); settings: `REINFORCEPlusPlusConfig`."""

    NAME = "REINFORCE++"
    config_class = REINFORCEPlusPlusConfig


#: Every registered algorithm by its name (the name Tune and `rllib train` know it by), DAPO first.
ALGORITHMS: dict[str, type[DAPO]] = {
    cls.NAME: cls for cls in (DAPO, GRPO, DrGRPO, GSPO, CISPO, RLOO, REINFORCEPlusPlus)
}


def algorithm_class(name: str) -> type[DAPO]:
    """The registered algorithm called `name`.

    Raises:
        ValueError: `name` is not registered; the message lists the names that are.
    """
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; the registered algorithms are {list(ALGORITHMS)}")
    return ALGORITHMS[name]
