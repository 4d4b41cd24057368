"""The turn loop: a round's episodes driven turn by turn, with vLLM for the model and the environment for
everything else.

Each turn generates for the episodes still running, in one batched vLLM call (a request per episode, with
its own seed), then hands each model turn to its episode's environment (on worker threads, each call with a
deadline, `dapo_rllib.rollout.env_calls`: tool calls run in the sandbox, scoring in the scoring process, a
game on its server, so the steps of a round overlap), then appends the
environment's messages as token ids rendered by the chat template (`dapo_rllib.tasks.chat_turns`). The ids the
model sampled are kept exactly, with vLLM's log-prob of each; earlier turns are never re-tokenized, and
vLLM's prefix cache keeps a turn from recomputing the context. A one-turn task is the same loop ending
after its first step.

An episode ends when its environment says so, at ``max_turns`` model turns, or when its token budget
(``max_response_length``, every token after the prompt: the model's and the environment's) is spent;
the env runner then asks the environment to rate the last turn (`ProblemEnv.finish`). An episode whose
environment fails (raises, times out: `dapo_rllib.tasks.env_failures`) ends there, marked with the failure, for
the algorithm to leave its group out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
from ray.rllib.core import DEFAULT_MODULE_ID

from dapo_rllib.columns import Info
from dapo_rllib.contracts import ScoreInfo, check_score_result, score_info
from dapo_rllib.rollout.env_calls import EnvCalls
from dapo_rllib.rollout.timing import RolloutTiming
from dapo_rllib.rollout.vllm_engine import decode_completions
from dapo_rllib.settings import FeatureSettings, is_positive_int, require
from dapo_rllib.tasks.chat_turns import TurnRenderer
from dapo_rllib.tasks.env_failures import EnvFailure
from dapo_rllib.tasks.problem_env import ProblemEnv
from dapo_rllib.tasks.tools import ToolCallParser, load_tool_call_parser

# Environment calls run at once: they mostly wait on child processes (the sandbox's pool, the scoring
# process) or servers, which bound the real parallelism themselves.
ENV_STEP_THREADS = 16


@dataclass(frozen=True)
class TurnSettings(FeatureSettings):
    """Episodes over several turns, and tools (`DAPOConfig.training`).

    Attributes:
        max_turns: Model turns an episode may take; at the last, the episode ends and its last turn is
            rated as the answer (`ProblemEnv.finish`). One-turn tasks end after one anyway. Default 8.
        tool_call_format: How tool calls are read from a model turn: "hermes" (Qwen2.5's
            `<tool_call>{json}</tool_call>`) or "package.module:Class" (`dapo_rllib.tasks.tools`).
        max_tool_response_tokens: A tool's output is cut to this many tokens before the model sees it.
            Default 256.
        env_timeout_s: Seconds an environment call (reset, a turn's step, finish) may take; past it the
            episode fails (`rollout/env_errors/timeout`). Default 120: a turn's tests in the sandbox, a game
            server's step, with room to spare.
        max_env_error_rate: The share of a step's episodes whose environment may fail (their groups are left
            out and replaced) before the run stops with an error naming the failures. Default 0.5.
    """

    max_turns: int = 8
    tool_call_format: str = "hermes"
    max_tool_response_tokens: int = 256
    env_timeout_s: float = 120.0
    max_env_error_rate: float = 0.5

    def validate(self) -> None:
        for name in ("max_turns", "max_tool_response_tokens"):
            require(is_positive_int(getattr(self, name)), f"{name}={getattr(self, name)!r} must be a positive integer")
        require(
            isinstance(self.env_timeout_s, (int, float)) and self.env_timeout_s > 0,
            f"env_timeout_s={self.env_timeout_s!r} must be a positive number of seconds",
        )
        require(
            isinstance(self.max_env_error_rate, (int, float)) and 0 <= self.max_env_error_rate <= 1,
            f"max_env_error_rate={self.max_env_error_rate!r} must be a share between 0 and 1",
        )
        try:
            load_tool_call_parser(self.tool_call_format)
        except (ValueError, ImportError, AttributeError) as error:
            raise ValueError(f"tool_call_format={self.tool_call_format!r}: {error}") from None


class EndReason(StrEnum):
    """Why an episode ended."""

    ENV = "env"  # the environment ended it (an answer, tests passed, ...)
    MAX_TURNS = "max_turns"  # the model had its max_turns turns
    BUDGET = "budget"  # the token budget (max_response_length) is spent
    ENV_ERROR = "env_error"  # the environment failed (`EpisodeRollout.failure`)


@dataclass
class Turn:
    """One model turn and what the environment answered."""

    model_ids: list[int]
    logp: list[float]  # vLLM's log-prob of each model token
    reward: float = 0.0
    info: Mapping[str, Any] = field(default_factory=dict)
    env_ids: list[int] = field(default_factory=list)  # the environment's tokens after this turn


@dataclass
class EpisodeRollout:
    """One episode in progress: its environment, its prompt and its turns so far.

    Attributes:
        env: The environment twin running this episode (reset already).
        problem_index: The index of its problem in the environment's dataset.
        prompt_ids: The prompt's ids.
        seed_stream: The episode's seed stream (`vllm_engine.request_seed`); the turn number is appended.
        renderer: Renders the environment's messages for this episode's tools.
        prompt_truncated: The prompt was left-truncated to max_prompt_length.
        policy: The policy that samples its turns: the trained one, or a league snapshot in a game.
    """

    env: ProblemEnv
    problem_index: int
    prompt_ids: list[int]
    seed_stream: tuple[int, ...]
    renderer: TurnRenderer
    prompt_truncated: bool = False
    policy: str = DEFAULT_MODULE_ID
    turns: list[Turn] = field(default_factory=list)
    end: EndReason | None = None
    final_info: ScoreInfo | None = None
    failure: EnvFailure | None = None  # what the environment failed with (end is ENV_ERROR)
    response_length: int = 0  # tokens after the prompt so far, the model's and the environment's
    budget_spent: bool = False  # a turn hit the token budget, or the environment's reply would have

    @property
    def response_ids(self) -> list[int]:
        """Every token after the prompt, model and environment, in order."""
        return [token for turn in self.turns for token in turn.model_ids + turn.env_ids]

    @property
    def truncated(self) -> bool:
        """The episode hit the token budget (whoever ended it: a one-turn task scores a cut answer too)."""
        return self.budget_spent

    @property
    def env_tokens(self) -> int:
        return sum(len(turn.env_ids) for turn in self.turns)

    @property
    def tool_calls(self) -> int:
        return sum(int(turn.info.get(Info.TOOL_CALLS, 0)) for turn in self.turns)

    @property
    def tool_errors(self) -> dict[str, int]:
        errors: dict[str, int] = {}
        for turn in self.turns:
            for kind, count in turn.info.get(Info.TOOL_ERRORS, {}).items():
                errors[kind] = errors.get(kind, 0) + count
        return errors

    def fail(self, failure: EnvFailure) -> None:
        """End the episode on its environment's failure: unscored (score 0, wrong), the failure in its info."""
        problem = self.env.problem(self.problem_index)
        self.end, self.failure = EndReason.ENV_ERROR, failure
        rating = {Info.SCORE: 0.0, Info.ACC: False, Info.PRED: None, Info.ENV_ERROR: failure.kind}
        rating[Info.ENV_ERROR_MESSAGE] = str(failure)
        self.final_info = score_info(rating, ground_truth=problem.ground_truth, data_source=problem.data_source)

    @property
    def first_acc(self) -> bool:
        """Whether the first answer was correct: the first turn the environment scored (the final verdict
        when none was scored before it)."""
        scored = next((turn.info for turn in self.turns if Info.ACC in turn.info), self.final_info)
        return bool(scored[Info.ACC])

    @property
    def answered_again(self) -> bool:
        """The environment scored more than one answer (it gave feedback and the model tried again)."""
        return sum(Info.ACC in turn.info for turn in self.turns) > 1


class TurnLoop:
    """Runs episodes to their end, a turn at a time.

    Args:
        generate: ``generate(prompts: list[list[int]], params: list[SamplingParams], policies: list[str])`` ->
            vLLM's outputs, each prompt sampled from its policy.
        make_params: ``make_params(seed, max_tokens, stop)`` -> the SamplingParams of one turn.
        tokenizer: The policy's tokenizer (texts are decoded with it for the environment).
        parser: Reads tool calls from a model turn (episodes whose environment has tools).
        max_turns: Model turns an episode may take.
        budget: Tokens an episode may have after its prompt (max_response_length).
        env_timeout_s: Seconds an environment call may take before its episode fails.
    """

    def __init__(
        self,
        *,
        generate: Callable,
        make_params: Callable,
        tokenizer: Any,
        parser: ToolCallParser,
        max_turns: int,
        budget: int,
        seed: Callable[[tuple[int, ...]], int],
        env_timeout_s: float,
    ):
        self.generate, self.make_params, self.tokenizer = generate, make_params, tokenizer
        self.parser, self.max_turns, self.budget, self.seed = parser, max_turns, budget, seed
        self.env_calls = EnvCalls(ENV_STEP_THREADS, env_timeout_s)

    def run(self, episodes: Sequence[EpisodeRollout], progress: Callable[[int], None] | None = None) -> RolloutTiming:
        """Drive ``episodes`` to their end; returns the round's timing. ``progress(n)`` is told of each n
        episodes that end."""
        timing = RolloutTiming()
        while active := [e for e in episodes if e.end is None]:
            completions = self.generate_turn(active, timing)
            messages = [self.model_message(e, c) for e, c in zip(active, completions)]
            results = self._step(active, messages, timing)
            ended = 0
            for episode, completion, result in zip(active, completions, results):
                self._record_step(episode, completion, result)
                ended += episode.end is not None
            if ended:
                start = time.perf_counter()
                self._finish_cut_episodes([e for e in active if e.end is not None and e.final_info is None])
                timing.scoring_s += time.perf_counter() - start
                if progress is not None:
                    progress(ended)
        return timing

    # ----- the phases of a turn ---------------------------------------------------------------------
    def generate_turn(self, active: Sequence[EpisodeRollout], timing: RolloutTiming) -> list:
        """One batched generation, a request per episode of `active` (its prompt and turns so far, its seed for
        this turn, the rest of its budget): each episode gets a `Turn` of the ids sampled and their log-probs.
        Returns vLLM's completions in `active`'s order."""
        prompts, params = [], []
        for episode in active:
            prompts.append(episode.prompt_ids + episode.response_ids)
            stop = self.parser.stop if episode.renderer.tools else ()
            seed = self.seed((*episode.seed_stream, len(episode.turns)))
            params.append(self.make_params(seed, self.budget - episode.response_length, stop))
        start = time.perf_counter()
        outputs = self.generate(prompts, params, [episode.policy for episode in active])
        timing.generation_s += time.perf_counter() - start
        completions = [output.outputs[0] for output in outputs]
        timing.generated_tokens += sum(len(c.token_ids) for c in completions)
        for episode, completion in zip(active, completions):
            if len(completion.logprobs.logprobs) != len(completion.token_ids):
                raise RuntimeError(
                    f"vLLM returned {len(completion.logprobs.logprobs)} log-probs for {len(completion.token_ids)} "
                    "sampled tokens"
                )
            episode.turns.append(Turn(list(completion.token_ids), list(completion.logprobs.logprobs)))
            episode.response_length += len(completion.token_ids)
        return completions

    def model_message(self, episode: EpisodeRollout, completion) -> dict[str, Any] | str:
        """The model's turn as the environment takes it: the text, and its tool calls where it has tools."""
        context = episode.prompt_ids + episode.response_ids[: -len(completion.token_ids) or None]
        (text,) = decode_completions(self.tokenizer, context, [completion])
        if not episode.renderer.tools:
            return text
        return {"role": "assistant", "content": text, "tool_calls": self.parser.parse(text)}

    def _step(self, active, messages, timing: RolloutTiming) -> list[tuple]:
        """Every episode's env.step, tool turns and answers timed apart; results in ``active``'s order."""
        results: list[tuple | None] = [None] * len(active)
        tool_turns = [i for i, m in enumerate(messages) if isinstance(m, dict) and m["tool_calls"]]
        answers = [i for i in range(len(active)) if i not in set(tool_turns)]
        for indices, phase in ((tool_turns, "tool_s"), (answers, "scoring_s")):
            start = time.perf_counter()
            stepped = self.env_calls.map(lambda i: active[i].env.step(messages[i]), indices)
            for i, result in zip(indices, stepped):
                results[i] = result if isinstance(result, EnvFailure) else _checked_step(active[i].env, result)
            setattr(timing, phase, getattr(timing, phase) + time.perf_counter() - start)
        return results

    def _record_step(self, episode: EpisodeRollout, completion, result: tuple | EnvFailure) -> None:
        """Record a step's outcome and decide whether the episode goes on."""
        if isinstance(result, EnvFailure):
            episode.fail(result)
            return
        messages, reward, terminated, truncated, info = result
        turn = episode.turns[-1]
        turn.reward, turn.info = float(reward), info
        episode.budget_spent |= completion.finish_reason == "length" or episode.response_length >= self.budget
        if terminated or truncated:
            episode.end, episode.final_info = EndReason.ENV, _final_info(episode.env, info)
            return
        if episode.budget_spent:
            episode.end = EndReason.BUDGET
            return
        if len(episode.turns) >= self.max_turns:
            episode.end = EndReason.MAX_TURNS
            return
        closing = episode.renderer.end_of_turn_ids() if isinstance(completion.stop_reason, str) else []
        env_ids = closing + episode.renderer.turn_ids(messages)
        # The model must have room for at least one token after the environment's.
        if episode.response_length + len(env_ids) >= self.budget:
            episode.end, episode.budget_spent = EndReason.BUDGET, True
            return
        turn.env_ids = env_ids
        episode.response_length += len(env_ids)

    def _finish_cut_episodes(self, episodes: Sequence[EpisodeRollout]) -> None:
        """Rate the last turn of each episode the loop stopped (``ProblemEnv.finish``)."""
        for episode, result in zip(episodes, self.env_calls.map(lambda e: e.env.finish(), episodes)):
            if isinstance(result, EnvFailure):
                episode.fail(result)
                continue
            reward, info = result
            episode.turns[-1].reward += float(reward)
            episode.final_info = _final_info(episode.env, info)


def _checked_step(env: ProblemEnv, result: Any) -> tuple:
    """What ``env.step`` returned, checked to be a Gymnasium step over chat messages."""
    name = type(env).__name__
    if not (isinstance(result, tuple) and len(result) == 5):
        raise TypeError(f"{name}.step() must return (messages, reward, terminated, truncated, info), got {result!r}")
    messages, reward, terminated, truncated, info = result
    if not isinstance(messages, list) or not all(_is_message(m) for m in messages):
        raise TypeError(
            f"{name}.step() returned messages {messages!r}; expected a list of {{'role': str, 'content': str}} dicts"
        )
    if not (terminated or truncated) and not messages:
        raise ValueError(
            f"{name}.step() returned no messages and did not end the episode: the model cannot take another turn "
            "without something new to answer; return the messages that follow the model's turn, or end the episode"
        )
    if not isinstance(reward, (int, float, np.floating, np.integer)) or isinstance(reward, bool):
        raise TypeError(f"{name}.step() returned reward {reward!r}; expected a number")
    if not isinstance(info, Mapping):
        raise TypeError(f"{name}.step() returned info {info!r}; expected a dict")
    return result


def _is_message(message: Any) -> bool:
    return (
        isinstance(message, Mapping)
        and isinstance(message.get("role"), str)
        and isinstance(message.get("content"), str)
    )


def _final_info(env: ProblemEnv, info: Mapping) -> ScoreInfo:
    return check_score_result(info, f"{type(env).__name__} ended an episode with info")
