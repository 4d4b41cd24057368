"""Tests of what only the math environment does: scoring and scorers (shared interface: test_problem_env.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from dapo_rllib.tasks.data import generate_arithmetic_problems, problem_to_row, write_jsonl
from envs import MathEnv
from tests.support import naive_scorers
from tests.support.paths import AIME_2024


def _correct(ground_truth: str) -> str:
    return f"Let me think step by step.\nAnswer: {ground_truth}"


def test_correct_answer_gets_plus_one():
    env = MathEnv({"num_problems": 20})
    obs, info = env.reset()
    assert obs == [dict(m) for m in env.problem(info["problem_index"]).messages]
    assert set(info) == {"problem_index", "ground_truth", "data_source", "epoch", "tools"}
    assert info["tools"] == []  # answers only
    assert info["data_source"] == "arithmetic" and info["epoch"] == 0

    obs2, reward, terminated, truncated, step_info = env.step(_correct(info["ground_truth"]))
    assert obs2 == []  # nothing follows the answer
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert step_info == {
        "score": 1.0,
        "acc": True,
        "pred": info["ground_truth"],
        "ground_truth": info["ground_truth"],
        "data_source": "arithmetic",
        "scorer": "math_dapo",
        "score_timed_out": False,
    }


def test_wrong_answer_gets_minus_one():
    env = MathEnv({"num_problems": 20})
    _, info = env.reset()
    wrong = str(int(info["ground_truth"]) + 1)
    _, reward, terminated, _, step_info = env.step(_correct(wrong))
    assert reward == -1.0 and terminated
    assert step_info["acc"] is False and step_info["pred"] == wrong


def _mixed_source_file(tmp_path: Path) -> tuple[Path, list]:
    """Two arithmetic problems, the second relabelled as DAPO data."""
    problems = generate_arithmetic_problems("test", 2)
    rows = [problem_to_row(p) for p in problems]
    rows[1]["data_source"] = "math_dapo"
    path = tmp_path / "mixed.jsonl"
    write_jsonl(rows, path)
    return path, problems


def _step_infos(env: MathEnv, completion) -> list[dict]:
    """Step info of ``completion(ground_truth)`` for every problem, in dataset order."""
    infos = []
    for i in range(env.num_problems):
        env.reset(options={"problem_index": i})
        infos.append(env.step(completion(env.problem(i).ground_truth))[-1])
    return infos


def _with_trailing_period(ground_truth: str) -> str:
    # math_dapo scores "Answer: 12." wrong, math_verify right.
    return f"Answer: {ground_truth}."


def test_default_scorer_is_math_dapo(tmp_path):
    path, _ = _mixed_source_file(tmp_path)
    infos = _step_infos(MathEnv({"dataset": str(path), "shuffle": False}), _with_trailing_period)
    assert [(i["data_source"], i["scorer"], i["acc"]) for i in infos] == [
        ("arithmetic", "math_dapo", False),
        ("math_dapo", "math_dapo", False),
    ]


def test_scorer_for_all_data_sources(tmp_path):
    path, _ = _mixed_source_file(tmp_path)
    env = MathEnv({"dataset": str(path), "scorer": "math_verify"})
    infos = _step_infos(env, _with_trailing_period)
    assert [(i["scorer"], i["acc"], i["score"]) for i in infos] == [("math_verify", True, 1.0)] * 2


def test_scorer_per_data_source(tmp_path):
    path, problems = _mixed_source_file(tmp_path)
    by_import_path = "dapo_rllib.tasks.rewards.math_verify_scorer:compute_score"
    env = MathEnv({"dataset": str(path), "scorer": {"math_dapo": by_import_path}})
    infos = _step_infos(env, _with_trailing_period)
    assert [(i["data_source"], i["scorer"], i["acc"]) for i in infos] == [
        ("arithmetic", "math_dapo", False),  # not in the mapping: the default
        ("math_dapo", by_import_path, True),
    ]
    assert infos[1]["pred"] == problems[1].ground_truth


def test_scoring_without_timeout_gives_the_same_results():
    completions = [lambda gt: f"Answer: {gt}", lambda gt: "Answer: -1", lambda gt: "no answer"]
    for completion in completions:
        in_process = _step_infos(MathEnv({"num_problems": 4, "score_timeout_s": None}), completion)
        assert in_process == _step_infos(MathEnv({"num_problems": 4}), completion)


def test_scorer_timeout_counts_as_wrong_in_info():
    hanging = f"{naive_scorers.__name__}:catastrophic_regex"
    env = MathEnv({"num_problems": 2, "scorer": hanging, "score_timeout_s": 1.0})
    env.reset()
    _, reward, terminated, _, step_info = env.step("1" * 40 + "x")
    assert reward == -1.0 and terminated
    assert step_info["score_timed_out"] is True and step_info["scorer"] == hanging
    assert (step_info["acc"], step_info["pred"]) == (False, None)
    # The next completion is scored again, by a fresh scoring process.
    env.reset()
    _, reward, _, _, step_info = env.step("123")
    assert (reward, step_info["score_timed_out"], step_info["pred"]) == (1.0, False, "123")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"scorer": "math_dapp"}, r"unknown scorer 'math_dapp'.*\['math_dapo', 'math_verify'\]"),
        ({"scorer": {"arithmetic": "math_dapp"}}, "unknown scorer 'math_dapp'"),
        ({"scorer": "no_such_module:score"}, "no module named 'no_such_module'"),
        ({"scorer": 3}, r"'scorer' must be .*got 3$"),
        ({"scorer": ["math_verify"]}, r"'scorer' must be .*got \['math_verify'\]"),
        ({"scorer": {"arithmetic": 3}}, r"'scorer' must be .*got \{'arithmetic': 3\}"),
        ({"score_timeout_s": 0}, r"'score_timeout_s' must be .*got 0$"),
        ({"score_timeout_s": -1.5}, "got -1.5$"),
        ({"score_timeout_s": float("inf")}, "got inf$"),
        ({"score_timeout_s": "10"}, "got '10'$"),
        ({"score_timeout_s": True}, "got True$"),
    ],
)
def test_bad_scorer_config_fails_at_construction(config, message):
    with pytest.raises(ValueError, match=message):
        MathEnv({"num_problems": 3, **config})


def test_file_dataset(tmp_path):
    problems = generate_arithmetic_problems("test", 5)
    rows = [problem_to_row(p) for p in problems]
    rows[1]["data_source"] = "math_dapo"
    path = tmp_path / "eval.jsonl"
    write_jsonl(rows + rows, path)  # duplicates are removed on load

    env = MathEnv({"dataset": str(path), "shuffle": False})
    assert env.num_problems == 5
    for i in range(5):
        obs, info = env.reset()
        assert info["problem_index"] == i and obs[0]["content"] == problems[i].prompt_text
        _, reward, *_ = env.step(_correct(problems[i].ground_truth))
        assert reward == 1.0
    assert env.problem(1).data_source == "math_dapo"


def test_file_data_source_without_default_scorer_needs_one(tmp_path):
    rows = [problem_to_row(p) for p in generate_arithmetic_problems("test", 2)]
    rows[0]["data_source"] = "code_contests"
    path = tmp_path / "eval.jsonl"
    write_jsonl(rows, path)
    with pytest.raises(ValueError, match=r"code_contests.*math_dapo.*'scorer'"):
        MathEnv({"dataset": str(path)})
    # Choosing a scorer for the unknown data source makes the file usable.
    assert MathEnv({"dataset": str(path), "scorer": {"code_contests": "math_verify"}}).num_problems == 2


def test_aime_file_dataset():
    env = MathEnv({"dataset": AIME_2024})
    assert env.num_problems == 30
    counts = Counter(env.reset()[1]["problem_index"] for _ in range(60))
    assert set(counts.values()) == {2}
