"""The DAPO math as pure functions: tensors in, tensors out.

Nothing here knows about Ray, vLLM or trainer state, so every function can be
checked against the paper (Yu et al., 2025, "DAPO: An Open-Source LLM
Reinforcement Learning System at Scale", arXiv 2503.14476) and tested on small
hand-made tensors. The paper's techniques are named by its section titles;
``§`` numbers point to the project's design notes, ``docs/design/algorithm.md``.

Notation: ``G`` responses ``o_1..o_G`` per prompt, reward ``R_i`` per response,
``r_{i,t} = pi_theta(o_{i,t} | ...) / pi_old(o_{i,t} | ...)`` per token.

=================================  ==============================================
function                           paper
=================================  ==============================================
``compute_group_advantages``       GRPO advantage (§1), used unchanged by DAPO:
                                   ``A_i = (R_i - mean_g R) / (std_g R + eps)``,
                                   the same for every token of ``o_i``.
                                   Advantage estimator ``"grpo"``;
                                   ``"dr_grpo"`` drops the std.
``compute_policy_loss``            per-token term of the DAPO objective with
                                   Clip-Higher (§2.1):
                                   ``-min(r A, clip(r, 1-eps_low, 1+eps_high) A)``
                                   plus verl's dual clip for ``A < 0``.
                                   Policy loss ``"ppo_clip"``.
``agg_loss``                       Token-Level Policy Gradient Loss (§2.3):
                                   ``sum_{i,t} l_{i,t} / sum_i |o_i|``
                                   ("token-mean"), and the GRPO / Dr. GRPO
                                   alternatives for ablations.
``filter_groups``                  Dynamic Sampling (§2.2): keep a prompt only if
                                   ``0 < |{o_i correct}| < G``, i.e. its group's
                                   metric has a non-zero spread.
``rollout_correction_weights``,    not in the paper: truncated importance weights
``rollout_mismatch``               ``min(pi_old / pi_rollout, C)`` for sampling
                                   from vLLM rather than the learner, and the
                                   mismatch they correct (docs/design/scaling.md §5).
``kl_penalty``                     the KL term DAPO removes (beta = 0, §1); kept
                                   for GRPO baselines.
``masked_mean``                    helper for the learner's metrics.
=================================  ==============================================

Policy losses and advantage estimators are looked up by name, so that naive
GRPO, DAPO, Dr. GRPO or a user's variant is a matter of config values (as in
verl): ``register_policy_loss(name)`` / ``register_adv_estimator(name)``
decorate a new one, ``policy_loss_fn(name)`` / ``adv_estimator_fn(name)`` find
one, ``policy_losses()`` / ``adv_estimators()`` list the names registered so
far.

Masks are 0/1 (bool or any numeric dtype) with the shape of the values they
mask. Masked positions are dropped with ``masked_fill`` rather than multiplied
by zero, so a non-finite value at a padding position (``0 * inf = nan``) can
never leak into a loss or a metric.

The Soft Overlong Punishment (§2.4) is part of the reward: `dapo_rllib.tasks.rewards.overlong`.
Entropy is the RL module's output: `dapo_rllib.models.rl_module.entropy_from_logits`.
"""

from dapo_rllib.algorithm.core_algos.advantages import (
    compute_advantages,
    compute_group_advantages,
    dr_grpo_advantages,
    ema_baselines,
    filter_groups,
    masked_whiten,
    opo_advantages,
    rae_advantages,
    reinforce_plus_plus_advantages,
    reinforce_plus_plus_baseline_advantages,
    rloo_advantages,
    wants_baselines,
)
from dapo_rllib.algorithm.core_algos.aggregation import (
    LOSS_AGG_MODES,
    agg_loss,
)
from dapo_rllib.algorithm.core_algos.common import (
    masked_mean,
)
from dapo_rllib.algorithm.core_algos.covariance import (
    CovarianceSelection,
    clip_cov_policy_loss,
    covariance_token_selection,
    kl_cov_policy_loss,
    token_covariance,
)
from dapo_rllib.algorithm.core_algos.kl import (
    KL_PENALTY_KINDS,
    kl_penalty,
)
from dapo_rllib.algorithm.core_algos.policy_losses import (
    cispo_policy_loss,
    clipped_surrogate,
    compute_policy_loss,
    gspo_policy_loss,
    gspo_token_policy_loss,
    sequence_log_ratio,
)
from dapo_rllib.algorithm.core_algos.registry import (
    adv_estimator_fn,
    adv_estimators,
    policy_loss_fn,
    policy_loss_traits,
    policy_losses,
    register_adv_estimator,
    register_policy_loss,
)
from dapo_rllib.algorithm.core_algos.rollout_correction import (
    DEFAULT_MASK_BANDS,
    MASKED_CORRECTIONS,
    ROLLOUT_CORRECTIONS,
    TRUNCATED_CORRECTIONS,
    rollout_correction_weights,
    rollout_mismatch,
)

__all__ = [
    "CovarianceSelection",
    "DEFAULT_MASK_BANDS",
    "KL_PENALTY_KINDS",
    "LOSS_AGG_MODES",
    "MASKED_CORRECTIONS",
    "ROLLOUT_CORRECTIONS",
    "TRUNCATED_CORRECTIONS",
    "adv_estimator_fn",
    "adv_estimators",
    "agg_loss",
    "cispo_policy_loss",
    "clip_cov_policy_loss",
    "clipped_surrogate",
    "compute_advantages",
    "compute_group_advantages",
    "compute_policy_loss",
    "covariance_token_selection",
    "dr_grpo_advantages",
    "ema_baselines",
    "filter_groups",
    "gspo_policy_loss",
    "gspo_token_policy_loss",
    "kl_cov_policy_loss",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "opo_advantages",
    "policy_loss_fn",
    "policy_loss_traits",
    "policy_losses",
    "rae_advantages",
    "register_adv_estimator",
    "register_policy_loss",
    "reinforce_plus_plus_advantages",
    "reinforce_plus_plus_baseline_advantages",
    "rloo_advantages",
    "rollout_correction_weights",
    "rollout_mismatch",
    "sequence_log_ratio",
    "token_covariance",
    "wants_baselines",
]
