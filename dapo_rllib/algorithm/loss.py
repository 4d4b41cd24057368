"""The loss's settings: the policy loss, the advantage estimator, their terms and the rollout correction,
and what a loss divides by (`LossDenominators`). The math itself is `dapo_rllib.algorithm.core_algos`."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

from dapo_rllib.algorithm import core_algos
from dapo_rllib.settings import FeatureSettings, require


@dataclasses.dataclass(frozen=True)
class LossSettings(FeatureSettings):
    """The policy loss, the advantage estimator and their terms (`DAPOConfig.training`).

    Attributes:
        policy_loss: By name in `core_algos`' registry: "ppo_clip" (PPO's clipped ratio with the
            decoupled bounds below; DAPO, GRPO), "gspo" (the sequence ratio; needs loss_agg_mode
            "seq-mean-token-mean"), "gspo_token" (GSPO with per-token advantages), "cispo" (a clipped
            weight on a REINFORCE term), "clip_cov" / "kl_cov" (the entropy-mechanism paper's: PPO's
            clip with a few high-covariance tokens left out, or the unclipped surrogate with a KL term
            on the highest-covariance ones), a name registered with `core_algos.register_policy_loss`,
            or "module:function".
        adv_estimator: By name in `core_algos`' registry: "grpo" (group-normalised: GRPO, DAPO),
            "dr_grpo" (group-centred only), "rloo" (leave-one-out baseline), "reinforce_plus_plus"
            (batch-normalised), "reinforce_plus_plus_baseline" (group-centred, then batch-normalised),
            "opo" (length-weighted group baseline), "rae" (SPIRAL's role-conditioned estimator: a moving
            baseline per role, kept by the driver across steps; no group statistics), a name registered with
            `core_algos.register_adv_estimator`, or "module:function".
        rae_decay: "rae": the weight a role's baseline keeps at each episode, b <- decay b + (1 - decay) R.
            SPIRAL's 0.95.
        clip_eps_low, clip_eps_high: Decoupled clip range [1 - low, 1 + high] (Clip-Higher).
            Reference 0.2 and 0.28. With "cispo" the range of the weight, and low may be 1.
        clip_ratio_c: Dual-clip bound for negative advantages (> 1), None = off. Reference 10. Only
            "ppo_clip" has a dual clip: with another policy loss it must be None.
        loss_agg_mode: "token-mean" (DAPO), "seq-mean-token-mean" (GRPO), "seq-mean-token-sum",
            "seq-mean-token-sum-norm" (Dr. GRPO).
        clip_cov_ratio, clip_cov_lb, clip_cov_ub: "clip_cov": the fraction of loss tokens left out,
            drawn among those whose covariance lies in (lb, ub). The authors' 2e-4, 1 and 5.
        kl_cov_ratio, kl_cov_coef: "kl_cov": the fraction of loss tokens (largest covariance) that get
            the KL term, and its weight. The authors' 2e-3 for 7B models, 2e-4 for 32B, and 1. Both
            selections are made over the whole mini-batch before it is cut into micro-batches, from
            the old policy's log-probs where they are recomputed and the sampler's otherwise;
            Clip-Cov's draw is seeded by the config's seed.
        kl_coef: Weight of a KL penalty to the initial policy. DAPO: 0 (no reference model is kept).
        kl_penalty: KL estimator, "low_var_kl" (k3), "kl", "abs" or "mse".
        overlong_filtering: Mask the loss of truncated responses (docs/design/algorithm.md §2.4).
    """

    policy_loss: str = "ppo_clip"
    adv_estimator: str = "grpo"
    rae_decay: float = 0.95
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.28
    clip_ratio_c: float | None = 10.0
    loss_agg_mode: str = "token-mean"
    clip_cov_ratio: float = 2e-4
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 2e-4
    kl_cov_coef: float = 1.0
    kl_coef: float = 0.0
    kl_penalty: str = "low_var_kl"
    overlong_filtering: bool = False

    @property
    def traits(self) -> dict:
        """The policy loss's registered traits ({} for an import path)."""
        return core_algos.policy_loss_traits(self.policy_loss) if isinstance(self.policy_loss, str) else {}

    @property
    def covariance_selection(self) -> core_algos.CovarianceSelection | None:
        """Which tokens Clip-Cov / KL-Cov select (their band and ratio), None for other losses."""
        kind = self.traits.get("covariance_selection")
        if kind == "band":
            return core_algos.CovarianceSelection(ratio=self.clip_cov_ratio, band=(self.clip_cov_lb, self.clip_cov_ub))
        return core_algos.CovarianceSelection(ratio=self.kl_cov_ratio) if kind == "top" else None

    def validate(self) -> None:
        for setting, lookup in (
            ("policy_loss", core_algos.policy_loss_fn),
            ("adv_estimator", core_algos.adv_estimator_fn),
        ):
            try:
                lookup(getattr(self, setting))
            except (ValueError, ImportError, AttributeError) as error:
                raise ValueError(f"{setting}={getattr(self, setting)!r}: {error}") from None
        require(
            self.loss_agg_mode in core_algos.LOSS_AGG_MODES,
            f"loss_agg_mode={self.loss_agg_mode!r}; expected one of {core_algos.LOSS_AGG_MODES}",
        )
        self._validate_clip()
        for name in ("clip_cov_ratio", "kl_cov_ratio"):
            value = getattr(self, name)
            require(0 < value <= 1, f"{name}={value} must be in (0, 1]: a fraction of the loss tokens")
        require(
            self.clip_cov_lb < self.clip_cov_ub,
            f"clip_cov_lb={self.clip_cov_lb} must be < clip_cov_ub={self.clip_cov_ub}: the covariance band is (lb, ub)",
        )
        require(self.kl_cov_coef >= 0, f"kl_cov_coef={self.kl_cov_coef} must be >= 0")
        require(self.kl_coef >= 0, f"kl_coef={self.kl_coef} must be >= 0")
        require(
            0 <= self.rae_decay < 1,
            f"rae_decay={self.rae_decay} must be in [0, 1): the weight a role's baseline keeps at each episode",
        )
        require(
            self.kl_penalty in core_algos.KL_PENALTY_KINDS,
            f"kl_penalty={self.kl_penalty!r}; expected one of {core_algos.KL_PENALTY_KINDS}",
        )

    def _validate_clip(self) -> None:
        """The clip settings, checked against the policy loss's registered traits."""
        traits = self.traits
        agg_modes = traits.get("loss_agg_modes", core_algos.LOSS_AGG_MODES)
        require(
            self.loss_agg_mode in agg_modes,
            f"loss_agg_mode={self.loss_agg_mode!r} is not defined for policy_loss={self.policy_loss!r}; "
            f"expected one of {agg_modes}",
        )
        if traits.get("clip_eps_low_may_be_1", False):  # the clip bounds a weight, which may reach 0
            require(
                0 <= self.clip_eps_low <= 1, f"clip_eps_low={self.clip_eps_low} must be in [0, 1] (1: no lower bound)"
            )
        else:
            require(0 <= self.clip_eps_low < 1, f"clip_eps_low={self.clip_eps_low} must be in [0, 1)")
        require(self.clip_eps_high >= 0, f"clip_eps_high={self.clip_eps_high} must be >= 0")
        require(
            self.clip_ratio_c is None or self.clip_ratio_c > 1,
            f"clip_ratio_c={self.clip_ratio_c} must be > 1 (or None to turn dual clip off)",
        )
        require(
            self.clip_ratio_c is None or traits.get("dual_clip", True),
            f"clip_ratio_c={self.clip_ratio_c}: policy_loss={self.policy_loss!r} has no dual clip; set clip_ratio_c=None",
        )


@dataclasses.dataclass(frozen=True)
class RolloutCorrectionSettings(FeatureSettings):
    """Correcting the rollout / learner mismatch (docs/design/scaling.md §5; `core_algos.rollout_correction_weights`).

    Attributes:
        correction: ``rollout_correction``. Weight each token's policy-gradient term by the importance
            ratio rho = pi_old / pi_rollout of the learner's old log-prob to vLLM's: "tis" min(rho,
            rollout_is_cap) per token, "seq_tis" the same of the sequence's product of ratios; or drop
            what leaves `rollout_mask_band`: "token_mask" tokens, "seq_mask" sequences by their product
            of ratios, "geo_mask" sequences by its geometric mean. Corrects the rollout/learner mismatch
            and, with async_rollout, the one step of staleness. None (default): off. Either way
            `rollout_logp_abs_diff` (mean and max) is reported.
        is_cap: ``rollout_is_cap``, C of the truncating corrections (>= 1). Default 2.0.
        mask_band: ``rollout_mask_band``, (low, high) with 0 < low < high, of the masking corrections.
            None: (0.5, 2.0) for "token_mask" and "seq_mask", (0.999, 1.001) for "geo_mask".
    """

    prefix: ClassVar[str] = "rollout_"
    correction: str | None = None
    is_cap: float = 2.0
    mask_band: tuple[float, float] | None = None

    def validate(self) -> None:
        require(
            self.correction in core_algos.ROLLOUT_CORRECTIONS,
            f"rollout_correction={self.correction!r}; expected one of {core_algos.ROLLOUT_CORRECTIONS}",
        )
        require(
            isinstance(self.is_cap, (int, float)) and self.is_cap >= 1,
            f"rollout_is_cap={self.is_cap!r} must be >= 1 (an importance weight cap)",
        )
        require(
            self.mask_band is None or (len(self.mask_band) == 2 and 0 < self.mask_band[0] < self.mask_band[1]),
            f"rollout_mask_band={self.mask_band!r} must be (low, high) with 0 < low < high, or None",
        )


@dataclasses.dataclass(frozen=True)
class LossDenominators:
    """What a loss divides by: the loss tokens and the sequences of the whole mini-batch over all
    learners (docs/design/algorithm.md §2.3: a token mean, not a mean of means), so that the losses of
    its micro-batches sum up to its loss."""

    num_tokens: torch.Tensor
    num_seqs: torch.Tensor
