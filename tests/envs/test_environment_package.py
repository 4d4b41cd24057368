"""An environment published as a package: examples/environment_package, installed into this venv with pip, is
registered by `import dapo_rllib` under its entry point's name, and DAPO trains on it by that name.

The package is installed for this module only and uninstalled after it. Its names (the distribution
dapo-counting-env, the module dapo_counting_env, the environment "counting") are its own, so the test files
that other processes run meanwhile see at most one more registered environment, which none of them uses.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from dapo_rllib.columns import Metrics
from dapo_rllib.registry import register_all
from tests.support.paths import ROOT
from tests.support.runs import tiny_config

EXAMPLE_PACKAGE = ROOT / "examples" / "environment_package"
DISTRIBUTION = "dapo-counting-env"
ENV_NAME = "counting"  # the name of its entry point
DATA_SOURCE = "counting"  # what its problems report
ITERATIONS = 2
TRAIN_BATCH_PROMPTS = 8
EVAL_PROBLEMS = 16  # of the 30 in the package's held-out split


def _pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")


@pytest.fixture(scope="module")
def installed_package(tmp_path_factory):
    """The example package, installed into this venv while the module runs. (A run killed before the teardown
    leaves it installed: the next one installs it over that, and uninstalls it.)"""
    # From a copy: setuptools writes build/ and *.egg-info beside the sources it builds.
    source = shutil.copytree(EXAMPLE_PACKAGE, tmp_path_factory.mktemp("environment_package") / "source")
    # Offline and without a build environment: setuptools is in the venv, and dapo-rllib, its one dependency.
    _pip("install", "--no-deps", "--no-build-isolation", "--no-index", "--force-reinstall", str(source))
    try:
        # This process imported dapo_rllib before the package existed: read the entry points again, as a process
        # started now would when it imports dapo_rllib.
        importlib.invalidate_caches()
        register_all()
        yield
    finally:
        _pip("uninstall", "-y", DISTRIBUTION)


# Run in a new process: what `import dapo_rllib` alone registers, and where the class it builds comes from; then
# the same after Ray started and shut down, which empties Ray Tune's registry (it lives in the running Ray's store).
_BUILD_BY_NAME = textwrap.dedent(
    f"""
    import inspect, json
    import ray
    import dapo_rllib
    from dapo_rllib.tasks.env_factory import build_env

    def built():
        env = build_env({ENV_NAME!r}, {{"split": "test"}}, worker_index=0, num_workers=0)
        (problem,) = env.draw(1)
        return {{
            "class": type(env).__qualname__,
            "file": inspect.getfile(type(env)),
            "num_problems": env.num_problems,
            "data_source": problem.data_source,
        }}

    print(json.dumps(built()))
    ray.init(num_cpus=1, include_dashboard=False)
    ray.shutdown()
    print(json.dumps(built()))
    """
)


@pytest.mark.engine  # a new process that starts Ray
def test_import_dapo_rllib_registers_the_installed_packages_environment(installed_package, tmp_path):
    # Started in an empty directory, so the class can only come from the installed package.
    done = subprocess.run([sys.executable, "-c", _BUILD_BY_NAME], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first, after_ray = [json.loads(line) for line in done.stdout.splitlines()[-2:]]
    assert first["class"] == "CountingEnv"
    assert Path(first["file"]).is_relative_to(sysconfig.get_path("purelib"))
    # The package's held-out split: the starts 0, 10, ..., 90, counted on by 1, 2 and 3.
    assert (first["num_problems"], first["data_source"]) == (30, DATA_SOURCE)
    # Built from its entry point once Ray forgot the registration (dapo_rllib.tasks.env_factory.build_env).
    assert after_ray == first


@pytest.fixture(scope="module")
def results(installed_package, ray_session, tiny_model_path):
    """DAPO's results of `ITERATIONS` iterations on the environment, named as any registered one is. The env
    runner that builds it and samples on it is a Ray actor, a process of its own."""
    config = (
        tiny_config(tiny_model_path, train_batch_size_prompts=TRAIN_BATCH_PROMPTS)
        .environment(ENV_NAME)
        .env_runners(num_env_runners=1)
        .evaluation(evaluation_interval=ITERATIONS, eval_num_samples=2, eval_max_problems=EVAL_PROBLEMS)
    )
    algo = config.build_algo()
    try:
        return [algo.train() for _ in range(ITERATIONS)]
    finally:
        algo.stop()


def test_dapo_trains_on_the_packages_environment_by_name(results):
    assert [result["training_iteration"] for result in results] == list(range(1, ITERATIONS + 1))
    for result in results:
        # The environment's ratings decided which groups were trained: a full batch of groups with both right
        # and wrong answers.
        rollout = result[Metrics.ROLLOUT]
        assert rollout[Metrics.GROUPS_KEPT] == TRAIN_BATCH_PROMPTS, rollout
        assert 0 < rollout[Metrics.ACC_MEAN] < 1, rollout


def test_validation_reports_the_packages_data_source(results):
    # Validation (the last iteration's) ran on the package's held-out split, reported under its data source.
    counting = results[-1]["evaluation"][DATA_SOURCE]
    assert counting["num_problems"] == EVAL_PROBLEMS and counting["num_samples"] == 2 * EVAL_PROBLEMS
    assert 0 <= counting["avg@2"] <= counting["pass@2"] <= 1
