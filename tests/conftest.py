"""Shared, expensive fixtures: one Ray session and one tiny model for the whole test run."""

import pytest

import dapo_rllib  # noqa: F401  (sets vLLM's environment defaults before any test imports vLLM)


@pytest.fixture(scope="session")
def tiny_model_path():
    """The built-in tiny model (built into the cache on first use, ~3 minutes on 2 cores)."""
    from dapo_rllib.tiny_model import ensure_tiny_model

    return str(ensure_tiny_model())


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
def tiny_code_model_path():
    """The tiny model warm-started on the generated code tasks (built on first use, cached)."""
    from dapo_rllib.tiny_model import ensure_tiny_model

    return str(ensure_tiny_model(task="code"))


@pytest.fixture(scope="session")
def ray_session():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


# The sandbox containment report: tests/test_sandbox.py adds rows, printed at the end.
_CONTAINMENT_REPORT = pytest.StashKey[dict]()


@pytest.fixture(scope="session")
def containment_report(request):
    """{"isolation": the sandbox's isolation dict, "rows": [(attack, outcome, seconds)]}."""
    return request.config.stash.setdefault(_CONTAINMENT_REPORT, {"isolation": {}, "rows": []})


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    yield  # after pytest's own summaries, so that the report ends the output
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
