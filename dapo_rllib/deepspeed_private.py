"""The one private DeepSpeed member DAPO relies on, with the reason (as `ray_private` and
`vllm_private` do for Ray and vLLM); `tests/test_deepspeed_private.py` looks it up in the installed
DeepSpeed. Nothing here imports DeepSpeed at module level: it must be imported after `DS_ACCELERATOR`
is set, which the DeepSpeed learner does."""

from __future__ import annotations

from dapo_rllib.ray_private import PrivateMember

DEEPSPEED_VERSION = "0.19.8"  # the version the member below was checked against

#: The op DeepSpeed's CPU communication backend compiles at start (`deepspeed.comm.torch.build_shm_op`).
SHARED_MEMORY_COMM_OP = "deepspeed_shm_comm"

PRIVATE_MEMBERS = (
    PrivateMember(
        "deepspeed.ops",
        "__compatible_ops__",
        "is the table of ops DeepSpeed may build: the learner marks the shared-memory all-reduce op "
        "incompatible so that DeepSpeed skips its build (see skip_shared_memory_comm_build).",
    ),
)


def skip_shared_memory_comm_build() -> None:
    """Keep DeepSpeed from compiling its shared-memory all-reduce kernel when it starts on CPU.

    The kernel serves `inference_all_reduce` only, which training never calls (ZeRO's collectives go
    through torch.distributed and gloo). Its just-in-time build takes about a minute on a fresh
    machine, and every process that starts DeepSpeed takes torch's build lock
    (`~/.cache/torch_extensions/<python>_cpu/deepspeed_shm_comm/lock`): a process killed while
    holding it leaves the lock behind, and every later DeepSpeed start on the machine waits on it
    forever. Marked incompatible, the op is skipped as on a platform without it.
    """
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__[SHARED_MEMORY_COMM_OP] = False
