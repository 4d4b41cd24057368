"""Language environments over a list of problems: the part that does not depend on the problems.

An episode is a Gymnasium episode over chat messages. ``reset()`` gives the first messages of a
problem (and, in its info, the schemas of the tools the model may call); ``step(model_message)``
takes the model's turn and returns the messages that follow it (tool results, feedback), a reward,
``terminated``/``truncated`` and an info. The episode ends on the environment's word, or when the
env runner stops it (``max_turns``, the token budget) and calls :meth:`ProblemEnv.finish`. A
single-step task is the one-turn case: its ``step`` scores the answer and ends the episode.

The base class's ``step`` runs the tool calls of a turn (:mod:`dapo_rllib.tasks.tools`) and answers with
their results; a turn without calls is an answer, scored by the subclass's ``score``; the
``feedback`` hook may then continue the episode (a wrong answer shown what went wrong) instead of
ending it. A trainer also uses an environment as a prompt source and a batch scorer:
:meth:`ProblemEnv.draw` gives the next problems of a seeded draw order, and
:meth:`ProblemEnv.score_many` rates completions of any problems.

:class:`ProblemEnv` owns the config keys, the problem list, the draw order and its checkpoint
state, the episode bookkeeping and the checks of what callers pass; a subclass only loads its
problems and rates a completion (see :class:`envs.math_env.MathEnv`,
:class:`envs.code_env.CodeEnv`, and "Your own task type" in the README).
"""

from __future__ import annotations

import copy
import numbers
import operator
import os
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import gymnasium
import numpy as np
from gymnasium import spaces

from dapo_rllib.columns import Info
from dapo_rllib.contracts import ResetInfo, ScoreInfo, ScoreResult, ToolStepInfo, check_score_result, score_info
from dapo_rllib.tasks.rewards.text import as_text
from dapo_rllib.tasks.tools import Tool, ToolCall, run_tool_calls

#: Config keys every problem environment has besides "dataset", and their defaults.
PROBLEM_CONFIG: dict[str, Any] = {"split": "train", "num_problems": None, "shuffle": True, "seed": 0}

_RESET_OPTIONS = (Info.PROBLEM_INDEX,)


def chat_spaces() -> tuple[spaces.Space, spaces.Space]:
    """(observation space, action space) of a language environment: chat messages in, the model's text out."""
    messages = spaces.Sequence(
        spaces.Dict(
            {
                "role": spaces.Text(max_length=64, charset=string.ascii_letters + "_"),
                "content": spaces.Text(min_length=0, max_length=100_000, charset=string.printable),
            }
        ),
        stack=False,
    )
    return messages, spaces.Text(min_length=0, max_length=1_000_000, charset=string.printable)


def checked_settings(owner: str, defaults: Mapping[str, Any], config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every key of `defaults`, with its value from `config` where given; an unknown key (a typo that would
    silently fall back to a default) is an error naming `owner`'s valid keys. Keys starting with "_" are
    the callers' and ignored."""
    # Ray passes an EnvContext, a dict subclass; plain dicts work the same.
    config = dict(config or {})
    unknown = sorted(k for k in config if not str(k).startswith("_") and k not in defaults)
    if unknown:
        raise ValueError(f"unknown {owner} config keys {unknown}; valid keys: {sorted(defaults)}")
    return {key: config.get(key, default) for key, default in defaults.items()}


class Problem(Protocol):
    """What an environment needs of a problem: the prompt, and what its info reports."""

    @property
    def messages(self) -> tuple[dict, ...]: ...

    @property
    def ground_truth(self) -> str: ...

    @property
    def data_source(self) -> str: ...


ProblemT = TypeVar("ProblemT", bound=Problem)


class ProblemEnv(gymnasium.Env, Generic[ProblemT]):
    """Single-step environment over a list of problems, drawn in a seeded order.

    A subclass sets the class attributes and implements :meth:`score` (or, to rate a batch at
    once, :meth:`score_batch`). One with config keys of its own checks them in its
    ``__init__(config)``: ``settings = self.settings(config)``, its checks, then
    ``super().__init__(settings)``.

    Config keys every subclass has (in its ``DEFAULT_CONFIG``: ``"dataset"`` and
    :data:`PROBLEM_CONFIG`):
        dataset: ``BUILTIN_DATASET`` for the built-in generator, or the path of a
            ``.jsonl``/``.parquet`` file.
        split: ``"train"`` or ``"test"`` split of the generator (ignored for files: pass
            another file for evaluation).
        num_problems: Number of generated problems (``None``: the whole split), the same ones
            for every seed. Not supported for files.
        shuffle: Draw problems in a fresh random order each epoch (else in dataset order).
        seed: Seed of the draw order.

    Keys starting with ``"_"`` are reserved for callers and ignored; any other unknown key is
    an error, so that a typo cannot silently fall back to a default.
    """

    #: Config keys and their defaults.
    DEFAULT_CONFIG: ClassVar[Mapping[str, Any]]
    #: Value of the "dataset" config key that selects the built-in generator.
    BUILTIN_DATASET: ClassVar[str]
    #: What the problems are called in error messages ("problems", "tasks").
    PROBLEMS_NOUN: ClassVar[str] = "problems"
    #: ``generate(split, num_problems)``: the built-in problems (a staticmethod).
    generate: ClassVar[Callable[[str, int | None], list]]
    #: ``load_file(path)``: the problems of a dataset file (a staticmethod).
    load_file: ClassVar[Callable[[str | os.PathLike[str]], list]]
    #: The tools the model may call (a subclass sets them, on the class or in ``__init__``); none: the model
    #: answers in one turn.
    tools: Sequence[Tool] = ()

    metadata: dict[str, Any] = {"render_modes": []}

    @classmethod
    def settings(cls, config: Mapping[str, Any] | None) -> dict[str, Any]:
        """Every ``DEFAULT_CONFIG`` key, with its value from ``config`` where given."""
        return checked_settings(cls.__name__, cls.DEFAULT_CONFIG, config)

    def __init__(self, config: Mapping[str, Any] | None = None):
        """Check ``config`` (see :meth:`settings`), load the problems and start the draw order."""
        settings = self.settings(config)
        self._problems: list[ProblemT] = self._load_problems(settings)
        if not self._problems:
            raise ValueError(f"{self._name} dataset {settings['dataset']!r} has no {self.PROBLEMS_NOUN}")

        self.observation_space, self.action_space = chat_spaces()

        self._shuffle = bool(settings["shuffle"])
        self._seed = settings["seed"]
        # The environment's own order, for `reset()` without a problem index and `draw()`: DAPO's env
        # runners always pass the index (their trainer owns the run's order, `new_draw_order`).
        self._order = DrawOrder(self.num_problems, self._shuffle, self._seed)
        # Index of the problem awaiting a step(), or None outside an episode.
        self._current: int | None = None
        # The text of the model's last turn, and its info where it was scored (for finish()).
        self._last_turn: tuple[str, ScoreInfo | None] | None = None

    def spawn(self) -> ProblemEnv:
        """A twin for one more episode at a time: it shares the problems, scorers and tools (and the draw
        order), and has an episode state of its own. The env runner runs a round's episodes on twins; a
        subclass whose episodes keep state of their own sets it in ``reset``."""
        twin = copy.copy(self)
        twin._current, twin._last_turn = None, None
        return twin

    @property
    def _name(self) -> str:
        return type(self).__name__

    @property
    def num_problems(self) -> int:
        """Number of (distinct) problems in the dataset."""
        return len(self._problems)

    def problem(self, i: int) -> ProblemT:
        """Problem ``i`` of the dataset."""
        return self._problems[self._check_index(i)]

    def draw(self, n: int) -> list[ProblemT]:
        """The next ``n`` problems of the draw order, the ones ``n`` calls of :meth:`reset` would give.

        Raises:
            ValueError: ``n`` is not a positive int.
        """
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n <= 0:
            raise ValueError(f"{self._name}.draw(n) needs a positive int n, got {n!r}")
        return [self._problems[i] for i in self._order.take(n)]

    def score_many(self, problems: Sequence[ProblemT], completions: Sequence[str | bytes]) -> list[ScoreInfo]:
        """Rate ``completions[k]`` as an answer to ``problems[k]``: one info dict per completion.

        A completion is text; bytes are decoded as UTF-8, with invalid sequences (and lone
        surrogates in a str) replaced by U+FFFD. Each info (a :class:`ScoreInfo`) holds ``score``
        (the reward), ``acc`` (correct), ``pred`` (the extracted answer, or None), ``score_timed_out``,
        ``ground_truth``, ``data_source`` and whatever else the subclass reports. Neither the
        draw order nor an episode in progress changes.

        Raises:
            ValueError: The two sequences differ in length.
            TypeError: A completion is neither str nor bytes.
        """
        if len(problems) != len(completions):
            raise ValueError(
                f"{self._name}.score_many needs one problem per completion, got {len(problems)} "
                f"problems and {len(completions)} completions"
            )
        texts = []
        for k, completion in enumerate(completions):
            try:
                texts.append(as_text(completion))
            except TypeError as error:
                raise TypeError(f"{self._name} completion {k}: {error}") from None
        ratings = self.score_batch(problems, texts)
        return [self._info(problem, rating) for problem, rating in zip(problems, ratings)]

    def score(self, problem: ProblemT, completion: str) -> ScoreResult:
        """Rate one completion: a :class:`ScoreResult` ``{"score": reward, "acc": correct, "pred": answer or
        None}``, plus ``"score_timed_out"`` where rating can time out and any other info keys."""
        raise NotImplementedError(
            f"{self._name} must implement score(problem, completion), or score_batch(problems, completions)"
        )

    def score_batch(self, problems: Sequence[ProblemT], completions: list[str]) -> list[ScoreResult]:
        """:meth:`score` of each pair; a subclass that rates many at once (in parallel) overrides it."""
        return [self.score(problem, completion) for problem, completion in zip(problems, completions)]

    def _info(self, problem: ProblemT, rating: ScoreResult) -> ScoreInfo:
        rating = check_score_result(rating, f"{self._name} rated a completion")
        return score_info(rating, ground_truth=problem.ground_truth, data_source=problem.data_source)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, str]], ResetInfo]:
        """Start an episode and return ``(prompt messages, info)``.

        Without options the next problem of the draw order is used; each
        epoch visits every problem once. ``options={"problem_index": i}``
        replays problem ``i`` without advancing the draw order. ``seed``
        re-seeds the order and restarts it from epoch 0.
        """
        super().reset(seed=seed)
        if seed is not None:
            self._order = DrawOrder(self.num_problems, self._shuffle, seed)
        options = options or {}
        unknown = sorted(set(options) - set(_RESET_OPTIONS))
        if unknown:
            raise ValueError(f"unknown {self._name} reset options {unknown}; valid options: {list(_RESET_OPTIONS)}")

        if Info.PROBLEM_INDEX in options:
            index = self._check_index(options[Info.PROBLEM_INDEX])
        else:
            (index,) = self._order.take(1)
        self._current = index
        problem = self._problems[index]
        self._last_turn = None
        info = ResetInfo(
            problem_index=index,
            ground_truth=problem.ground_truth,
            data_source=problem.data_source,
            epoch=self._order.epoch,
            tools=[tool.schema for tool in self.tools],
        )
        return self._messages(index), info

    def step(self, action: str | bytes | Mapping[str, Any]) -> tuple[list[dict], float, bool, bool, dict]:
        """Take the model's turn on the problem of :meth:`reset`.

        ``action`` is the turn's text (str, or UTF-8 bytes), or the assistant message the env runner makes
        of it: ``{"role": "assistant", "content": text, "tool_calls": [ToolCall, ...]}`` (the calls read by
        the ``tool_call_format`` parser; see :mod:`dapo_rllib.tasks.tools`).

        - A turn with tool calls, in an environment that has tools: each call runs (a failed call is an
          error message the model sees), the tool messages (``{"role": "tool", "name", "content"}``) come
          back with reward 0, and the episode goes on. The info is a :class:`ToolStepInfo`.
        - Any other turn is an answer, scored by ``score``: its info is :meth:`score_many`'s. When
          ``feedback`` has messages for it, they come back with reward 0 and the episode goes on;
          otherwise the episode terminates with the answer's score as the reward and no messages.
        """
        problem = self._episode_problem("step")
        text, calls = _model_turn(action, self._name)
        if calls and self.tools:
            results = run_tool_calls(calls, {tool.name: tool for tool in self.tools})
            self._last_turn = (text, None)
            messages = [
                {"role": "tool", "name": call.name or "invalid_call", "content": result.content}
                for call, result in zip(calls, results)
            ]
            errors: dict[str, int] = {}
            for result in results:
                if result.error is not None:
                    errors[result.error.value] = errors.get(result.error.value, 0) + 1
            info = ToolStepInfo(
                tool_calls=len(calls), tool_errors=errors, tool_s=sum(result.duration_s for result in results)
            )
            return messages, 0.0, False, False, info
        (info,) = self.score_many([problem], [text])
        feedback = self.feedback(problem, text, info)
        if feedback:
            self._last_turn = (text, info)
            return [dict(message) for message in feedback], 0.0, False, False, info
        self._current = None
        return [], info[Info.SCORE], True, False, info

    def finish(self) -> tuple[float, ScoreInfo]:
        """End an episode that the env runner stopped (``max_turns`` reached, or the token budget spent):
        the model's last turn is rated as its final answer. Returns that reward and info."""
        problem = self._episode_problem("finish")
        text, info = self._last_turn if self._last_turn is not None else ("", None)
        if info is None:
            (info,) = self.score_many([problem], [text])
        self._current = None
        return float(info[Info.SCORE]), info

    def feedback(self, problem: ProblemT, answer: str, info: ScoreInfo) -> Sequence[Mapping[str, str]] | None:
        """Messages that continue the episode after ``answer`` was rated ``info`` (the model tries again), or
        None to end it with that rating. One-turn tasks keep this default."""
        return None

    def _episode_problem(self, caller: str) -> ProblemT:
        if self._current is None:
            raise RuntimeError(f"{self._name}.{caller}() called without an active episode: call reset() first")
        return self._problems[self._current]

    def new_draw_order(self) -> DrawOrder:
        """A draw order from the start, as this environment's config defines it (its problems, ``shuffle``
        and ``seed``): the one a trainer owns when it tells the environments which problems to run."""
        return DrawOrder(self.num_problems, self._shuffle, self._seed)

    def get_state(self) -> dict[str, Any]:
        """Draw-order state (see :meth:`DrawOrder.get_state`), for checkpoints."""
        return self._order.get_state()

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`get_state` result, so the same prompts come next.

        Raises:
            ValueError: The state belongs to a dataset of another size.
        """
        order = DrawOrder.from_state(state)
        if order.num_problems != self.num_problems:
            raise ValueError(
                f"{self._name} state has a permutation of {order.num_problems} problems, "
                f"but this dataset has {self.num_problems}"
            )
        self._order = order

    def _messages(self, index: int) -> list[dict[str, str]]:
        """Fresh message dicts of problem ``index``, so callers cannot mutate the dataset."""
        return [dict(message) for message in self._problems[index].messages]

    def _check_index(self, i: Any) -> int:
        try:
            index = operator.index(i)
        except TypeError:
            raise TypeError(f"problem index must be an int, got {type(i).__name__} {i!r}") from None
        if not 0 <= index < self.num_problems:
            raise IndexError(f"problem index {index} out of range: the dataset has {self.num_problems} problems")
        return index

    def _load_problems(self, settings: Mapping[str, Any]) -> list[ProblemT]:
        dataset = settings["dataset"]
        if dataset == self.BUILTIN_DATASET:
            # The generator's own seed stays fixed: the problem set must depend
            # only on (split, num_problems), not on each env runner's draw seed.
            return self.generate(settings["split"], settings["num_problems"])
        if not isinstance(dataset, (str, os.PathLike)):
            raise TypeError(
                f"{self._name} 'dataset' must be {self.BUILTIN_DATASET!r} or a file path, got {type(dataset).__name__} {dataset!r}"
            )
        if settings["num_problems"] is not None:
            # Refused rather than ignored: truncating a file is the file's job.
            raise ValueError(
                f"{self._name} 'num_problems' applies to the {self.BUILTIN_DATASET!r} dataset only, "
                f"not to file {dataset!r}; pass a smaller file instead"
            )
        return self.load_file(dataset)


def _model_turn(action: Any, env_name: str) -> tuple[str, list[ToolCall]]:
    """(the turn's text, its tool calls) of a ``step`` action."""
    if isinstance(action, Mapping):
        if action.get("role") != "assistant" or not isinstance(action.get("content"), str):
            raise TypeError(
                f"{env_name}.step() takes a turn's text or an assistant message "
                f"{{'role': 'assistant', 'content': str, 'tool_calls': [...]}}, got {action!r}"
            )
        calls = list(action.get("tool_calls") or ())
        if not all(isinstance(call, ToolCall) for call in calls):
            raise TypeError(
                f"{env_name}.step(): tool_calls must be dapo_rllib.tasks.tools.ToolCall objects, got {calls!r}"
            )
        return action["content"], calls
    try:
        return as_text(action), []
    except TypeError as error:
        raise TypeError(f"{env_name}.step(): {error}") from None


class DrawOrder:
    """Which problem comes next: each epoch a seeded permutation of the problem indices (or
    the dataset order), visited once.

    One object owns a run's position in the data. An environment keeps one for
    :meth:`ProblemEnv.draw` and ``reset()``; DAPO keeps the training run's on the driver and
    tells its env runners which problems to sample, so that a replaced env runner cannot
    restart or repeat the epoch.
    """

    def __init__(self, num_problems: int, shuffle: bool, seed: int) -> None:
        self.num_problems, self.shuffle = num_problems, shuffle
        self._rng = np.random.default_rng(seed)
        self.epoch = 0
        self._permutation = self._new_permutation()
        self._cursor = 0

    def take(self, n: int) -> list[int]:
        """The next ``n`` problem indices, starting new epochs as the permutation runs out."""
        indices = []
        for _ in range(n):
            if self._cursor >= len(self._permutation):
                self.epoch += 1
                self._permutation = self._new_permutation()
                self._cursor = 0
            indices.append(int(self._permutation[self._cursor]))
            self._cursor += 1
        return indices

    def get_state(self) -> dict[str, Any]:
        """Cursor, epoch, permutation, RNG and whether it shuffles: all that decides what comes next."""
        return {
            "cursor": self._cursor,
            "epoch": self.epoch,
            "permutation": [int(i) for i in self._permutation],
            "rng_state": copy.deepcopy(self._rng.bit_generator.state),
            "shuffle": self.shuffle,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> DrawOrder:
        """The order a :meth:`get_state` result describes."""
        permutation = np.asarray(state["permutation"], dtype=np.int64)
        order = cls(len(permutation), bool(state["shuffle"]), seed=0)
        order._rng.bit_generator.state = copy.deepcopy(state["rng_state"])
        order._permutation = permutation
        order._cursor = int(state["cursor"])
        order.epoch = int(state["epoch"])
        return order

    def _new_permutation(self) -> np.ndarray:
        if self.shuffle:
            return self._rng.permutation(self.num_problems)
        return np.arange(self.num_problems)
