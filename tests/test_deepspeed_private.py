"""The private DeepSpeed member DAPO relies on still exists in the installed DeepSpeed
(dapo_rllib.deepspeed_private), and with it DeepSpeed's CPU backend compiles nothing."""

import os

import pytest

from dapo_rllib.deepspeed_private import DEEPSPEED_VERSION, PRIVATE_MEMBERS, SHARED_MEMORY_COMM_OP
from tests.support.private_members import is_present

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # before DeepSpeed is imported, as the learner sets it
deepspeed = pytest.importorskip("deepspeed")


@pytest.mark.parametrize("member", PRIVATE_MEMBERS, ids=lambda m: f"{m.owner}.{m.name}")
def test_private_member_exists(member):
    assert is_present(member), (
        f"DeepSpeed {deepspeed.__version__} has no {member.owner}.{member.name} (checked against DeepSpeed "
        f"{DEEPSPEED_VERSION}); DAPO needs it because it {member.why} See dapo_rllib/deepspeed_private.py."
    )


def test_deepspeeds_cpu_backend_builds_no_op_once_skipped():
    from deepspeed.comm.torch import build_shm_op
    from deepspeed.ops.op_builder.cpu.comm import ShareMemCommBuilder

    from dapo_rllib.deepspeed_private import skip_shared_memory_comm_build

    assert ShareMemCommBuilder.NAME == SHARED_MEMORY_COMM_OP
    skip_shared_memory_comm_build()
    assert build_shm_op() is None  # built, it would be the compiled module
