"""The libraries' log lines at DAPO's default verbosity: a quiet console.

`import dapo_rllib` calls `quiet_library_logs()` before anything imports vLLM, in every process
DAPO starts: the driver, and the Ray env-runner and learner workers (they import `dapo_rllib` to
unpickle their actor class, before their engine is built). Set $DAPO_RLLIB_LIBRARY_LOGS=1 to leave
the libraries' logging as they configure it themselves (vLLM at INFO, every line below shown).

What it does, unless $DAPO_RLLIB_LIBRARY_LOGS is set:

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

import logging
import os

LIBRARY_LOGS_ENV = "DAPO_RLLIB_LIBRARY_LOGS"
VLLM_LEVEL_DEFAULT = "WARNING"

# vLLM names its loggers by module (`init_logger(__name__)`).
LAYERWISE_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
FAILED_TO_LOAD = "%s: Failed to load weights"  # layerwise.py's message, the layer's class name as argument
TIED_HEADS = frozenset({"ParallelLMHead"})
ROTARY_SUFFIX = "RotaryEmbedding"
ROTARY_WITH_PARAMETERS = frozenset({"FourierRotaryEmbedding"})


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
        if record.msg != FAILED_TO_LOAD or not isinstance(record.args, tuple) or len(record.args) != 1:
            return True
        return not is_known_harmless(str(record.args[0]))


def quiet_library_logs(environ=os.environ) -> bool:
    """Quiet the libraries' per-iteration lines in this process (and in those it starts, which
    inherit `environ`), unless $DAPO_RLLIB_LIBRARY_LOGS is set. Returns whether it quieted.

    Call before vLLM is imported (`import dapo_rllib` does); calling again does nothing new.
    """
    if library_logs_requested(environ):
        return False
    environ.setdefault("VLLM_LOGGING_LEVEL", VLLM_LEVEL_DEFAULT)
    logger = logging.getLogger(LAYERWISE_LOGGER)  # the object vLLM's init_logger returns later
    if not any(isinstance(f, KnownReloadWarnings) for f in logger.filters):
        logger.addFilter(KnownReloadWarnings())
    return True
