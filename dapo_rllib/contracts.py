"""The types that travel between DAPO's pieces, and the one check of each (key names: `dapo_rllib.columns`).

    ScoreResult     a verdict on one completion: what a scorer function returns (`dapo_rllib.tasks.rewards`) and
                    what a problem environment's `score` returns; checked by `check_score_result`
    ScoreInfo       the info of a scored completion (`ProblemEnv.score_many`, `step`): a ScoreResult with the
                    problem's ground truth and data source; built by `score_info`
    ResetInfo       the info of `ProblemEnv.reset`
    ToolStepInfo    the info of a `ProblemEnv.step` that ran the model's tool calls
    ProblemSamples  the n scored samples of one problem: what the validation metrics need
    EvalRecord      a ProblemSamples that also says which problem: what `VLLMEnvRunner.evaluate` returns, one
                    per problem (built by `EvalRecord.from_infos`); it travels between Ray processes

The infos are dicts (TypedDicts), as Gymnasium and RLlib's episodes keep them and as task types add keys of
their own; their keys are the names in `columns.Info`, so that code reads `info[Info.SCORE]`. Plain Python:
the scoring child process and the environments import this module without Ray.
"""

# No `from __future__ import annotations`: TypedDict needs NotRequired as an object, not a string, to
# tell required keys from optional ones.

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, NotRequired, Self, TypedDict, cast

from dapo_rllib.columns import Info

__all__ = [
    "EvalRecord",
    "ProblemSamples",
    "ResetInfo",
    "ScoreInfo",
    "ScoreResult",
    "ToolStepInfo",
    "check_score_result",
    "score_info",
]


class ScoreResult(TypedDict):
    """A verdict on one completion: a scorer's (``{"score", "acc", "pred"}``) or a task type's ``score``."""

    score: float  # the reward (+1.0 / -1.0 for the math scorers)
    acc: bool  # correct
    pred: str | None  # the extracted answer (None: none found); majority voting compares these
    score_timed_out: NotRequired[bool]  # rating ran out of time (scored wrong); absent: False
    broken_task: NotRequired[str | None]  # why the problem's own tests are broken (never trained on); absent: None


class ScoreInfo(TypedDict):
    """The info of a scored completion; a task type's own keys (``CodeEnv``'s ``tests_passed``, ...) come too."""

    score: float
    acc: bool
    pred: str | None
    score_timed_out: bool
    ground_truth: str
    data_source: str
    broken_task: NotRequired[str | None]  # set by task types whose tests can be broken (code)
    invalid_moves: NotRequired[int]  # set by games: moves the game refused in the episode
    env_error: NotRequired[str]  # the episode's environment failed (`dapo_rllib.tasks.env_failures`): the kind
    env_error_message: NotRequired[str]  # and what it said
    outcome: NotRequired[str]  # set by games of two players: "win", "draw" or "loss" for the player


class ResetInfo(TypedDict):
    """The info of ``ProblemEnv.reset``: which problem the episode is about, and the tools the model may call."""

    problem_index: int
    ground_truth: str
    data_source: str
    epoch: int
    tools: list[
        dict
    ]  # each tool's schema as chat templates take it (`dapo_rllib.tasks.tools.Tool.schema`); [] for none


class ToolStepInfo(TypedDict):
    """The info of a ``ProblemEnv.step`` that ran the model's tool calls (the episode goes on)."""

    tool_calls: int  # calls in the turn, malformed ones included
    tool_errors: dict[str, int]  # failed calls by kind (`dapo_rllib.tasks.tools.ToolErrorKind` values)
    tool_s: float  # seconds the calls took


_EXPECTED_RESULT = f"a mapping with {Info.SCORE!r} (number), {Info.ACC!r} (bool) and {Info.PRED!r} (str or None)"


def check_score_result(result: Any, source: str) -> ScoreResult:
    """``result``, checked to be a :class:`ScoreResult`: a mapping with a real-number ``score``, an ``acc`` and
    a ``pred`` that is a str or None (other keys are allowed).

    Args:
        result: What a scorer or a task type's ``score`` returned.
        source: Who returned it, to start the error message ("scorer 'math_dapo' returned").

    Raises:
        TypeError: It is not a ScoreResult.
    """
    if not (
        isinstance(result, Mapping)
        and {Info.SCORE, Info.ACC, Info.PRED} <= result.keys()
        and isinstance(result[Info.SCORE], numbers.Real)
        and (result[Info.PRED] is None or isinstance(result[Info.PRED], str))
    ):
        raise TypeError(f"{source} {result!r}; expected {_EXPECTED_RESULT}")
    return cast(ScoreResult, result)


def score_info(rating: ScoreResult, *, ground_truth: str, data_source: str) -> ScoreInfo:
    """The info of a completion rated ``rating``: its keys (a task type's own too), the problem's ground truth and
    data source, and ``score_timed_out`` (False unless ``rating`` says otherwise)."""
    info: dict[str, Any] = {**rating, Info.GROUND_TRUTH: ground_truth, Info.DATA_SOURCE: data_source}
    info.setdefault(Info.SCORE_TIMED_OUT, False)
    return cast(ScoreInfo, info)


# Marks the fields of ProblemSamples that hold one value per sample.
_PER_SAMPLE = "per_sample"


@dataclass(frozen=True)
class ProblemSamples:
    """The n samples drawn for one problem, scored.

    Attributes:
        data_source: Which data source the problem belongs to (metrics are per source).
        acc: Whether each sample is correct.
        pred: The answer extracted from each sample (None: none found); the majority vote
            counts equal strings as the same answer.
        length: Response length of each sample in tokens.
        truncated: Whether each sample hit the generation limit.
        timed_out: Whether scoring each sample hit the scoring timeout (scored wrong).
        turns: Model turns of each sample's episode (keyword only; empty: not reported).
        tool_calls: Tool calls in each sample's episode (keyword only; empty: not reported).
        invalid_moves: Moves the game refused in each sample's episode (keyword only; empty: not a game).
        env_errors: The kind of failure each sample's environment ended in, "" for none (keyword only; empty:
            none failed). A failed sample counts as wrong.
        first_acc: Whether each sample's first answer was correct (keyword only; empty: the first answer
            was the last). In a task with feedback the model may answer again; ``acc`` is of its last answer.
        outcomes: A game of two players: each sample's result for the model's side, an ``Outcome`` value ("" where
            its environment failed) (keyword only; empty: not such a game).
        broken_task: Why the problem's own tests are broken (keyword only; "": they are not). Its samples
            count as wrong.
    """

    data_source: str
    acc: Sequence[bool] = field(metadata={_PER_SAMPLE: True})
    pred: Sequence[str | None] = field(metadata={_PER_SAMPLE: True})
    length: Sequence[int] = field(metadata={_PER_SAMPLE: True})
    truncated: Sequence[bool] = field(metadata={_PER_SAMPLE: True})
    timed_out: Sequence[bool] = field(metadata={_PER_SAMPLE: True})
    turns: Sequence[int] = field(default_factory=list, kw_only=True, metadata={_PER_SAMPLE: True})
    tool_calls: Sequence[int] = field(default_factory=list, kw_only=True, metadata={_PER_SAMPLE: True})
    invalid_moves: Sequence[int] = field(default_factory=list, kw_only=True, metadata={_PER_SAMPLE: True})
    env_errors: Sequence[str] = field(default_factory=list, kw_only=True, metadata={_PER_SAMPLE: True})
    first_acc: Sequence[bool] = field(default_factory=list, kw_only=True, metadata={_PER_SAMPLE: True})
    outcomes: Sequence[str] = field(default_factory=list, kw_only=True, metadata={_PER_SAMPLE: True})
    broken_task: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        sizes = {
            f.name: len(getattr(self, f.name))
            for f in fields(self)
            if f.metadata.get(_PER_SAMPLE) and (f.default_factory is MISSING or getattr(self, f.name))
        }
        if len(set(sizes.values())) != 1 or not self.n:
            raise ValueError(f"a problem needs the same, non-zero number of values per sample field, got {sizes}")

    @property
    def n(self) -> int:
        return len(self.acc)


@dataclass(frozen=True)
class EvalRecord(ProblemSamples):
    """One problem's scored samples and which problem it is (``VLLMEnvRunner.evaluate`` gives one per problem).

    Attributes (besides :class:`ProblemSamples`'):
        problem_index: The problem's index in the validation dataset.
        ground_truth: Its reference answer.
        prompt_truncated: Its prompt was longer than max_prompt_length and was left-truncated.
    """

    problem_index: int
    ground_truth: str
    prompt_truncated: bool

    @classmethod
    def from_infos(
        cls,
        infos: Sequence[ScoreInfo],
        *,
        problem_index: int,
        data_source: str,
        ground_truth: str,
        length: Sequence[int],
        truncated: Sequence[bool],
        prompt_truncated: bool,
        turns: Sequence[int] = (),
        tool_calls: Sequence[int] = (),
        first_acc: Sequence[bool] = (),
    ) -> Self:
        """The record of a problem whose samples were scored ``infos`` (``ProblemEnv.score_many``), with each
        sample's ``length`` in tokens, whether it was ``truncated``, and its ``turns`` and ``tool_calls``; a game's
        ``invalid_moves`` and ``outcomes`` and the failures of environments come from the infos."""
        return cls(
            problem_index=problem_index,
            data_source=data_source,
            ground_truth=ground_truth,
            acc=[bool(info[Info.ACC]) for info in infos],
            pred=[info[Info.PRED] for info in infos],
            length=list(length),
            truncated=list(truncated),
            timed_out=[bool(info[Info.SCORE_TIMED_OUT]) for info in infos],
            prompt_truncated=prompt_truncated,
            turns=list(turns),
            tool_calls=list(tool_calls),
            invalid_moves=_where_any(infos, Info.INVALID_MOVES, 0),
            env_errors=_where_any(infos, Info.ENV_ERROR, ""),
            first_acc=list(first_acc),
            outcomes=_where_any(infos, Info.OUTCOME, ""),
            broken_task=next((info[Info.BROKEN_TASK] for info in infos if info.get(Info.BROKEN_TASK)), ""),
        )


def _where_any(infos: Sequence[ScoreInfo], key: str, absent: Any) -> list:
    """Each info's ``key`` (``absent`` where it has none), or [] when no info has it."""
    return [info.get(key, absent) for info in infos] if any(key in info for info in infos) else []
