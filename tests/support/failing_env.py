"""Environments that fail on purpose, for tests/tasks/test_env_failures.py: the real math environment, whose step
raises or never returns on chosen problems (imported by its package path, so that Ray's processes can too)."""

import threading

from envs.math_env import MathEnv

# A step that "never returns" waits on this, set by no one.
NEVER = threading.Event()


class FailingMathEnv(MathEnv):
    """MathEnv whose step raises on the problems in `_raise_on` and hangs on those in `_hang_on`."""

    def __init__(self, config):
        self._raise_on = set(config.get("_raise_on", ()))
        self._hang_on = set(config.get("_hang_on", ()))
        super().__init__(config)

    def step(self, action):
        if self._current in self._raise_on:
            raise ZeroDivisionError(f"the game broke on problem {self._current}")
        if self._current in self._hang_on:
            NEVER.wait()
        return super().step(action)
