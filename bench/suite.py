"""The test suite as a benchmark: its wall time, peak memory, line coverage and slowest tests.

    python bench/suite.py [--workers N] [--label NAME] [--durations N] [--coverage-json FILE] [--smoke]

Runs the suite as `make test` does (pytest-xdist, a test file to a worker at a time, the real model converted
beside it), with pytest-cov measuring the line coverage of `dapo_rllib/` and `envs/` in the test processes (not
in Ray's worker processes, which the suite starts too: the figure is a lower bound, and the same one before and
after a change). While it runs, memory is sampled every second: the machine's used memory above its level before
the run, and the RSS of the suite's processes (summed, which counts shared pages twice, and the largest). The
result is added to bench/results/suite.json under `--label` (default: the commit), after those of earlier runs,
so a change to the suite is read as before and after. `--smoke` (CI) runs a few files without an engine and
writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "suite.json"
SMOKE_TESTS = ["tests/test_console.py", "tests/algorithm/test_league_math.py"]
COVERED = ("dapo_rllib", "envs")
# The real models the suite needs, converted beside it (the Makefile's TEST_REAL_MODELS).
REAL_MODELS = ["smollm2-135m-instruct"]


class MemorySampler(threading.Thread):
    """Every second: the machine's used memory, and the RSS of the suite's processes (the pytest processes and
    what they start: Ray's, the engines', the servers'), their sum and the largest."""

    def __init__(self, root: psutil.Process):
        super().__init__(daemon=True)
        self.root = root
        self.baseline = psutil.virtual_memory().used
        self.peak_used = self.peak_tree = self.peak_process = 0
        self.done = threading.Event()

    def run(self):
        while not self.done.wait(1.0):
            self.peak_used = max(self.peak_used, psutil.virtual_memory().used - self.baseline)
            rss = []
            for process in [self.root, *self.root.children(recursive=True)]:
                try:
                    rss.append(process.memory_info().rss)
                except psutil.Error:  # ended between the listing and the reading
                    pass
            self.peak_tree = max(self.peak_tree, sum(rss))
            self.peak_process = max(self.peak_process, *rss, 0)


def slowest(output: str) -> list[dict]:
    """The rows of pytest's `--durations` table: seconds, phase, test."""
    rows = re.findall(r"^(\d+\.\d+)s (setup|call|teardown)\s+(\S+)$", output, re.MULTILINE)
    return [{"seconds": float(seconds), "phase": phase, "test": test} for seconds, phase, test in rows]


def outcome(output: str) -> dict:
    """The counts of pytest's last line ("1,392 passed, 2 failed in ...")."""
    last = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed)", line)][-1]
    return {word: int(count) for count, word in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected)", last)}


def coverage(report: Path) -> dict:
    """Line coverage (percent) of each covered package and of both together, from coverage's JSON report."""
    data = json.loads(report.read_text())
    lines = {name: [0, 0] for name in COVERED}
    for path, summary in data["files"].items():
        package = Path(path).parts[0]
        if package in lines:
            lines[package][0] += summary["summary"]["covered_lines"]
            lines[package][1] += summary["summary"]["num_statements"]
    percent = {name: round(100 * covered / total, 2) for name, (covered, total) in lines.items()}
    return percent | {"total": round(data["totals"]["percent_covered"], 2)}


def run_suite(workers: int, tests: list[str], smoke: bool, durations: int, keep_coverage: Path | None) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "coverage.json"
        command = [sys.executable, "-m", "pytest", "-q", "-n", str(workers), "--dist", "loadfile"]
        command += [f"--durations={durations}", *(f"--cov={name}" for name in COVERED), f"--cov-report=json:{report}"]
        command += ["-m", "not engine"] if smoke else []
        print(f"[suite] {' '.join(command[1:])} {' '.join(tests)}", flush=True)
        start = time.monotonic()
        # As `make test`: the real model is converted beside the suite (its files run last and wait for it).
        builder = (
            None if smoke else subprocess.Popen([sys.executable, "-m", "dapo_rllib.models", *REAL_MODELS], cwd=ROOT)
        )
        suite = subprocess.Popen(command + tests, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        sampler = MemorySampler(psutil.Process(suite.pid))
        sampler.start()
        lines = []
        for line in suite.stdout:  # pytest's progress, as it comes
            print(line, end="", flush=True)
            lines.append(line)
        suite.wait()
        if builder is not None and builder.wait() != 0:
            sys.exit(f"[suite] converting {REAL_MODELS} failed (exit status {builder.returncode})")
        output = "".join(lines)
        wall = time.monotonic() - start
        sampler.done.set()
        sampler.join()
        if keep_coverage is not None and report.exists():
            shutil.copyfile(report, keep_coverage)
        return {
            "command": " ".join(["python -m pytest", *command[3:], *tests]).replace(str(report), "FILE"),
            "workers": workers,
            "exit_status": suite.returncode,
            "wall_s": round(wall, 1),
            "outcome": outcome(output),
            "peak_used_memory_gb": round(sampler.peak_used / 2**30, 2),
            "peak_suite_rss_gb": round(sampler.peak_tree / 2**30, 2),
            "peak_process_rss_gb": round(sampler.peak_process / 2**30, 2),
            "coverage_percent": coverage(report),
            "slowest": slowest(output),
        }


def commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=int(os.environ.get("TEST_WORKERS", "2")))
    parser.add_argument("--label", default=None, help="the name of this run in suite.json (default: the commit)")
    parser.add_argument("--smoke", action="store_true", help="a few files, nothing written (CI)")
    parser.add_argument("--durations", type=int, default=10, help="how many of the slowest tests to list")
    parser.add_argument(
        "--coverage-json", type=Path, default=None, help="keep coverage's JSON report (every file's lines) here"
    )
    args = parser.parse_args()
    result = run_suite(
        args.workers, SMOKE_TESTS if args.smoke else ["tests"], args.smoke, args.durations, args.coverage_json
    )
    result = {"label": args.label or commit(), "commit": commit()} | result
    print(json.dumps({k: v for k, v in result.items() if k != "slowest"}, indent=2), flush=True)
    if result["exit_status"] != 0:
        sys.exit(f"[suite] the suite failed (exit status {result['exit_status']})")
    if not args.smoke:
        runs = json.loads(RESULTS.read_text())["runs"] if RESULTS.exists() else []
        RESULTS.write_text(json.dumps({"runs": [*runs, result]}, indent=2) + "\n")
        print(f"[suite] added to {RESULTS}", flush=True)


if __name__ == "__main__":
    main()
