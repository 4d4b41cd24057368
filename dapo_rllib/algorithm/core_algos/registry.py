"""Registries: the policy loss and the advantage estimator are config values, looked up by name."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from dapo_rllib.algorithm.core_algos.common import _choice


class _Registry:
    """Functions by the name a config gives them; ``register(name)`` is a decorator."""

    def __init__(self, setting: str, plural: str):
        self.setting, self.plural = setting, plural
        self.table: dict[str, Callable] = {}
        self._traits: dict[str, dict] = {}

    def register(self, name: str, **traits) -> Callable[[Callable], Callable]:
        """Register the decorated function as ``name``; ``traits`` are what a config checks
        its other settings against (e.g. a policy loss's ``loss_agg_modes``)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.setting} name must be a non-empty string, got {name!r}")

        def decorator(fn: Callable) -> Callable:
            if name in self.table:
                raise ValueError(f"{self.setting} {name!r} is already registered; choose another name")
            self.table[name] = fn
            self._traits[name] = traits
            return fn

        return decorator

    def traits(self, name: str) -> dict:
        """The traits ``name`` was registered with ({} for an import path)."""
        return self._traits.get(name, {})

    def lookup(self, name: str) -> Callable:
        """The function registered as ``name``, or at import path ``"package.module:function"``."""
        # An import path reaches learners and Tune trials, which run in other processes than
        # the driver and so miss what its script registered.
        if isinstance(name, str) and ":" in name and name not in self.table:
            module, function = name.split(":", 1)
            return getattr(importlib.import_module(module), function)
        return _choice(self.table, name, self.setting, self.plural)

    def names(self) -> tuple[str, ...]:
        """Names registered so far, built-ins first."""
        return tuple(self.table)


# A policy loss is called as
#     fn(log_probs, old_log_probs, advantages, response_mask, *, clip_eps_low, clip_eps_high,
#        clip_ratio_c, loss_agg_mode, num_tokens=None, num_seqs=None, loss_scale_factor=None)
#     -> (0-dim loss, {metric name: detached 0-dim tensor})
# with the tensors and settings of `compute_policy_loss`; a variant takes **kwargs for the
# settings it does not use. Its traits: `loss_agg_modes` (the modes it defines; default all),
# `dual_clip` (whether it takes clip_ratio_c; default True) and `clip_eps_low_may_be_1` (its
# clip bounds a weight, whose range may start at 0; default False) and `covariance_selection`
# ("band": it takes `selected`, Clip-Cov's draw from a covariance band; "top": KL-Cov's largest
# covariances, and `kl_cov_coef`; see `covariance_token_selection`; default None).
#
# An advantage estimator is `fn(scores [n], group_ids [n]) -> [n]` (one advantage per
# response), or takes `response_mask` [n, T] as a keyword (the tokens in the loss: response
# lengths, token-level normalisation) and may return [n, T]; `compute_advantages` calls either.
_POLICY_LOSSES = _Registry("policy_loss", "policy losses")
_ADV_ESTIMATORS = _Registry("adv_estimator", "advantage estimators")
register_policy_loss, policy_loss_fn, policy_losses, policy_loss_traits = (
    _POLICY_LOSSES.register,
    _POLICY_LOSSES.lookup,
    _POLICY_LOSSES.names,
    _POLICY_LOSSES.traits,
)
register_adv_estimator, adv_estimator_fn, adv_estimators = (
    _ADV_ESTIMATORS.register,
    _ADV_ESTIMATORS.lookup,
    _ADV_ESTIMATORS.names,
)
