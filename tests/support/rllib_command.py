"""Running the installed `rllib` command as a user does, for the test files of the command (test_cli*.py)."""

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import CONFIGS, ROOT

TINY = ROOT / "tuned_examples" / "dapo" / "tiny_arithmetic_dapo.py"
SWEEP = ROOT / "tuned_examples" / "dapo" / "tiny_arithmetic_sweep.py"
CODE = ROOT / "tuned_examples" / "dapo" / "tiny_code_dapo.py"
TOOL = ROOT / "tuned_examples" / "dapo" / "tiny_tool_arithmetic_dapo.py"
PPO = CONFIGS / "ppo_cartpole.py"
RLLIB = [str(Path(sys.executable).with_name("rllib"))]
# Small, fast evaluation for the tests: 16 held-out problems, 2 samples each.
FAST_EVAL = {"eval_max_problems": 16, "eval_num_samples": 2}
# The engine in the run's own process (num_env_runners=0): one process start less per run where the env runner
# actor is not what a test is about (the code example's test runs one).
IN_PROCESS = {"num_env_runners": 0}
# The code and tool examples train on one round of prompts, informative or not: their tests hold for any
# model the test recipes build (dynamic sampling is tested on the arithmetic model).
ONE_ROUND = FAST_EVAL | {"dynamic_sampling": False}

# Every DAPO metric a user watches, under its TensorBoard name.
TENSORBOARD_TAGS = [
    "learner/policy_loss",
    "learner/entropy",
    "learner/pg_clipfrac_low",
    "learner/pg_clipfrac_high",
    "learner/pg_clipfrac_dual",
    "learner/approx_kl",
    "learner/grad_norm",
    "learner/mean_token_prob",
    "learner/lr",
    "rollout/reward_mean",
    "rollout/acc_mean",
    "rollout/response_length_mean",
    "rollout/response_length_max",
    "rollout/truncation_ratio",
    "rollout/generation_rounds",
    "rollout/groups_kept",
    "rollout/scoring_timeouts",
    "timing/generation_s",
    "timing/scoring_s",
    "timing/old_log_probs_s",
    "timing/update_s",
    "timing/weight_sync_s",
    "timing/generation_tokens_per_s",
    "timing/iteration_s",
    "timing/evaluation_s",
    "evaluation/arithmetic/avg@2",
    "evaluation/arithmetic/pass@2",
    "evaluation/arithmetic/maj@2",
    "evaluation/arithmetic/truncation_ratio",
    "evaluation/arithmetic/response_length_mean",
]


def rllib(*args, cwd, timeout=600):
    """Run the installed `rllib` console script; returns (exit code, stdout + stderr)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run([*RLLIB, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def run_ok(*args, cwd, timeout=600):
    code, out = rllib(*args, cwd=cwd, timeout=timeout)
    assert code == 0, out[-4000:]
    return out


def scalar_tags(logdir: Path) -> set[str]:
    from dapo_rllib.reporting.plot import read_scalars

    return set(read_scalars(logdir))
