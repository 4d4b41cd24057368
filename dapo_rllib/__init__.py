"""dapo-rllib: DAPO as a Ray RLlib algorithm.

`import dapo_rllib` registers the algorithm with Ray Tune as "DAPO" and the math environment as
"dapo_math". The pure math in `dapo_rllib.core_algos` needs only torch, so the package imports
without Ray too (nothing is registered then).
"""

import importlib.util

__version__ = "0.1.0"

if importlib.util.find_spec("ray") is not None:
    from dapo_rllib.registry import register_all

    register_all()
