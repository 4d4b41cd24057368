"""Working with saved algorithm checkpoints: their config, their policy, evaluation, export."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any, Callable

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.utils.checkpoints import Checkpointable

#: The file that makes a directory an RLlib checkpoint: the class that wrote it and its constructor arguments.
CTOR_FILE = Checkpointable.CLASS_AND_CTOR_ARGS_FILE_NAME


def is_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is an RLlib checkpoint directory (it has :data:`CTOR_FILE`)."""
    return (Path(path) / CTOR_FILE).is_file()


def _checked(path: str | Path) -> Path:
    path = Path(path)
    if not is_checkpoint(path):
        raise FileNotFoundError(
            f"{str(path)!r} is not an RLlib algorithm checkpoint (no {CTOR_FILE}); "
            "expected a directory written by Algorithm.save_to_path, e.g. runs/<run>/checkpoint_000040"
        )
    return path


def _ctor_info(path: str | Path) -> dict[str, Any]:
    """The checkpoint's class_and_ctor_args.pkl: {"class": the algorithm class, "ctor_args_and_kwargs": ...}."""
    file = _checked(path) / CTOR_FILE
    try:
        with open(file, "rb") as f:
            ctor = pickle.load(f)
    except (ImportError, AttributeError) as error:
        # The class is pickled by reference: its module must be importable here.
        raise ValueError(
            f"cannot read the algorithm class of checkpoint {str(path)!r} ({error}); expected a class importable in this environment"
        ) from None
    if not isinstance(ctor, dict) or not isinstance(ctor.get("class"), type) or "ctor_args_and_kwargs" not in ctor:
        raise ValueError(
            f"{str(file)!r} is not an RLlib class_and_ctor_args.pkl; expected a dict with 'class' and 'ctor_args_and_kwargs'"
        )
    return ctor


def checkpoint_algorithm(path: str | Path) -> type:
    """The algorithm class that wrote a checkpoint (what ``Algorithm.from_checkpoint`` builds)."""
    return _ctor_info(path)["class"]


def check_checkpoint_algorithm(path: str | Path, expected: type, action: str) -> None:
    """Refuse a checkpoint written by another algorithm than ``expected`` (or a subclass).

    Raises:
        FileNotFoundError: ``path`` is not an algorithm checkpoint.
        ValueError: The checkpoint is another algorithm's; the message names both.
    """
    found = checkpoint_algorithm(path)
    if not issubclass(found, expected):
        raise ValueError(
            f"{str(path)!r} is a checkpoint of {found.__name__}, but {action} needs a {expected.__name__} checkpoint"
        )


def refuse_another_algorithms_checkpoint(path, cls: type) -> None:
    """Refuse to restore as `cls`, one of the DAPO family (`dapo_rllib.algorithm.family`: the classes
    with a `NAME`), a checkpoint another of them wrote (a GSPO checkpoint as DAPO, ...): its
    settings would silently become the other's. Anything else (a path that is not an algorithm
    checkpoint, another library's algorithm, `Algorithm` itself) it leaves to
    `check_checkpoint_algorithm` and RLlib."""
    name = getattr(cls, "NAME", None)
    if name is None or not isinstance(path, (str, os.PathLike)) or not is_checkpoint(path):
        return
    found = checkpoint_algorithm(path)
    if getattr(found, "NAME", name) != name:
        raise ValueError(
            f"{str(path)!r} is a checkpoint of {getattr(found, 'NAME', found.__name__)} ({found.__module__}."
            f"{found.__name__}); it cannot be restored as {name}: restore it with {found.__name__}.from_checkpoint "
            "(or Algorithm.from_checkpoint, which builds the algorithm that wrote it)"
        )


def checkpoint_config(path: str | Path) -> AlgorithmConfig:
    """The AlgorithmConfig a checkpoint was saved with."""
    (config_state,), _ = _ctor_info(path)["ctor_args_and_kwargs"]
    return AlgorithmConfig.from_state(config_state)


def build_with_policy(path: str | Path, adjust: Callable[[AlgorithmConfig], Any] | None = None):
    """Build the checkpoint's algorithm (config changed by `adjust`) with its trained policy.

    Only the learner (weights, optimizer) is restored, so the config may differ from the
    saved one in anything but the model: another evaluation dataset, fewer env runners, ...
    """
    path = _checked(path)
    config = checkpoint_config(path)
    if adjust is not None:
        adjust(config)
    algo = config.build_algo()
    algo.restore_from_path(path / COMPONENT_LEARNER_GROUP, component=COMPONENT_LEARNER_GROUP)
    return algo


def policy_module_path(path: str | Path, module_id: str = DEFAULT_MODULE_ID) -> Path:
    """Where a checkpoint keeps the state of one RLModule, as an absolute path: `RLModule.from_checkpoint` reads a
    relative one as a URI without a scheme."""
    return _checked(path).resolve() / COMPONENT_LEARNER_GROUP / COMPONENT_LEARNER / COMPONENT_RL_MODULE / module_id
