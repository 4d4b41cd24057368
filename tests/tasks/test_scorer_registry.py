"""Tests for the scorer registry in dapo_rllib.tasks.rewards."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dapo_rllib.tasks.rewards import DEFAULT_SCORER_BY_SOURCE, load_scorer, math_dapo, math_verify_scorer, scorer_for


def test_registered_names_load_their_functions():
    assert load_scorer("math_dapo") is math_dapo.compute_score
    assert load_scorer("math_verify") is math_verify_scorer.compute_score
    assert load_scorer("dapo_rllib.tasks.rewards.math_dapo:compute_score") is math_dapo.compute_score
    # Every default must be a loadable scorer.
    for spec in DEFAULT_SCORER_BY_SOURCE.values():
        assert callable(load_scorer(spec))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("math_dapp", r"unknown scorer 'math_dapp'.*\['math_dapo', 'math_verify'\]"),
        (
            "dapo_rllib.tasks.rewards.math_dapo",
            "unknown scorer 'dapo_rllib.tasks.rewards.math_dapo'.*package.module:function",
        ),
        ("no_such_package.scorers:score", "no module named 'no_such_package.scorers'"),
        ("dapo_rllib.tasks.rewards.math_dapo:no_such_function", "has no function 'no_such_function'"),
        ("dapo_rllib.tasks.rewards.math_dapo:RESPONSE_WINDOW_CHARS", "has no function 'RESPONSE_WINDOW_CHARS'"),
        (":compute_score", "unknown scorer ':compute_score'"),
    ],
)
def test_bad_specs_are_named_in_the_error(spec, message):
    with pytest.raises(ValueError, match=message):
        load_scorer(spec)


def test_non_string_spec():
    with pytest.raises(TypeError, match=r"got dict \{'a': 1\}"):
        load_scorer({"a": 1})


def test_scorer_for_choices():
    assert scorer_for("math_dapo", None) == "math_dapo"
    assert scorer_for("arithmetic", None) == "math_dapo"
    assert scorer_for("math_dapo", "math_verify") == "math_verify"
    assert scorer_for("anything", "my.module:score") == "my.module:score"
    per_source = {"math_dapo": "math_verify", "aime": "my.module:score"}
    assert scorer_for("math_dapo", per_source) == "math_verify"
    assert scorer_for("aime", per_source) == "my.module:score"
    assert scorer_for("arithmetic", per_source) == "math_dapo"  # not in it: default


def test_scorer_for_unknown_source_says_how_to_choose():
    with pytest.raises(
        ValueError,
        match=r"'code_contests'.*\['arithmetic', 'math_dapo', 'scratchpad_sums', 'tool_arithmetic'\].*'scorer'",
    ):
        scorer_for("code_contests", None)
    with pytest.raises(ValueError, match="'code_contests'"):
        scorer_for("code_contests", {"math_dapo": "math_verify"})


def test_scorer_for_bad_choice_type():
    with pytest.raises(TypeError, match=r"list \['math_verify'\]"):
        scorer_for("math_dapo", ["math_verify"])


BLOCK_HEAVY_IMPORTS = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('ray', 'torch', 'vllm'):
            raise ModuleNotFoundError('blocked for this test: ' + name)
sys.meta_path.insert(0, Block())
from dapo_rllib.tasks.rewards import load_scorer
print(load_scorer('math_dapo')('Answer: 5', '5')['score'])
"""


def test_registry_works_without_ray_or_torch():
    out = subprocess.run(
        [sys.executable, "-c", BLOCK_HEAVY_IMPORTS], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0"
