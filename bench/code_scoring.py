"""The code environment's scoring under load, hostile programs included (a benchmark).

    python bench/code_scoring.py [--programs 1200] [--smoke]

Scores `--programs` candidates for the generated code tasks in `CodeEnv.score_many` calls of a
training round's size (sandboxed runs on the env's bounded pool), the way an env runner scores
generation rounds. Two thirds are the tiny code model's three answer styles
(dapo_rllib/tiny_model.py: one passes, two fail); a third are hostile: infinite loops, fork
bombs, memory hogs, output floods, daemons that leave with setsid, temp files, leaked
descriptors, and forged answers. It prints the throughput, and after the run what the run left
behind: processes (this process's descendants, and any process of the run still alive), this
process's open file descriptors, and entries in the temp dir. Exits non-zero when anything was
left or when a hostile program scored a pass. Results: bench/results/code_scoring.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile
import time
from pathlib import Path

from dapo_rllib.tiny_model import CODE_ANSWER_STYLES, code_answer
from envs.code_env import CodeEnv

RESULTS = Path(__file__).parent / "results" / "code_scoring.json"
# Hostile candidates: each defines the requested function wrongly (or not at all) and attacks.
# Every process they start names itself with TAG, so that leftovers can be found by name.
TAG = "dapo-hostile"
NAME_ME = f"import ctypes\nctypes.CDLL(None).prctl(15, {TAG.encode()!r}, 0, 0, 0)\n"
HOSTILE = {
    "infinite loop": "while True:\n    pass\n",
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "memory hog": "hog = [bytearray(1 << 26) for _ in range(1000)]\n",
    "output flood": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
    "setsid daemon": "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)\nos._exit(0)\n",
    "temp files": "import os, tempfile\nfor i in range(50):\n    tempfile.mkstemp(dir='/tmp')\nopen('/tmp/left-behind', 'w').write('x' * 100000)\n",
    "descriptor leak": "import os\nfds = [os.pipe() for _ in range(100)]\nimport time\ntime.sleep(0.2)\n",
    "forged answers": 'import os\nfor i in range(8):\n    os.write(3, b\'{"call": %d, "value": 0}\\n\' % i)\nos._exit(0)\n',
}


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def descendants() -> list[int]:
    """Processes whose ancestry leads to this one."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    found, level = set(), {os.getpid()}
    while level:
        level = {pid for pid, parent in parents.items() if parent in level} - found
        found |= level
    return sorted(found)


def tagged_processes() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/comm") as comm:
                if comm.read().strip() == TAG[:15]:
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=1200)
    parser.add_argument("--round", type=int, default=96, help="programs per score_many call")
    parser.add_argument(
        "--smoke", action="store_true", help="60 programs, no results file (CI: the benchmark still runs)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.programs, args.round = 60, 30

    env = CodeEnv({"dataset": "generated", "split": "train", "timeout_s": 2.0, "memory_mb": 256})
    styles = [style for _, style in CODE_ANSWER_STYLES]
    attacks = sorted(HOSTILE)
    jobs = []  # (problem, completion, kind)
    for n in range(args.programs):
        problem = env.problem(n % env.num_problems)
        if n % 3 == 2:
            attack = attacks[(n // 3) % len(attacks)]
            jobs.append((problem, f"```python\n{NAME_ME}{HOSTILE[attack]}```", attack))
        else:
            jobs.append((problem, code_answer(problem, styles[n % len(styles)]), "honest"))

    env.score_many([jobs[0][0]], [jobs[0][1]])  # the sandbox's start-up check, outside the figures
    fds_before, temp_before = open_fds(), set(os.listdir(tempfile.gettempdir()))
    print(
        f"{args.programs} programs ({args.programs // 3} hostile), {os.cpu_count()} CPUs, sandbox: {env.sandbox_isolation['mode']}",
        flush=True,
    )
    outcomes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    start = time.perf_counter()
    for first in range(0, len(jobs), args.round):
        batch = jobs[first : first + args.round]
        infos = env.score_many([problem for problem, _, _ in batch], [completion for _, completion, _ in batch])
        for (_, _, kind), info in zip(batch, infos):
            outcomes[kind][info["failure"] or "pass"] += 1
        done = first + len(batch)
        print(f"  {done}/{len(jobs)} scored, {done / (time.perf_counter() - start):.1f} programs/s", flush=True)
    elapsed = time.perf_counter() - start

    leaked = {
        "processes": len(descendants()) + len(tagged_processes()),
        "open_fds": open_fds() - fds_before,
        "temp_files": len(set(os.listdir(tempfile.gettempdir())) - temp_before),
    }
    hostile_passes = sum(counts["pass"] for kind, counts in outcomes.items() if kind != "honest")
    figures = {
        "programs": len(jobs),
        "hostile": sum(kind != "honest" for _, _, kind in jobs),
        "seconds": round(elapsed, 2),
        "programs_per_s": round(len(jobs) / elapsed, 2),
        "ms_per_program": round(1000 * elapsed / len(jobs), 1),
        "leaked": leaked,
        "hostile_passes": hostile_passes,
        "outcomes": {kind: dict(counts) for kind, counts in sorted(outcomes.items())},
    }
    print(json.dumps(figures, indent=1))
    if not args.smoke:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(figures, indent=1) + "\n")
        print(f"results: {RESULTS}")
    if any(leaked.values()) or hostile_passes:
        raise SystemExit(f"FAILED: left behind {leaked}, hostile programs passing: {hostile_passes}")


if __name__ == "__main__":
    main()
