"""An env that stalls one env runner mid-sample, for tests/algorithm/test_fault_tolerance.py (imported by
its package path, so that Ray's env runner processes can import it too)."""

import os
import time
from pathlib import Path

from envs.math_env import MathEnv

# Time for the test to see the victim stall and kill it, and for RLlib to restart it.
KILL_WAIT_S = 300


class StallingMathEnv(MathEnv):
    """The math env (a real one) that logs each answer it scores as a `pid worker problem-index`
    line to `_log_dir/scored` (one per episode), and on env runner `_victim`, the first time it
    scores, writes its pid to `_log_dir/victim` and stalls until it is killed: the kill lands
    mid-sample."""

    def __init__(self, config):
        self._log_dir, self._victim = Path(config["_log_dir"]), config["_victim"]
        self._worker = getattr(config, "worker_index", 0)
        super().__init__(config)

    def score_many(self, problems, completions):
        with open(self._log_dir / "scored", "a") as log:
            log.writelines(f"{os.getpid()} {self._worker} {p.index}\n" for p in problems)
        victim_file = self._log_dir / "victim"
        if self._worker == self._victim and not victim_file.exists():
            victim_file.write_text(str(os.getpid()))
            time.sleep(KILL_WAIT_S)
        return super().score_many(problems, completions)
