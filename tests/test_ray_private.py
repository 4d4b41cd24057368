"""Every private Ray/RLlib member DAPO relies on still exists in the installed Ray (dapo_rllib.ray_private)."""

import pytest
import ray

from dapo_rllib.ray_private import PRIVATE_MEMBERS, RAY_VERSION
from tests.support.private_members import is_present


@pytest.mark.parametrize("member", PRIVATE_MEMBERS, ids=lambda m: f"{m.owner}.{m.name}")
def test_private_member_exists(member):
    assert is_present(member), (
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
        not in (
            "_uncompiled_update",
            "_should_create_evaluation_env_runners",
            "_make_modules_ddp_if_necessary",
            "_make_worker",
            "EnvRunnerGroup",  # RLlib's public class: its name in the algorithm module is what is private
        )
    ]
    offenders = [
        f"{path.name}: {name}"
        for path in package.rglob("*.py")
        if path.name != "ray_private.py"
        for name in called
        if f".{name}" in path.read_text() or f"import {name}" in path.read_text()
    ]
    assert offenders == []
