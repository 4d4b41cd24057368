"""Code tasks as a single-step language environment (task API: :mod:`dapo_rllib.tasks.problem_env`).

A completion's code runs against the task's tests in the sandbox (:mod:`dapo_rllib.tasks.sandbox`)
and scores +1 when all tests pass, -1 otherwise (or the fraction passed). ``score_many`` runs
all its completions at once on the sandbox's parallel pool.

All environments of a process with the same sandbox settings share one :class:`Sandbox`.
"""

from __future__ import annotations

import atexit
import functools
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from dapo_rllib.tasks.data.code_arithmetic import generate_code_tasks
from dapo_rllib.tasks.data.code_tasks import CodeTask, load_code_tasks
from dapo_rllib.tasks.problem_env import PROBLEM_CONFIG, ProblemEnv
from dapo_rllib.tasks.rewards.code import REWARD_MODES, CodeScoreResult, score_code_many
from dapo_rllib.tasks.sandbox import Sandbox, SandboxLimits

#: Value of the "dataset" config key that selects the built-in generator.
GENERATED_DATASET = "generated"

#: Config keys of an environment that runs programs in the sandbox, and their defaults.
SANDBOX_CONFIG: dict[str, Any] = {
    "timeout_s": SandboxLimits.timeout_s,
    "memory_mb": SandboxLimits.memory_mb,
    "max_workers": None,
}

#: Config keys and their defaults.
DEFAULT_CONFIG: dict[str, Any] = {"dataset": GENERATED_DATASET, **PROBLEM_CONFIG, "reward": "binary", **SANDBOX_CONFIG}


class CodeEnv(ProblemEnv[CodeTask]):
    """Single-step environment over code tasks.

    Config keys (all optional; see ``DEFAULT_CONFIG``):
        dataset: ``"generated"`` for the built-in function-writing tasks, or the path of a
            ``.jsonl``/``.parquet`` file of code tasks (row format:
            :mod:`dapo_rllib.tasks.data.code_tasks`).
        split: ``"train"`` or ``"test"`` split of the generated tasks (ignored for files: pass
            another file for evaluation).
        num_problems: Number of generated tasks (``None``: the whole split), the same ones for
            every seed. Not supported for files.
        shuffle: Draw tasks in a fresh random order each epoch (else in dataset order).
        seed: Seed of the draw order.
        reward: ``"binary"`` (+1 when every test passes, else -1) or ``"fraction"`` (the
            fraction of tests passed, in [0, 1]).
        timeout_s: Seconds of wall-clock time, and of CPU time, that one sandbox run (the
            candidate and its tests; for stdin/stdout tasks, one case) may take.
        memory_mb: Memory limit of a sandbox run, in MiB.
        max_workers: Sandbox runs at the same time (``None``: the sandbox's default).

    Keys starting with ``"_"`` are reserved for callers and ignored; any other unknown key is
    an error (see :class:`ProblemEnv`).
    """

    DEFAULT_CONFIG = DEFAULT_CONFIG
    BUILTIN_DATASET = GENERATED_DATASET
    PROBLEMS_NOUN = "tasks"
    generate = staticmethod(generate_code_tasks)
    load_file = staticmethod(load_code_tasks)

    def __init__(self, config: Mapping[str, Any] | None = None):
        settings = self.settings(config)
        if settings["reward"] not in REWARD_MODES:
            raise ValueError(f"CodeEnv 'reward' must be one of {REWARD_MODES}, got {settings['reward']!r}")
        self._reward = settings["reward"]
        # Built before the tasks are loaded, so that bad limits fail fast.
        self._sandbox = sandbox_from_settings(settings, "CodeEnv")
        super().__init__(settings)

    @property
    def sandbox_isolation(self) -> dict[str, str]:
        """How the sandbox isolates candidate programs (see :attr:`Sandbox.isolation`)."""
        return self._sandbox.isolation

    def score_batch(self, problems: Sequence[CodeTask], completions: list[str]) -> list[CodeScoreResult]:
        """Every completion's sandbox runs at once on the pool; each info also holds
        ``tests_passed``, ``tests_total``, ``failure``, and ``pred`` is a pass/fail letter per
        test, for majority voting (see :func:`dapo_rllib.tasks.rewards.code.score_code_many`)."""
        return score_code_many(zip(completions, problems), self._sandbox, reward=self._reward)


@functools.cache
def shared_sandbox(limits: SandboxLimits, max_workers: int | None) -> Sandbox:
    """The process's sandbox for these settings, shared by all environments that use them."""
    sandbox = Sandbox(limits, max_workers=max_workers)
    atexit.register(sandbox.close)
    return sandbox


def sandbox_from_settings(settings: Mapping[str, Any], env_name: str) -> Sandbox:
    """The shared sandbox of an environment's :data:`SANDBOX_CONFIG` keys, checked (errors name ``env_name``)."""
    timeout_s, memory_mb, max_workers = settings["timeout_s"], settings["memory_mb"], settings["max_workers"]
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real) or not 0 < timeout_s < math.inf:
        raise ValueError(f"{env_name} 'timeout_s' must be a finite number of seconds > 0, got {timeout_s!r}")
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, numbers.Integral) or memory_mb <= 0:
        raise ValueError(f"{env_name} 'memory_mb' must be a positive whole number of MiB, got {memory_mb!r}")
    if max_workers is not None and (
        isinstance(max_workers, bool) or not isinstance(max_workers, numbers.Integral) or max_workers <= 0
    ):
        raise ValueError(
            f"{env_name} 'max_workers' must be a positive int or None (the sandbox's default), got {max_workers!r}"
        )
    # The CPU-time limit follows the wall-clock one, so that timeout_s is the one time knob.
    limits = SandboxLimits(timeout_s=float(timeout_s), cpu_s=math.ceil(timeout_s), memory_mb=int(memory_mb))
    return shared_sandbox(limits, None if max_workers is None else int(max_workers))
