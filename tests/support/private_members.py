"""The check both doors to a framework's internals share (tests/test_ray_private.py, tests/test_vllm_private.py)."""

import importlib
import inspect
import re


def is_present(member) -> bool:
    """Whether the installed library still has `member` (a `dapo_rllib.ray_private.PrivateMember`)."""
    module_name, _, class_name = member.owner.partition(":")
    owner = importlib.import_module(module_name)
    if class_name:
        owner = getattr(owner, class_name)
    # Members set on instances (`self._counters = ...`, `layer.cpu_linear = ...`, `self.x: T = ...`) are looked
    # up in the owner's source.
    assigned = re.compile(rf"\.{re.escape(member.name)}\s*[:=]")
    return hasattr(owner, member.name) or assigned.search(inspect.getsource(owner)) is not None
