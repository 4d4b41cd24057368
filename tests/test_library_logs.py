"""A quiet console: the libraries' known start and per-iteration lines are hidden by default, real
warnings and errors are not, and $DAPO_RLLIB_LIBRARY_LOGS=1 (or the user's own VLLM_LOGGING_LEVEL)
brings them back.

Each case is a fresh process that imports dapo_rllib, configures vLLM's logging the way `LLM(...)`
does (`configure_logging(LoggingConfig())`) and Ray's the way `import ray` does, then emits, through
the libraries' own loggers (and their own code where it is cheap to run), the lines `make train`
printed before its first `[DAPO]` line and a weight update's, each next to a real line of the same
logger that must still show.
"""

import logging
import os
import re
import subprocess
import sys

import pytest

from dapo_rllib.library_logs import (
    KNOWN_LINES,
    KNOWN_NATIVE_LINE,
    KnownReloadWarnings,
    is_known_harmless,
    library_logs_requested,
    no_transformers_progress_bars,
    quiet_library_logs,
)

# The lines `make train` printed before its first `[DAPO]` line: (logger, message), the texts as
# the libraries print them. The script logs the vLLM ones through vLLM's loggers; the Ray, RLlib and
# Tune ones come from those libraries' own code where it is cheap to run.
GENERATED_TOKEN = "Generated new authentication token and saved to /root/.ray/auth_token"
SETUP_TOOK = (
    "Trainable.setup took 825.773 seconds. If your trainable is slow to initialize, consider setting "
    "reuse_actors=True to reduce actor creation overheads."
)
START = [
    ("vllm.triton_utils.importing", "Triton is installed, but doesn't include CPU backend. Disabling Triton."),
    ("vllm.platforms.cpu", "Triton is not installed. triton-cpu is expected on x86 CPUs."),
    ("vllm.platforms.cpu", "Reset SSM cache type to float32 for accelerated GDN mamba backend 'none'."),
    (
        "vllm.engine.arg_utils",
        "The global random seed is set to 1. Since VLLM_ENABLE_V1_MULTIPROCESSING is set to False, this may "
        "affect the random state of the Python process that launched vLLM.",
    ),
    (
        "vllm.engine.arg_utils",
        "This model does not officially support disabling chunked prefill. Disabling this manually may cause "
        "the engine to crash or produce incorrect outputs.",
    ),
    ("vllm.config.vllm", "Model Runner V2 requires Triton; using the V1 model runner instead."),
    (
        "vllm.v1.engine.input_processor",
        "vLLM has deprecated support for supporting different tokenizers for different LoRAs. By default, vLLM uses "
        "base model's tokenizer. If you are using a LoRA with its own tokenizer, consider specifying `--tokenizer "
        "[lora_path]` to use the LoRA tokenizer.",
    ),
    (
        "vllm.config.vllm",
        "Enforce eager set, disabling torch.compile, CUDAGraphs, and JIT kernel warmup. This is equivalent to "
        "setting -cc.mode=none -cc.cudagraph_mode=none and --kernel_config.enable_jit_warmup=False",
    ),
    (
        "vllm.config.vllm",
        "Inductor compilation was disabled by user settings, optimizations settings that are only active "
        "during inductor compilation will be ignored.",
    ),
    *[
        (
            "vllm.v1.worker.cpu_worker",
            f"{library} is not found in LD_PRELOAD. For best performance, please follow the section `set "
            "LD_PRELOAD` in https://docs.vllm.ai/en/latest/getting_started/installation/cpu/ to setup required "
            "pre-loaded libraries.",
        )
        for library in ("libtcmalloc", "libiomp")
    ],
    (
        "ray._private.authentication.authentication_token_setup",
        "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out. For more "
        "information, see https://docs.ray.io/en/latest/ray-security/token-auth.html",
    ),
    ("ray._private.authentication.authentication_token_setup", GENERATED_TOKEN),
    ("ray._private.worker", "Started a local Ray instance."),
    (
        "ray.rllib.algorithms.algorithm_config",
        "You are running PPO on the new API stack! This is the new default behavior for this algorithm. If you "
        "don't want to use the new API stack, set `config.api_stack(enable_rl_module_and_learner=False,"
        "enable_env_runner_and_connector_v2=False)`. For a detailed migration guide, see here: "
        "https://docs.ray.io/en/master/rllib/new-api-stack-migration-guide.html",
    ),
    (
        "ray._common.deprecation",
        "DeprecationWarning: `RLModule(config=[RLModuleConfig object])` has been deprecated. Use "
        "`RLModule(observation_space=..)` instead. This will raise an error in the future!",
    ),
    ("ray.tune.trainable.trainable", SETUP_TOOK),
    ("ray.tune.utils.util", "Install gputil for GPU system monitoring."),
]
NUMA_LINE = (
    "[W1127 06:52:57.326771986 utils.cpp:68] Warning: NUMA binding: Using MEMBIND policy for memory allocation "
    "on the NUMA nodes (0). Memory allocations will be strictly bound to these NUMA nodes. (function "
    "init_cpu_memory_env)"
)
# Lines that vLLM causes (hidden) and that the same code called from elsewhere causes (shown).
SET_NUM_THREADS = "CPU backend doesn't allow to use `torch.set_num_threads` after the thread binding, skip it."
REDUCE_OP = "`torch.distributed.reduce_op` is deprecated"

SCRIPT = rf"""
import logging
import os

import dapo_rllib
from dapo_rllib.library_logs import known_native_lines_dropped
from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging, init_logger

configure_logging(LoggingConfig())

# vLLM: a weight update's lines
layerwise = init_logger("vllm.model_executor.model_loader.reload.layerwise")
for layer in ("RotaryEmbedding", "ParallelLMHead", "QKVParallelLinear", "FourierRotaryEmbedding"):
    layerwise.warning("%s: Failed to load weights", layer)
init_logger("vllm.v1.core.block_pool").info("Successfully reset prefix cache")
init_logger("vllm.v1.engine.core").warning("a real vLLM warning")
init_logger("vllm.v1.engine.core").error("a real vLLM error")

# vLLM: an engine start's lines, and a real warning of each of their loggers
for name, message in {[line for line in START if line[0].startswith("vllm.")]!r}:
    init_logger(name).warning(message)
for name in ("vllm.platforms.cpu", "vllm.engine.arg_utils", "vllm.config.vllm", "vllm.v1.worker.cpu_worker"):
    init_logger(name).warning("a real warning of " + name)

# The CPU worker's stand-in for torch.set_num_threads, called by vLLM's code and by other code
def skip_set_num_threads(x):
    init_logger("vllm.v1.worker.cpu_worker").warning({SET_NUM_THREADS!r})
for module in ("vllm.utils.torch_utils", "user_code"):
    exec("skip_set_num_threads(1)", {{"__name__": module, "skip_set_num_threads": skip_set_num_threads}})

# torch's FutureWarning for `reduce_op`, touched by vLLM's Triton dispatcher and by other code
for module in ("vllm.triton_utils.dispatcher", "user_code"):
    exec("import torch.distributed\nhasattr(torch.distributed.reduce_op, '__dict__')", {{"__name__": module}})

# C++ lines on stderr while an engine is built
with known_native_lines_dropped():
    os.write(2, {(NUMA_LINE + chr(10)).encode()!r})
    os.write(2, b"[W1127 06:52:57.326 utils.cpp:68] Warning: numa_set_membind failed. errno: 1 (function x)\n")

# Ray, RLlib and Tune, as in the driver: their own code where it is cheap to run
import ray
from ray._common.deprecation import deprecation_warning
from ray._private.authentication.authentication_token_setup import _warn_token_auth_disabled, _warn_token_auth_enabled
from ray.rllib.algorithms.ppo import PPOConfig
from ray.tune.utils.util import UtilMonitor

_warn_token_auth_enabled()
_warn_token_auth_disabled()
logging.getLogger("ray._private.authentication.authentication_token_setup").info({GENERATED_TOKEN!r})
logging.getLogger("ray._private.worker").info("Started a local Ray instance.")
logging.getLogger("ray._private.worker").info("Connected to Ray cluster.")
PPOConfig().environment("CartPole-v1").validate()
deprecation_warning(old="RLModule(config=[RLModuleConfig object])", new="RLModule(observation_space=..)")
deprecation_warning(old="AlgorithmConfig.something_old", new="AlgorithmConfig.something_new")
logging.getLogger("ray.tune.trainable.trainable").info({SETUP_TOOK!r})
UtilMonitor(start=True).stop()
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
    "a real warning of vllm.platforms.cpu",
    "a real warning of vllm.engine.arg_utils",
    "a real warning of vllm.config.vllm",
    "a real warning of vllm.v1.worker.cpu_worker",
    "[W1127 06:52:57.326 utils.cpp:68] Warning: numa_set_membind failed.",
    "Token authentication is disabled for this Ray cluster.",
    "Connected to Ray cluster.",
    "DeprecationWarning: `AlgorithmConfig.something_old` has been deprecated.",
]


def _messages(printed: str) -> list[str]:
    """The printed lines without the loggers' prefixes (up to vLLM's "[file:line] " or Ray's " -- ");
    a C++ line ("[W...") whole."""
    messages = []
    for line in printed.splitlines():
        if " -- " in line:
            line = line.split(" -- ", 1)[1]
        elif "] " in line and not line.startswith("[W"):
            line = line.split("] ", 1)[1]
        messages.append(line)
    return messages


def _run(**env_changes) -> str:
    """Everything the script's process printed."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VLLM_LOGGING_LEVEL", "VLLM_CONFIGURE_LOGGING", "DAPO_RLLIB_LIBRARY_LOGS")
    }
    env.update(env_changes, DAPO_RLLIB_NO_REGISTRATION="1")  # no cluster needed here
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout + out.stderr


@pytest.mark.engine  # starts a vLLM engine
@pytest.mark.parametrize(
    "env, hidden",
    [
        ({}, PER_UPDATE + [m for _, m in START] + [NUMA_LINE]),  # the default: a quiet console
        ({"DAPO_RLLIB_LIBRARY_LOGS": "1"}, []),  # the libraries' own logging, every line
        # The user's vLLM level wins; the filters stay.
        ({"VLLM_LOGGING_LEVEL": "INFO"}, PER_UPDATE[:2] + [m for _, m in START] + [NUMA_LINE]),
    ],
    ids=["default", "library-logs-on", "user-level-info"],
)
def test_library_lines_hidden_or_shown(env, hidden):
    printed = _run(**env)
    messages = _messages(printed)
    for line in PER_UPDATE + [m for _, m in START] + [NUMA_LINE] + REAL:
        shown = any(message.startswith(line) for message in messages)
        assert shown == (line not in hidden), f"{line!r} with {env}:\n{printed}"
    # vLLM calling its own code: hidden by default; the same from other code: shown.
    for line in (SET_NUM_THREADS, REDUCE_OP):
        assert printed.count(line) == (2 if not hidden else 1), f"{line!r} with {env}:\n{printed}"


def test_every_known_line_is_one_of_the_start_lines_tested():
    lines = START + [("vllm.v1.worker.cpu_worker", SET_NUM_THREADS)]
    for known in KNOWN_LINES:
        assert any(
            name == known.logger and re.fullmatch(known.message, message, re.DOTALL) for name, message in lines
        ), f"no test line for {known}"
    assert KNOWN_NATIVE_LINE.fullmatch(NUMA_LINE)


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
    assert len(logging.getLogger("vllm.config.vllm").filters) == 1


def test_which_layers_are_known_harmless():
    for name in ("RotaryEmbedding", "Llama3RotaryEmbedding", "MRotaryEmbedding", "ParallelLMHead"):
        assert is_known_harmless(name)
    for name in ("FourierRotaryEmbedding", "VocabParallelEmbedding", "QKVParallelLinear", "RMSNorm"):
        assert not is_known_harmless(name)
    other = logging.LogRecord("x", logging.WARNING, __file__, 1, "%s: Excessive loading", ("RotaryEmbedding",), None)
    assert KnownReloadWarnings().filter(other)


def test_transformers_progress_bars_are_off_inside_only_and_back_on_request():
    from transformers.utils import logging as transformers_logging

    assert transformers_logging.is_progress_bar_enabled()
    with no_transformers_progress_bars(environ={}):
        assert not transformers_logging.is_progress_bar_enabled()
    assert transformers_logging.is_progress_bar_enabled()
    environ = {"DAPO_RLLIB_LIBRARY_LOGS": "1"}
    assert library_logs_requested(environ)
    with no_transformers_progress_bars(environ=environ):
        assert transformers_logging.is_progress_bar_enabled()
