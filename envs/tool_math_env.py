"""Tool-integrated arithmetic: math problems the model may solve with the ``python`` tool, over several turns.

The built-in problems (``dataset: "tool_arithmetic"``) multiply a three-digit number by a two-digit one,
which the tiny models cannot do in their heads but can hand to the tool and copy; a math dataset file
works too. The model calls ``python`` as often as it likes (each call's code runs in the bubblewrap
sandbox, its output comes back as a tool message) and ends the episode with an answer, scored like
:class:`envs.math_env.MathEnv`'s (the ``Answer:`` line, math_dapo).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dapo_rllib.tasks.data.tool_arithmetic import generate_tool_arithmetic_problems
from dapo_rllib.tasks.tools import python_tool
from envs.code_env import SANDBOX_CONFIG, sandbox_from_settings
from envs.math_env import DEFAULT_CONFIG as MATH_CONFIG
from envs.math_env import MathEnv

#: Value of the "dataset" config key that selects the built-in generator.
TOOL_ARITHMETIC_DATASET = "tool_arithmetic"

#: Config keys and their defaults: MathEnv's and the sandbox's (a tool run is short: 5 s, 256 MiB).
DEFAULT_CONFIG: dict[str, Any] = {
    **MATH_CONFIG,
    "dataset": TOOL_ARITHMETIC_DATASET,
    **SANDBOX_CONFIG,
    "timeout_s": 5.0,
    "memory_mb": 256,
}


class ToolMathEnv(MathEnv):
    """Math problems with the ``python`` tool (config keys: :class:`MathEnv`'s, with ``dataset``
    ``"tool_arithmetic"`` for the built-in products, and the sandbox's ``timeout_s``, ``memory_mb`` and
    ``max_workers`` for the tool's runs)."""

    DEFAULT_CONFIG = DEFAULT_CONFIG
    BUILTIN_DATASET = TOOL_ARITHMETIC_DATASET
    generate = staticmethod(generate_tool_arithmetic_problems)

    def __init__(self, config: Mapping[str, Any] | None = None):
        settings = self.settings(config)
        sandbox = sandbox_from_settings(settings, "ToolMathEnv")
        super().__init__(settings)
        self.tools = (python_tool(sandbox),)
