"""Environment calls off the generation thread, side by side, each with a deadline.

The turn loop hands a turn's ``reset``/``step``/``finish`` calls to :class:`EnvCalls`: they run at once on
worker threads (a tool call waits on the sandbox, a game server on HTTP, so threads overlap them), at most
``max_concurrent`` at a time, and each returns its result or an :class:`EnvFailure`: what it raised, or
:data:`TIMEOUT` when it ran past ``timeout_s``. A call that never returns cannot be stopped (Python cannot kill
a thread): its thread is left behind as a daemon, which neither holds a place among the ``max_concurrent`` nor
keeps the process from exiting, and its episode fails. The environment twin it ran on is never used again.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from dapo_rllib.tasks.env_failures import TIMEOUT, EnvFailure, failure_of

T = TypeVar("T")

# Longest wait between looks at the running calls' deadlines, when none has ended meanwhile.
_POLL_S = 0.5


class EnvCalls:
    """Runs calls on daemon threads, at most ``max_concurrent`` at once, each given ``timeout_s`` seconds."""

    def __init__(self, max_concurrent: int, timeout_s: float):
        self.max_concurrent, self.timeout_s = max_concurrent, timeout_s

    def map(self, fn: Callable[[T], Any], items: Sequence[T]) -> list[Any]:
        """``fn(item)`` for each item, in ``items``' order: its result, or the EnvFailure it ended in."""
        results: list[Any] = [None] * len(items)
        ended = threading.Condition()
        finished: set[int] = set()

        def call(i: int) -> None:
            try:
                outcome = fn(items[i])
            except Exception as error:  # any failure of the environment ends its episode, not the run
                outcome = failure_of(error)
            with ended:
                if i not in finished:  # not given up on meanwhile
                    results[i] = outcome
                    finished.add(i)
                ended.notify()

        waiting, running = deque(range(len(items))), {}  # running: index -> deadline
        with ended:
            while waiting or running:
                while waiting and len(running) < self.max_concurrent:
                    i = waiting.popleft()
                    running[i] = time.monotonic() + self.timeout_s
                    threading.Thread(target=call, args=(i,), name=f"env-call-{i}", daemon=True).start()
                now = time.monotonic()
                for i in [i for i in running if i in finished or running[i] <= now]:
                    if i not in finished:
                        results[i] = EnvFailure(
                            TIMEOUT, f"the call did not return within env_timeout_s={self.timeout_s}"
                        )
                        finished.add(i)
                    del running[i]
                if running and not (waiting and len(running) < self.max_concurrent):
                    ended.wait(min(_POLL_S, max(min(running.values()) - now, 0.0)))
        return results
