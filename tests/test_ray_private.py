"""Every private Ray/RLlib member DAPO relies on still exists in the installed Ray (dapo_rllib.ray_private)."""

import importlib
import inspect

import pytest
import ray

from dapo_rllib.ray_private import PRIVATE_MEMBERS, RAY_VERSION


@pytest.mark.parametrize("member", PRIVATE_MEMBERS, ids=lambda m: f"{m.owner}.{m.name}")
def test_private_member_exists(member):
    module_name, _, class_name = member.owner.partition(":")
    owner = importlib.import_module(module_name)
    if class_name:
        owner = getattr(owner, class_name)
    # Members the owner's instances set (`self._counters = ...`) are looked up in its source.
    present = hasattr(owner, member.name) or f"self.{member.name} =" in inspect.getsource(owner)
    assert present, (
        f"Ray {ray.__version__} has no {member.owner}.{member.name} (checked against Ray {RAY_VERSION}); "
        f"DAPO needs it because it {member.why} See dapo_rllib/ray_private.py."
    )


def test_no_private_ray_member_is_used_outside_ray_private():
    """The members listed are reached only through dapo_rllib.ray_private (overridden hooks excepted)."""
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "dapo_rllib"
    called = [
        m.name
        for m in PRIVATE_MEMBERS
        if m.name
        not in ("_uncompiled_update", "_should_create_evaluation_env_runners", "_make_modules_ddp_if_necessary")
    ]
    offenders = [
        f"{path.name}: {name}"
        for path in package.rglob("*.py")
        if path.name != "ray_private.py"
        for name in called
        if f".{name}" in path.read_text() or f"import {name}" in path.read_text()
    ]
    assert offenders == []
