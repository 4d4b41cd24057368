"""Each registered algorithm besides DAPO trains one iteration through RLlib's loop (the vLLM env runner,
the learner, weight sync) and writes a checkpoint that names it and restores as no other algorithm.

The runs share this process's Ray session, their env runner and learner in this process, one algorithm after
another (each engine is freed when its algorithm stops). `tests/cli/test_cli.py` runs one of them (GSPO) through
the `rllib` command, and DAPO's own runs are in `tests/algorithm/test_dapo_integration.py`.
"""

import math
import re

import pytest

import dapo_rllib  # noqa: F401  (registers the environments and algorithms)
from dapo_rllib.algorithm.checkpoints import checkpoint_algorithm
from dapo_rllib.algorithm.dapo import DAPO
from dapo_rllib.algorithm.family import ALGORITHMS
from tests.support.runs import ONE_STEP

FAMILY = ["GRPO", "DrGRPO", "GSPO", "CISPO", "RLOO", "REINFORCE++"]


def one_step_config(name: str, model_path: str):
    """The algorithm's own defaults on the tiny task, one small step."""
    return (
        ALGORITHMS[name]
        .config_class()
        .environment("dapo_math", env_config={"dataset": "arithmetic", "split": "train"})
        .evaluation(val_before_train=False)
        .env_runners(num_env_runners=0)
        .training(model_path=model_path, **ONE_STEP)
    )


@pytest.fixture(scope="module")
def family_runs(ray_session, tiny_model_path, tmp_path_factory):
    """{name: (the result of the first iteration, the checkpoint after it)} for each algorithm."""
    runs = {}
    for name in FAMILY:
        algo = one_step_config(name, tiny_model_path).build_algo()
        try:
            result = algo.train()
            checkpoint = tmp_path_factory.mktemp("family") / name
            algo.save_to_path(str(checkpoint))
        finally:
            algo.stop()
        runs[name] = (result, checkpoint)
    return runs


@pytest.mark.parametrize("name", FAMILY)
def test_each_registered_algorithm_trains_and_names_its_checkpoint(family_runs, name):
    result, checkpoint = family_runs[name]
    assert result["training_iteration"] == 1
    assert math.isfinite(result["learners"]["default_policy"]["policy_loss"])
    assert checkpoint_algorithm(checkpoint) is ALGORITHMS[name]


@pytest.mark.parametrize("name", FAMILY)
def test_a_family_checkpoint_restores_as_no_other_algorithm(family_runs, name):
    # Refused before anything is built: its settings would silently become the other algorithm's.
    _, checkpoint = family_runs[name]
    following = FAMILY[(FAMILY.index(name) + 1) % len(FAMILY)]
    for other in (DAPO, ALGORITHMS[following]):
        with pytest.raises(
            ValueError, match=f"is a checkpoint of {re.escape(name)}.*cannot be restored as {re.escape(other.NAME)}"
        ):
            other.from_checkpoint(str(checkpoint))
