"""Code repair with feedback: the model writes a program, sees which public tests it failed, and tries again.

Each task's first ``public_tests`` tests are public: after an attempt that fails one of them, the
environment answers with the failures (the call, what the program returned or what went wrong, what was
expected) and the model writes the whole program again, up to ``max_turns`` attempts. The reward is on the
hidden tests (the task's other tests; all of them for a task with no more than ``public_tests``): an attempt
that passes the public tests ends the episode with its hidden-test reward, and so does the last attempt
when the env runner stops the episode. The programs run in the bubblewrap sandbox, as in
:class:`envs.code_env.CodeEnv`.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from dapo_rllib.contracts import ScoreInfo
from dapo_rllib.tasks.data.code_tasks import CodeTask
from dapo_rllib.tasks.data.code_tests import FunctionTests
from dapo_rllib.tasks.rewards.code import CodeScoreResult, feedback_text, judge_code_many, score_code_many
from envs.code_env import DEFAULT_CONFIG as CODE_CONFIG
from envs.code_env import CodeEnv

#: Config keys and their defaults: CodeEnv's, and how many of a task's tests are public.
DEFAULT_CONFIG: dict[str, Any] = {**CODE_CONFIG, "public_tests": 2}


class CodeRepairEnv(CodeEnv):
    """Code tasks over several attempts, with the failed public tests shown after each.

    Config keys: :class:`CodeEnv`'s, and ``public_tests`` (default 2), how many of a task's tests (its
    first ones) are public.
    """

    DEFAULT_CONFIG = DEFAULT_CONFIG

    def __init__(self, config: Mapping[str, Any] | None = None):
        settings = self.settings(config)
        public = settings["public_tests"]
        if isinstance(public, bool) or not isinstance(public, numbers.Integral) or public < 1:
            raise ValueError(f"CodeRepairEnv 'public_tests' must be a positive int, got {public!r}")
        self._num_public = int(public)
        super().__init__(settings)

    def score_batch(self, problems: Sequence[CodeTask], completions: list[str]) -> list[CodeScoreResult]:
        """Rated on the hidden tests."""
        hidden = [self._tests(problem, public=False) for problem in problems]
        return score_code_many(zip(completions, hidden), self._sandbox, reward=self._reward)

    def feedback(self, problem: CodeTask, answer: str, info: ScoreInfo) -> list[dict] | None:
        """The failed public tests, or None (the episode ends) when the attempt passes them all."""
        ((result, reports),) = judge_code_many([(answer, self._tests(problem, public=True))], self._sandbox)
        if result["acc"] or result["broken_task"]:  # broken public tests have nothing to tell the model
            return None
        return [{"role": "user", "content": feedback_text(result["failure"], reports)}]

    def _tests(self, task: CodeTask, *, public: bool) -> CodeTask:
        """The task with only its public tests, or only its hidden ones (all, when it has no more than the
        public count)."""
        k = self._num_public
        if task.num_tests <= k:
            return task
        part = slice(None, k) if public else slice(k, None)
        if task.kind == "function":
            inputs, outputs = task.tests.inputs, task.tests.outputs
            return dataclasses.replace(task, tests=FunctionTests(task.tests.fn_name, inputs[part], outputs[part]))
        if task.kind == "program":  # the same setup and names, a part of the tests
            return dataclasses.replace(task, tests=dataclasses.replace(task.tests, tests=task.tests.tests[part]))
        return dataclasses.replace(task, tests=task.tests[part])
