"""How long the code environment takes to score a training step's candidates (a benchmark).

    python bench/code_scoring.py [--candidates 512] [--repeats 3] [--smoke]

Scores `--candidates` programs for the generated code tasks in one `CodeEnv.score_many` call
(sandboxed runs on the env's bounded pool), the way an env runner scores a generation round,
and prints the wall time per candidate. The candidates are the tiny code model's three answer
styles (dapo_rllib/tiny_model.py): one in the requested function, which passes, and two that
fail the tests, so passing and failing runs are both timed.
"""

from __future__ import annotations

import argparse
import collections
import os
import time

from dapo_rllib.tiny_model import CODE_ANSWER_STYLES, code_answer
from envs.code_env import CodeEnv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="one run of 24 candidates (CI: the benchmark still runs)")
    args = parser.parse_args()
    if args.smoke:
        args.candidates, args.repeats = 24, 1

    env = CodeEnv({"dataset": "generated", "split": "train"})
    indices = [i % env.num_problems for i in range(args.candidates)]
    styles = [style for _, style in CODE_ANSWER_STYLES]
    completions = [code_answer(env.problem(i), styles[n % len(styles)]) for n, i in enumerate(indices)]
    print(f"{args.candidates} candidates, {os.cpu_count()} CPUs, sandbox isolation: {env.sandbox_isolation}")
    for repeat in range(1, args.repeats + 1):
        start = time.perf_counter()
        infos = env.score_many([env.problem(i) for i in indices], completions)
        elapsed = time.perf_counter() - start
        failures = collections.Counter(info["failure"] or "pass" for info in infos)
        print(
            f"run {repeat}: {elapsed:.2f} s in all, {1000 * elapsed / len(infos):.1f} ms per candidate "
            f"({dict(failures)})",
            flush=True,
        )


if __name__ == "__main__":
    main()
