"""dapo-rllib: DAPO as a Ray RLlib algorithm.

`import dapo_rllib` registers the algorithms with Ray Tune ("DAPO", and its neighbours "GRPO",
"DrGRPO", "GSPO", "CISPO", "RLOO", "REINFORCE++": `dapo_rllib.algorithm.family`) and the environments
(the math environment as "dapo_math"). The pure math in `dapo_rllib.algorithm.core_algos` needs only torch, so the package imports
without Ray too (nothing is registered then). Processes that need no Ray (the scoring child of
`dapo_rllib.tasks.rewards.scoring_process`) set $DAPO_RLLIB_NO_REGISTRATION to skip it. Importing
the package also gives the project's logger its console handler (`dapo_rllib.console`).
"""

import importlib
import os

from dapo_rllib.console import install_console
from dapo_rllib.env_vars import NO_REGISTRATION_ENV

# The project's own lines (progress, notes, warnings) print as plain lines.
install_console()

__version__ = "0.1.0"

# vLLM reads this when it is imported, and every process that starts an engine imports this package
# first: the engine stays inside the env runner's process. Set it in the environment to override.
# (A CPU engine's KV cache is sized to the model: dapo_rllib.rollout.vllm_engine.cpu_kv_cache_bytes.)
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

# A quiet console: vLLM at WARNING and two known-harmless vLLM warnings of every weight update
# dropped (see dapo_rllib.library_logs for why they are harmless); $DAPO_RLLIB_LIBRARY_LOGS=1
# leaves the libraries' logging as they set it.
from dapo_rllib.library_logs import quiet_library_logs  # noqa: E402  (after the defaults above)

quiet_library_logs()

try:
    import ray  # noqa: F401
except ModuleNotFoundError:  # only the pure math is usable then
    ray = None

if ray is not None and not os.environ.get(NO_REGISTRATION_ENV):
    from dapo_rllib.registry import register_all

    register_all()

# The public names, importable from the package itself; each is loaded on first use, so the pure math
# stays importable without Ray.
_PUBLIC = {
    "DAPO": "dapo_rllib.algorithm.dapo",
    "DAPOConfig": "dapo_rllib.algorithm.dapo",
    **dict.fromkeys(
        [
            f"{name}{suffix}"
            for name in ("GRPO", "DrGRPO", "GSPO", "CISPO", "RLOO", "REINFORCEPlusPlus")
            for suffix in ("", "Config")
        ],
        "dapo_rllib.algorithm.family",
    ),
    "ProblemEnv": "dapo_rllib.tasks.problem_env",
    "Problem": "dapo_rllib.tasks.problem_env",
    "Tool": "dapo_rllib.tasks.tools",
    "VLLMEnvRunner": "dapo_rllib.rollout.env_runner",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'dapo_rllib' has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)
