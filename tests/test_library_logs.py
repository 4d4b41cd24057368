"""A quiet console: vLLM's per-iteration lines are hidden by default, real warnings and errors are
not, and $DAPO_RLLIB_LIBRARY_LOGS=1 (or the user's own VLLM_LOGGING_LEVEL) brings them back.

Each case is a fresh process that imports dapo_rllib, then configures vLLM's logging the way
`LLM(...)` does (`configure_logging(LoggingConfig())`) and logs, through vLLM's own loggers, the
lines a weight update logs (layerwise.py, block_pool.py) and a few real ones.
"""

import logging
import os
import subprocess
import sys

import pytest

from dapo_rllib.library_logs import KnownReloadWarnings, is_known_harmless, quiet_library_logs

SCRIPT = """
import dapo_rllib
from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging, init_logger

configure_logging(LoggingConfig())
layerwise = init_logger("vllm.model_executor.model_loader.reload.layerwise")
layerwise.warning("%s: Failed to load weights", "RotaryEmbedding")
layerwise.warning("%s: Failed to load weights", "ParallelLMHead")
layerwise.warning("%s: Failed to load weights", "QKVParallelLinear")
layerwise.warning("%s: Failed to load weights", "FourierRotaryEmbedding")
init_logger("vllm.v1.core.block_pool").info("Successfully reset prefix cache")
init_logger("vllm.v1.engine.core").warning("a real vLLM warning")
init_logger("vllm.v1.engine.core").error("a real vLLM error")
"""

PER_UPDATE = [
    "RotaryEmbedding: Failed to load weights",
    "ParallelLMHead: Failed to load weights",
    "Successfully reset prefix cache",
]
REAL = [
    "QKVParallelLinear: Failed to load weights",
    "FourierRotaryEmbedding: Failed to load weights",
    "a real vLLM warning",
    "a real vLLM error",
]


def _run(**env_changes) -> set[str]:
    """The messages the script's process printed (vLLM's prefix up to "[file:line] " removed)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VLLM_LOGGING_LEVEL", "VLLM_CONFIGURE_LOGGING", "DAPO_RLLIB_LIBRARY_LOGS")
    }
    env.update(env_changes, DAPO_RLLIB_NO_REGISTRATION="1")  # no Ray needed here
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return {line.split("] ", 1)[-1] for line in (out.stdout + out.stderr).splitlines()}


@pytest.mark.parametrize(
    "env, hidden",
    [
        ({}, PER_UPDATE),  # the default: a quiet console
        ({"DAPO_RLLIB_LIBRARY_LOGS": "1"}, []),  # the libraries' own logging, every line
        ({"VLLM_LOGGING_LEVEL": "INFO"}, PER_UPDATE[:2]),  # the user's level wins; the filter stays
    ],
    ids=["default", "library-logs-on", "user-level-info"],
)
def test_vllm_lines_hidden_or_shown(env, hidden):
    messages = _run(**env)
    for line in PER_UPDATE + REAL:
        assert (line not in messages) == (line in hidden), f"{line!r} with {env}: {sorted(messages)}"


def test_quiet_library_logs_respects_the_environment():
    environ = {"VLLM_LOGGING_LEVEL": "DEBUG"}
    assert quiet_library_logs(environ) and environ["VLLM_LOGGING_LEVEL"] == "DEBUG"
    environ = {}
    assert quiet_library_logs(environ) and environ["VLLM_LOGGING_LEVEL"] == "WARNING"
    environ = {"DAPO_RLLIB_LIBRARY_LOGS": "1"}
    assert not quiet_library_logs(environ) and "VLLM_LOGGING_LEVEL" not in environ
    # once per process: calling again adds no second filter
    layerwise = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    assert sum(isinstance(f, KnownReloadWarnings) for f in layerwise.filters) == 1


def test_which_layers_are_known_harmless():
    for name in ("RotaryEmbedding", "Llama3RotaryEmbedding", "MRotaryEmbedding", "ParallelLMHead"):
        assert is_known_harmless(name)
    for name in ("FourierRotaryEmbedding", "VocabParallelEmbedding", "QKVParallelLinear", "RMSNorm"):
        assert not is_known_harmless(name)
    other = logging.LogRecord("x", logging.WARNING, __file__, 1, "%s: Excessive loading", ("RotaryEmbedding",), None)
    assert KnownReloadWarnings().filter(other)
