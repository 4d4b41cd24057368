"""Tests for the single-step math environment."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import naive_scorers
import pytest

from dapo_rllib.data import generate_arithmetic_problems, problem_to_row, write_jsonl
from envs import MathEnv


def _correct(ground_truth: str) -> str:
    return f"Let me think step by step.\nAnswer: {ground_truth}"


def _draw(env: MathEnv, n: int) -> list[int]:
    return [env.reset()[1]["problem_index"] for _ in range(n)]


def test_correct_answer_gets_plus_one():
    env = MathEnv({"num_problems": 20})
    obs, info = env.reset()
    assert obs == [dict(m) for m in env.problem(info["problem_index"]).messages]
    assert set(info) == {"problem_index", "ground_truth", "data_source", "epoch"}
    assert info["data_source"] == "arithmetic" and info["epoch"] == 0

    obs2, reward, terminated, truncated, step_info = env.step(_correct(info["ground_truth"]))
    assert obs2 == obs
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert step_info == {
        "score": 1.0,
        "acc": True,
        "pred": info["ground_truth"],
        "ground_truth": info["ground_truth"],
        "problem_index": info["problem_index"],
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


def test_observation_is_a_copy():
    env = MathEnv({"num_problems": 3})
    obs, info = env.reset()
    obs[0]["content"] = "tampered"
    assert env.problem(info["problem_index"]).prompt_text != "tampered"


def test_replay_by_problem_index_does_not_move_cursor():
    reference = MathEnv({"num_problems": 10, "seed": 5})
    expected = _draw(reference, 4)

    env = MathEnv({"num_problems": 10, "seed": 5})
    got = []
    for _ in range(4):
        _, info = env.reset()
        got.append(info["problem_index"])
        # G completions of the same prompt, each scored as its own episode.
        for completion in ("Answer: 0", _correct(info["ground_truth"])):
            obs, replay_info = env.reset(options={"problem_index": info["problem_index"]})
            assert replay_info["problem_index"] == info["problem_index"]
            assert obs[0]["content"] == env.problem(info["problem_index"]).prompt_text
            env.step(completion)
    assert got == expected


def test_bad_problem_index():
    env = MathEnv({"num_problems": 10})
    with pytest.raises(IndexError, match=r"problem index 10 .*10 problems"):
        env.reset(options={"problem_index": 10})
    with pytest.raises(IndexError, match="-1"):
        env.reset(options={"problem_index": -1})
    with pytest.raises(ValueError, match="problem_idx"):
        env.reset(options={"problem_idx": 0})


@pytest.mark.parametrize("shuffle", [True, False])
def test_each_epoch_covers_every_problem_once(shuffle):
    n = 7
    env = MathEnv({"num_problems": n, "shuffle": shuffle})
    epochs: dict[int, list[int]] = {}
    for _ in range(3 * n):
        _, info = env.reset()
        epochs.setdefault(info["epoch"], []).append(info["problem_index"])
    assert sorted(epochs) == [0, 1, 2]
    for order in epochs.values():
        assert sorted(order) == list(range(n))
    if shuffle:
        assert epochs[0] != epochs[1] or epochs[1] != epochs[2]
    else:
        assert all(order == list(range(n)) for order in epochs.values())


def test_seed_controls_order_and_reset_seed_restarts():
    a = _draw(MathEnv({"num_problems": 50, "seed": 1}), 50)
    b = _draw(MathEnv({"num_problems": 50, "seed": 2}), 50)
    assert a != b and sorted(a) == sorted(b)

    env = MathEnv({"num_problems": 50, "seed": 2})
    _draw(env, 13)
    _, info = env.reset(seed=1)
    assert info["epoch"] == 0
    assert [info["problem_index"]] + _draw(env, 49) == a


def test_problem_set_does_not_depend_on_seed():
    problems = [MathEnv({"num_problems": 5, "seed": s}).problem(0) for s in (0, 1)]
    assert problems[0] == problems[1]


def test_get_state_set_state_resumes_the_same_prompts():
    config = {"num_problems": 6, "seed": 11}
    uninterrupted = MathEnv(config)
    expected = [uninterrupted.reset()[0] for _ in range(20)]

    first = MathEnv(config)
    seen = [first.reset()[0] for _ in range(8)]  # mid-way through epoch 1
    state = first.get_state()

    resumed = MathEnv(config)
    _draw(resumed, 3)  # state of the fresh env must be overwritten entirely
    resumed.set_state(state)
    seen += [resumed.reset()[0] for _ in range(12)]
    assert seen == expected


def test_set_state_rejects_other_dataset_size():
    state = MathEnv({"num_problems": 6}).get_state()
    with pytest.raises(ValueError, match="6 problems"):
        MathEnv({"num_problems": 7}).set_state(state)


def test_step_requires_reset():
    env = MathEnv({"num_problems": 3})
    with pytest.raises(RuntimeError, match=r"reset\(\)"):
        env.step("Answer: 1")
    _, info = env.reset()
    env.step(_correct(info["ground_truth"]))
    with pytest.raises(RuntimeError, match=r"reset\(\)"):
        env.step(_correct(info["ground_truth"]))


def test_non_str_action():
    env = MathEnv({"num_problems": 3})
    env.reset()
    with pytest.raises(TypeError, match="int"):
        env.step(42)


def test_bytes_action_is_decoded_with_replacement():
    env = MathEnv({"num_problems": 3})
    _, info = env.reset()
    action = b"\xff\xfe not UTF-8 \xed\xa0\x80\nAnswer: " + info["ground_truth"].encode()
    _, reward, _, _, step_info = env.step(action)
    assert reward == 1.0 and step_info["pred"] == info["ground_truth"]


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
    by_import_path = "dapo_rllib.rewards.math_verify_scorer:compute_score"
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


def test_unknown_config_key_is_rejected_but_underscore_keys_pass():
    with pytest.raises(ValueError, match=r"num_problem\b.*num_problems"):
        MathEnv({"num_problem": 3})
    assert MathEnv({"num_problems": 3, "_caller_note": "x"}).num_problems == 3


def test_ray_env_context_config():
    env_context = pytest.importorskip("ray.rllib.env.env_context")
    config = env_context.EnvContext({"num_problems": 4, "split": "test"}, worker_index=1)
    env = MathEnv(config)
    assert env.num_problems == 4
    assert {env.problem(i) for i in range(4)} == set(generate_arithmetic_problems("test", 4))


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


def test_file_dataset_config_errors(tmp_path):
    rows = [problem_to_row(p) for p in generate_arithmetic_problems("test", 2)]
    path = tmp_path / "eval.jsonl"
    write_jsonl(rows, path)
    with pytest.raises(ValueError, match="num_problems"):
        MathEnv({"dataset": str(path), "num_problems": 1})

    rows[0]["data_source"] = "code_contests"
    write_jsonl(rows, path)
    with pytest.raises(ValueError, match=r"code_contests.*math_dapo.*'scorer'"):
        MathEnv({"dataset": str(path)})
    # Choosing a scorer for the unknown data source makes the file usable.
    assert MathEnv({"dataset": str(path), "scorer": {"code_contests": "math_verify"}}).num_problems == 2

    with pytest.raises(FileNotFoundError):
        MathEnv({"dataset": str(tmp_path / "missing.jsonl")})


def test_aime_file_dataset():
    env = MathEnv({"dataset": Path(__file__).parents[2] / "shared/data/aime-2024.parquet"})
    assert env.num_problems == 30
    counts = Counter(env.reset()[1]["problem_index"] for _ in range(60))
    assert set(counts.values()) == {2}
