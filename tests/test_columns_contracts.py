"""The typed contracts between DAPO's pieces (dapo_rllib.contracts) and the key names they use (columns.Info)."""

import pickle
import subprocess
import sys

import pytest

from dapo_rllib.columns import Extras, Info
from dapo_rllib.contracts import (
    EvalRecord,
    ProblemSamples,
    ResetInfo,
    ScoreInfo,
    ScoreResult,
    ToolStepInfo,
    check_score_result,
    score_info,
)


def test_info_names_are_the_keys_of_the_info_types():
    assert ScoreResult.__required_keys__ == {Info.SCORE, Info.ACC, Info.PRED}
    assert ScoreResult.__optional_keys__ == {Info.SCORE_TIMED_OUT, Info.BROKEN_TASK}
    assert ScoreInfo.__optional_keys__ == {
        Info.BROKEN_TASK,
        Info.INVALID_MOVES,
        Info.ENV_ERROR,
        Info.ENV_ERROR_MESSAGE,
        Info.OUTCOME,
    }
    assert ScoreInfo.__required_keys__ == {
        Info.SCORE,
        Info.ACC,
        Info.PRED,
        Info.SCORE_TIMED_OUT,
        Info.GROUND_TRUTH,
        Info.DATA_SOURCE,
    }
    assert ResetInfo.__required_keys__ == {
        Info.PROBLEM_INDEX,
        Info.GROUND_TRUTH,
        Info.DATA_SOURCE,
        Info.EPOCH,
        Info.TOOLS,
    }
    assert ToolStepInfo.__required_keys__ == {Info.TOOL_CALLS, Info.TOOL_ERRORS, Info.TOOL_S}
    # Every name of Info is a key of one of them.
    names = {value for name, value in vars(Info).items() if name.isupper()}
    assert names == ScoreInfo.__required_keys__ | ScoreInfo.__optional_keys__ | ResetInfo.__required_keys__ | (
        ToolStepInfo.__required_keys__
    )


def test_episode_extras_that_copy_the_info_have_its_names():
    copies = (
        Extras.SCORE,
        Extras.ACC,
        Extras.SCORE_TIMED_OUT,
        Extras.BROKEN_TASK,
        Extras.INVALID_MOVES,
        Extras.ENV_ERROR,
    )
    assert copies == (
        Info.SCORE,
        Info.ACC,
        Info.SCORE_TIMED_OUT,
        Info.BROKEN_TASK,
        Info.INVALID_MOVES,
        Info.ENV_ERROR,
    )


@pytest.mark.parametrize(
    "result",
    [
        {"score": 1.0, "acc": True, "pred": "5"},
        {"score": -1, "acc": 0, "pred": None, "tests_passed": 0},  # an int score, extra keys
        ScoreResult(score=0.5, acc=False, pred="PF", score_timed_out=True),
    ],
)
def test_check_score_result_accepts_a_score_result(result):
    assert check_score_result(result, "scorer 'x' returned") is result


@pytest.mark.parametrize(
    "result",
    [
        None,
        [1.0, True, "5"],
        {"score": 1.0, "acc": True},
        {"score": "1", "acc": True, "pred": "5"},
        {"score": 1.0, "acc": True, "pred": 5},
    ],
)
def test_check_score_result_refuses_anything_else_naming_its_source(result):
    with pytest.raises(TypeError) as error:
        check_score_result(result, "scorer 'x' returned")
    expected = "expected a mapping with 'score' (number), 'acc' (bool) and 'pred' (str or None)"
    assert str(error.value) == f"scorer 'x' returned {result!r}; {expected}"


def test_score_info_adds_the_problem_and_a_default_timeout_flag():
    rating = {"score": 1.0, "acc": True, "pred": "5", "scorer": "math_dapo"}
    assert score_info(rating, ground_truth="5", data_source="arithmetic") == {
        "score": 1.0,
        "acc": True,
        "pred": "5",
        "scorer": "math_dapo",
        "ground_truth": "5",
        "data_source": "arithmetic",
        "score_timed_out": False,
    }
    assert "ground_truth" not in rating  # not changed
    timed_out = ScoreResult(score=-1.0, acc=False, pred=None, score_timed_out=True)
    assert score_info(timed_out, ground_truth="5", data_source="arithmetic")[Info.SCORE_TIMED_OUT] is True


def _infos(accs, timed_out=None):
    timed_out = timed_out or [False] * len(accs)
    ratings = [
        ScoreResult(score=1.0 if a else -1.0, acc=a, pred="7" if a else None, score_timed_out=t)
        for a, t in zip(accs, timed_out)
    ]
    return [score_info(rating, ground_truth="7", data_source="aime") for rating in ratings]


def test_eval_record_from_infos():
    record = EvalRecord.from_infos(
        _infos([True, False], timed_out=[False, True]),
        problem_index=3,
        data_source="aime",
        ground_truth="7",
        length=(4, 9),
        truncated=(False, True),
        prompt_truncated=True,
        turns=(1, 3),
        tool_calls=(0, 2),
    )
    assert record == EvalRecord(
        data_source="aime",
        acc=[True, False],
        pred=["7", None],
        length=[4, 9],
        truncated=[False, True],
        timed_out=[False, True],
        problem_index=3,
        ground_truth="7",
        prompt_truncated=True,
        turns=[1, 3],
        tool_calls=[0, 2],
    )
    assert isinstance(record, ProblemSamples) and record.n == 2


def test_an_eval_record_travels_by_pickle():
    record = EvalRecord.from_infos(
        _infos([True]),
        problem_index=0,
        data_source="aime",
        ground_truth="7",
        length=[1],
        truncated=[False],
        prompt_truncated=False,
    )
    assert pickle.loads(pickle.dumps(record)) == record


def test_every_sample_field_needs_one_value_per_sample():
    with pytest.raises(ValueError, match=r"non-zero number of values per sample field, got \{'acc': 2, 'pred': 1"):
        ProblemSamples(
            data_source="x", acc=[True, False], pred=["1"], length=[1, 2], truncated=[False] * 2, timed_out=[False] * 2
        )
    with pytest.raises(ValueError, match="non-zero"):
        EvalRecord(
            data_source="x",
            acc=[],
            pred=[],
            length=[],
            truncated=[],
            timed_out=[],
            problem_index=0,
            ground_truth="1",
            prompt_truncated=False,
        )


def test_score_outcome_as_a_score_result():
    from dapo_rllib.tasks.rewards.scoring_process import TIMED_OUT, ScoreOutcome

    expected = {"score": 1.0, "acc": True, "pred": "5", "score_timed_out": False}
    assert ScoreOutcome(1.0, True, "5").as_result() == expected
    assert TIMED_OUT.as_result()[Info.SCORE_TIMED_OUT] is True


BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('ray', 'vllm', 'torch', 'numpy'):
            raise ModuleNotFoundError('blocked for this test: ' + name)
sys.meta_path.insert(0, Block())
import dapo_rllib.columns, dapo_rllib.contracts
"""


def test_the_contract_modules_import_without_ray_torch_or_numpy():
    out = subprocess.run([sys.executable, "-c", BLOCK], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
