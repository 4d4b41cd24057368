"""Every private Ray / RLlib member DAPO relies on, in one place, each with the reason.

Ray does not promise to keep these between versions. Each was checked against `RAY_VERSION`;
`tests/test_ray_private.py` looks every one of them up in the installed Ray and names the one an
upgrade removed. Code elsewhere in `dapo_rllib` reaches them only through this module: the
functions below for members DAPO calls or reads, `PRIVATE_MEMBERS` for the hooks it overrides.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

RAY_VERSION = "2.60.0"  # the version every member below was checked against


@dataclass(frozen=True)
class PrivateMember:
    owner: str  # "module:Class" (or "module" for a module-level name)
    name: str
    why: str


PRIVATE_MEMBERS = (
    PrivateMember(
        "ray.rllib.algorithms.algorithm_config:AlgorithmConfig",
        "_validate_config",
        "validate() honours experimental(_validate_config=False) as RLlib's own checks do (a warning instead of "
        "the error); read here, not through _value_error, whose message adds a line on turning all checks off.",
    ),
    PrivateMember(
        "ray.rllib.core.learner.learner_group:LearnerGroup",
        "_get_results",
        "unwraps the answers of foreach_learner and raises the first learner error; RLlib has no public form.",
    ),
    PrivateMember(
        "ray.rllib.utils.checkpoints:Checkpointable",
        "_check_component",
        "get_state(components=..., not_components=...) filtering, as RLlib's own get_state implementations use it.",
    ),
    PrivateMember(
        "ray.rllib.utils.checkpoints:Checkpointable",
        "_get_subcomponents",
        "the sub-component names to pass on when a learner group reads its learners' state.",
    ),
    PrivateMember(
        "ray.rllib.algorithms.algorithm:Algorithm",
        "_counters",
        "the 'total_num_restored_workers' counter RLlib reports; DAPO restores env runners itself.",
    ),
    PrivateMember(
        "ray.rllib.core.learner.learner:Learner",
        "_weights_seq_no",
        "the learner's weights sequence number (raised by every update), sent with the weights so "
        "that an env runner can tell newer weights from those it holds.",
    ),
    PrivateMember(
        "ray.tune.registry",
        "_global_registry",
        "Tune's registry of register_env names; RLlib's own env runners look environments up in it too.",
    ),
    PrivateMember(
        "ray.rllib.core.learner.torch.torch_learner:TorchLearner",
        "_uncompiled_update",
        "overridden: TorchLearner runs a mini-batch as one forward and backward pass; its "
        "update-sequencing hook is the one place to add gradient accumulation over micro-batches.",
    ),
    PrivateMember(
        "ray.rllib.core.learner.torch.torch_learner:TorchLearner",
        "_make_modules_ddp_if_necessary",
        "overridden by the DeepSpeed learner to leave out RLlib's DDP wrapper: DeepSpeed does the data parallelism.",
    ),
    PrivateMember(
        "ray.rllib.env.env_runner_group:EnvRunnerGroup",
        "_make_worker",
        "overridden: the one place a remote env runner's constructor arguments are put together; "
        "DAPO's group passes the config there by value instead of RLlib's ObjectRef (see "
        "dapo_rllib.rollout.env_runner_group.ByValueEnvRunnerGroup).",
    ),
    PrivateMember(
        "ray.rllib.algorithms.algorithm",
        "EnvRunnerGroup",
        "the name Algorithm.setup builds its env runner groups by; no setting or hook chooses "
        "another class, so DAPO.setup names its own group class there while RLlib's setup runs.",
    ),
    PrivateMember(
        "ray.rllib.algorithms.algorithm:Algorithm",
        "_should_create_evaluation_env_runners",
        "overridden: without evaluation env runners DAPO evaluates on the training runners' "
        "engines instead of starting another vLLM engine in the driver.",
    ),
)


def value_error(config, message: str) -> None:
    """Raise `message` as a config error the way RLlib's `validate()` does, without the line RLlib appends ("To
    suppress all validation errors, set `config.experimental(_validate_config=False)` at your own risk"): DAPO's
    messages name the setting and the fix, and turning every check off is not one."""
    if config._validate_config:
        raise ValueError(message)
    logger.warning(message)


def learner_results(learner_group, results) -> list[Any]:
    """The plain answers of `learner_group.foreach_learner(...)`, in learner order."""
    return learner_group._get_results(results)


def wants_component(checkpointable, component: str, components, not_components) -> bool:
    """Whether a `get_state(components, not_components=...)` call asks for `component`."""
    return checkpointable._check_component(component, components, not_components)


def subcomponents(checkpointable, component: str, components) -> list[str] | None:
    """The parts of `components` below `component` (for the state of a sub-component)."""
    return checkpointable._get_subcomponents(component, components)


def count_restored_env_runners(algorithm, count: int) -> None:
    """Add `count` to the restored-runner counter RLlib reports in its results."""
    algorithm._counters["total_num_restored_workers"] += count


def learner_weights_seq_no(learner) -> int:
    """The sequence number of the weights `learner` holds now."""
    return learner._weights_seq_no


def registered_env_creator(name: str):
    """The creator registered under `name` with `ray.tune.register_env`, or None."""
    from ray.tune.registry import ENV_CREATOR, _global_registry

    if not _global_registry.contains(ENV_CREATOR, name):
        return None
    return _global_registry.get(ENV_CREATOR, name)


@contextmanager
def env_runner_groups_built_as(group_class):
    """While inside: `Algorithm.setup` builds its env runner groups (training and evaluation) as
    `group_class`, a subclass of RLlib's `EnvRunnerGroup`. Not thread-safe: one algorithm's setup
    at a time per process (Ray Tune runs each trial in its own process)."""
    from ray.rllib.algorithms import algorithm

    rllib_class = algorithm.EnvRunnerGroup
    algorithm.EnvRunnerGroup = group_class
    try:
        yield
    finally:
        algorithm.EnvRunnerGroup = rllib_class
