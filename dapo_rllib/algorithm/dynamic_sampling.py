"""Dynamic sampling (docs/design/algorithm.md §2.2): generation rounds until a step has enough informative groups.

`GroupSampler` is the algorithm's side of sampling. It owns the training data's position (the
draw order) and numbers the groups, so that a replaced env runner neither restarts nor repeats
the epoch and a group's sampling seed follows from its id alone. Each round draws the next
problems, has the env runners sample and score them (the `sample` callable, see
`dapo_rllib.rollout.env_runner_group`), and keeps the groups whose `filter_metric` varies: a group all
right or all wrong has zero advantage everywhere and would only dilute the batch. A group with an episode
whose environment failed (`dapo_rllib.tasks.env_failures`) is left out first, and more problems are drawn in
its place; past `max_env_error_rate` failed episodes in a step, the run stops.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from typing import Any, Protocol

import numpy as np
import torch
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, TIMERS
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from dapo_rllib.algorithm import core_algos
from dapo_rllib.algorithm.connectors import episode_value
from dapo_rllib.columns import Extras, Info, Metrics
from dapo_rllib.rollout.env_runner_group import SampleReport
from dapo_rllib.rollout.turn_loop import EndReason
from dapo_rllib.settings import FeatureSettings, is_positive_int, require
from dapo_rllib.tasks.env_failures import ENV_ERROR_KINDS
from dapo_rllib.tasks.problem_env import DrawOrder
from dapo_rllib.tasks.tools import ToolErrorKind

logger = logging.getLogger(__name__)

FILTER_METRICS = {"acc": Extras.ACC, "score": Extras.SCORE}  # filter_metric setting -> episode extra
DRAW_ORDER = "draw_order"  # checkpoint key: the training data's position and the next group id


@dataclasses.dataclass(frozen=True)
class SamplingSettings(FeatureSettings):
    """Groups and dynamic sampling (docs/design/algorithm.md §2.2), `DAPOConfig.training`.

    Attributes:
        group_size: G, completions sampled per prompt. Reference 16.
        train_batch_size_prompts: Prompts (groups) per training step. Reference 512.
        gen_batch_size_prompts: Prompts per generation round. Reference 1536.
        max_num_gen_batches: Generation rounds allowed per step before dynamic sampling gives up.
            Reference 10.
        dynamic_sampling: Keep only groups whose `filter_metric` varies. Off: one round of
            `train_batch_size_prompts` prompts, every group kept.
        filter_metric: "acc" (correctness, reference) or "score" (the verifier's reward, before
            length shaping).
        filter_band: (low, high): dynamic sampling also drops groups whose mean `filter_metric` is not
            strictly inside it (e.g. (0.1, 0.9): nearly solved or nearly failed prompts). None
            (default): no band.
        filter_min_std: Dynamic sampling also drops groups whose `filter_metric` has a population std
            below this. Default 0.0: any spread.
        train_on_partial_batch: When the round cap is hit, train on the groups collected (trimmed to
            whole mini-batches) instead of raising.
    """

    group_size: int = 16
    train_batch_size_prompts: int = 512
    gen_batch_size_prompts: int = 1536
    max_num_gen_batches: int = 10
    dynamic_sampling: bool = True
    filter_metric: str = "acc"
    filter_band: tuple[float, float] | None = None
    filter_min_std: float = 0.0
    train_on_partial_batch: bool = False

    def validate(self) -> None:
        require(
            is_positive_int(self.group_size) and self.group_size >= 2,
            f"group_size={self.group_size} must be >= 2: a group of one has zero advantage",
        )
        for name in ("train_batch_size_prompts", "gen_batch_size_prompts", "max_num_gen_batches"):
            require(is_positive_int(getattr(self, name)), f"{name}={getattr(self, name)!r} must be a positive integer")
        require(
            self.filter_metric in FILTER_METRICS,
            f"filter_metric={self.filter_metric!r}; expected one of {sorted(FILTER_METRICS)}",
        )
        require(
            self.filter_band is None or (len(self.filter_band) == 2 and self.filter_band[0] < self.filter_band[1]),
            f"filter_band={self.filter_band!r} must be (low, high) with low < high, or None",
        )
        require(
            isinstance(self.filter_min_std, (int, float)) and self.filter_min_std >= 0,
            f"filter_min_std={self.filter_min_std!r} must be >= 0",
        )


@dataclasses.dataclass(frozen=True)
class CollectSettings:
    """What `GroupSampler` reads of the algorithm's config, mapped from a `DAPOConfig` in one place
    (`from_config`), so that a setting renamed there breaks the mapping, not the sampler.

    Attributes:
        sampling: The groups a step collects, and dynamic sampling's filter.
        max_env_error_rate: The share of a step's episodes whose environment may fail (`TurnSettings`).
        minibatch_size_prompts, num_learners: A partial batch is cut to whole mini-batches, or to a multiple of
            the learners (each takes whole groups).
    """

    sampling: SamplingSettings
    max_env_error_rate: float
    minibatch_size_prompts: int
    num_learners: int

    @classmethod
    def from_config(cls, config) -> CollectSettings:
        return cls(
            sampling=config.sampling_settings,
            max_env_error_rate=config.max_env_error_rate,
            minibatch_size_prompts=config.minibatch_size_prompts,
            num_learners=config.num_learners,
        )


@dataclasses.dataclass(frozen=True)
class Group:
    """The episodes sampled for one prompt (one problem, one group id, one seed stream): the unit that
    advantages are computed over and that dynamic sampling keeps or drops whole."""

    group_id: int
    episodes: list

    def __len__(self) -> int:
        return len(self.episodes)

    def values(self, key: str) -> np.ndarray:
        """Each episode's extra `key` (`columns.Extras`)."""
        return np.array([episode_value(ep, key) for ep in self.episodes])


class Fleet(Protocol):
    """Where the rounds are sampled: the env runners in service (`dapo_rllib.algorithm.runner_fleet`)."""

    def sample(self, requests: list[tuple[int, int]], metrics: MetricsLogger) -> list[SampleReport]: ...


class GroupSampler:
    """Generation rounds on `fleet` of the problems `draw_order` gives, kept as informative groups."""

    def __init__(self, settings: CollectSettings, fleet: Fleet, draw_order: DrawOrder, groups_per_request: int = 1):
        self.settings = settings
        self._fleet = fleet
        self._draw_order = draw_order
        self._next_group_id = 0  # the next request's id (its groups' ids follow from it)
        # A request is a group, or one per seat the trained policy plays in a game (`rollout.game_sampling`).
        self._groups_per_request = groups_per_request

    def collect(self, metrics: MetricsLogger) -> list[Group]:
        """Generation rounds until `train_batch_size_prompts` informative groups (or one round of
        that many prompts without dynamic sampling); their metrics go to `metrics`."""
        sampling = self.settings.sampling
        kept: list[Group] = []
        generated: list[Group] = []
        rounds = 0
        metrics.log_value((Metrics.ROLLOUT, Metrics.ENV_RUNNERS_LOST), 0, reduce="sum")
        num_prompts = (
            sampling.gen_batch_size_prompts if sampling.dynamic_sampling else sampling.train_batch_size_prompts
        )
        while len(kept) < sampling.train_batch_size_prompts and rounds < sampling.max_num_gen_batches:
            rounds += 1
            groups = group_episodes(self._round(num_prompts, metrics))
            generated.extend(groups)
            groups = without_broken_tasks(without_failed_environments(groups))
            if not sampling.dynamic_sampling:
                kept.extend(groups)
                # Groups left out (a failed environment, a broken task) are replaced: draw that many more.
                num_prompts = sampling.train_batch_size_prompts - len(kept)
                continue
            kept.extend(
                informative_groups(
                    groups, FILTER_METRICS[sampling.filter_metric], sampling.filter_band, sampling.filter_min_std
                )
            )
            scored = sum(len(g) for g in groups)
            logger.info(
                f"[DAPO] generation round {rounds}: {scored} samples scored, "
                f"{len(kept)} informative groups (need {sampling.train_batch_size_prompts})"
            )

        generation_s = metrics.peek((TIMERS, Metrics.GENERATION_S))
        tokens_per_s = metrics.peek((Metrics.ROLLOUT, Metrics.GENERATED_TOKENS)) / max(generation_s, 1e-9)
        metrics.log_value((TIMERS, Metrics.GENERATION_TOKENS_PER_S), tokens_per_s, window=1)
        check_env_error_rate(generated, self.settings.max_env_error_rate)
        informative = len(kept)
        if informative < sampling.train_batch_size_prompts:
            kept = self._partial_batch_or_raise(kept, generated, rounds)
        kept = kept[: sampling.train_batch_size_prompts]
        self._log_rollout_metrics(generated, informative, len(kept), rounds, metrics)
        return kept

    def collect_with_stats(self) -> tuple[list[Group], dict]:
        """`collect` with a logger of its own, returned reduced, to be merged into the algorithm's
        with `aggregate` by the main thread: safe in async_rollout's generation thread (RLlib's
        MetricsLogger is not thread-safe), and used for every collection of an async run, since a
        key cannot be both logged and merged into. Its rollout metrics are of the batch
        generated, trained the step after."""
        metrics = MetricsLogger(root=True)
        groups = self.collect(metrics)
        return groups, metrics.reduce()

    def _round(self, num_prompts: int, metrics: MetricsLogger) -> list:
        """One generation round: the groups of `num_prompts` prompts, from the next problems of the draw order."""
        num_requests = -(-num_prompts // self._groups_per_request)
        first = self._next_group_id
        self._next_group_id += num_requests
        requests = list(zip(self._draw_order.take(num_requests), range(first, first + num_requests)))
        reports = self._fleet.sample(requests, metrics)
        metrics.aggregate([report.metrics for report in reports], key=ENV_RUNNER_RESULTS)
        # Runners generate in parallel: a round takes as long as its slowest runner.
        for key, phase in (
            (Metrics.GENERATION_S, "generation_s"),
            (Metrics.TOOL_S, "tool_s"),
            (Metrics.SCORING_S, "scoring_s"),
        ):
            metrics.log_value((TIMERS, key), max(getattr(report.timing, phase) for report in reports), reduce="sum")
        tokens = sum(report.timing.generated_tokens for report in reports)
        metrics.log_value((Metrics.ROLLOUT, Metrics.GENERATED_TOKENS), tokens, reduce="sum")
        return [ep for report in reports for ep in report.episodes]

    def _partial_batch_or_raise(self, kept: list[Group], generated: list[Group], rounds: int) -> list[Group]:
        sampling, minibatch = self.settings.sampling, self.settings.minibatch_size_prompts
        fraction = len(kept) / max(len(generated), 1)
        whole = (len(kept) // minibatch) * minibatch or len(kept) - len(kept) % max(self.settings.num_learners, 1)
        if not sampling.train_on_partial_batch or not whole:
            accs = [g.values(Extras.ACC).astype(bool) for g in generated]
            samples = sum(len(a) for a in accs)
            raise RuntimeError(
                f"Dynamic sampling collected {len(kept)} of train_batch_size_prompts="
                f"{sampling.train_batch_size_prompts} informative groups in max_num_gen_batches="
                f"{sampling.max_num_gen_batches} generation rounds: only {fraction:.1%} of the "
                f"{len(generated)} generated groups had a varying '{sampling.filter_metric}'. The model's accuracy "
                f"was {sum(a.sum() for a in accs) / max(samples, 1):.1%} over the {samples} samples "
                f"({sum(not a.any() for a in accs)} groups all wrong, {sum(a.all() for a in accs)} all right): "
                "the tasks are too hard for it (near 0%) or too easy (near 100%); choose tasks where it "
                "sometimes succeeds, or raise max_num_gen_batches or gen_batch_size_prompts, or set "
                "train_on_partial_batch=True to train on what was collected."
            )
        logger.info(f"[DAPO] round cap reached: training on a partial batch of {whole} groups ({fraction:.1%} kept)")
        return kept[:whole]

    def _log_rollout_metrics(
        self, generated: list[Group], informative: int, trained: int, rounds: int, metrics: MetricsLogger
    ) -> None:
        episodes = [ep for g in generated for ep in g.episodes]
        model_tokens = np.array([sum(len(ep.get_actions(t)) for t in range(len(ep))) for ep in episodes])
        env_tokens = np.array([episode_value(ep, Extras.ENV_TOKENS) for ep in episodes])
        lengths = model_tokens + env_tokens
        turns = np.array([episode_value(ep, Extras.TURNS) for ep in episodes])
        accs = [g.values(Extras.ACC) for g in generated]
        values = {
            Metrics.GENERATION_ROUNDS: rounds,
            Metrics.GROUPS_GENERATED: len(generated),
            Metrics.GROUPS_KEPT: trained,
            Metrics.GROUPS_KEPT_FRACTION: informative / max(len(generated), 1),
            Metrics.PARTIAL_BATCH: int(trained < self.settings.sampling.train_batch_size_prompts),
            Metrics.GROUPS_ALL_CORRECT_FRACTION: float(np.mean([a.min() == 1 for a in accs])),
            Metrics.GROUPS_ALL_WRONG_FRACTION: float(np.mean([a.max() == 0 for a in accs])),
            Metrics.TRUNCATION_RATIO: float(np.mean([bool(episode_value(ep, Extras.TRUNCATED)) for ep in episodes])),
            Metrics.SCORING_TIMEOUTS: sum(bool(episode_value(ep, Extras.SCORE_TIMED_OUT)) for ep in episodes),
            Metrics.BROKEN_TASKS: sum(any(g.values(Extras.BROKEN_TASK)) for g in generated),
            Metrics.RESPONSE_LENGTH_MEAN: float(lengths.mean()),
            Metrics.RESPONSE_LENGTH_MAX: int(lengths.max()),
            Metrics.REWARD_MEAN: float(np.mean([ep.get_return() for ep in episodes])),
            Metrics.SCORE_MEAN: float(np.mean([episode_value(ep, Extras.SCORE) for ep in episodes])),
            Metrics.ACC_MEAN: float(np.mean([episode_value(ep, Extras.ACC) for ep in episodes])),
            Metrics.TURNS_MEAN: float(turns.mean()),
            Metrics.TURNS_MAX: int(turns.max()),
            Metrics.TOOL_CALLS: float(np.mean([episode_value(ep, Extras.TOOL_CALLS) for ep in episodes])),
            Metrics.MODEL_TOKENS_MEAN: float(model_tokens.mean()),
            Metrics.ENV_TOKENS_MEAN: float(env_tokens.mean()),
        }
        for key, value in values.items():
            metrics.log_value((Metrics.ROLLOUT, key), value, window=1)
        end_reasons = [episode_value(ep, Extras.END_REASON) for ep in episodes]
        for reason in EndReason:
            share = end_reasons.count(str(reason)) / len(episodes)
            metrics.log_value((Metrics.ROLLOUT, Metrics.ENDED_BY, str(reason)), share, window=1)
        errors: dict[str, int] = {str(kind): 0 for kind in ToolErrorKind}
        for ep in episodes:
            for kind, count in episode_value(ep, Extras.TOOL_ERRORS).items():
                errors[kind] = errors.get(kind, 0) + count
        for kind, count in errors.items():
            metrics.log_value((Metrics.ROLLOUT, Metrics.TOOL_ERRORS, kind), count, window=1)
        env_errors = dict.fromkeys(ENV_ERROR_KINDS, 0) | env_error_counts(generated)
        for kind, count in env_errors.items():
            metrics.log_value((Metrics.ROLLOUT, Metrics.ENV_ERRORS, kind), count, window=1)
        dropped = sum(any(g.values(Extras.ENV_ERROR)) for g in generated)
        metrics.log_value((Metrics.ROLLOUT, Metrics.GROUPS_DROPPED_ENV_ERROR), dropped, window=1)
        invalid_moves = float(np.mean([episode_value(ep, Extras.INVALID_MOVES) for ep in episodes]))
        metrics.log_value((Metrics.ROLLOUT, Metrics.INVALID_MOVES), invalid_moves, window=1)

    # ----- state: the training data's position ---------------------------------------------
    def get_state(self) -> dict[str, Any]:
        return {DRAW_ORDER: {"order": self._draw_order.get_state(), "next_group_id": self._next_group_id}}

    def set_state(self, state: dict[str, Any]) -> None:
        if DRAW_ORDER not in state:
            return
        order = DrawOrder.from_state(state[DRAW_ORDER]["order"])
        if order.num_problems != self._draw_order.num_problems:
            raise ValueError(
                f"the checkpoint's training data has {order.num_problems} problems, this run's env has "
                f"{self._draw_order.num_problems}: resume with the dataset it was trained on"
            )
        self._draw_order, self._next_group_id = order, state[DRAW_ORDER]["next_group_id"]


def group_episodes(episodes: list) -> list[Group]:
    """Episodes grouped by prompt, in first-seen order."""
    groups: dict[int, list] = defaultdict(list)
    for ep in episodes:
        groups[int(episode_value(ep, Extras.GROUP_ID))].append(ep)
    return [Group(group_id, members) for group_id, members in groups.items()]


def without_broken_tasks(groups: list[Group]) -> list[Group]:
    """The groups whose task's tests work: a broken task (tests that fail whatever the answer, see
    `dapo_rllib.tasks.rewards.program_judge`) says nothing about the answers, so it is not trained on;
    each one dropped is logged as a warning with why, and counted (rollout/broken_tasks)."""
    healthy = []
    for group in groups:
        why = next((why for why in group.values(Extras.BROKEN_TASK) if why), "")
        if why:
            logger.warning("dropped the group of a broken task (not trained on): %s", why)
        else:
            healthy.append(group)
    return healthy


def without_failed_environments(groups: list[Group]) -> list[Group]:
    """The groups whose episodes' environments all worked: one that failed (its server down, a call timed out)
    left its episode unscored, so the group's advantages would measure the failure. Those dropped are
    warned about in one line, with their failures by kind and the last failure's message."""
    failed = [g for g in groups if any(g.values(Extras.ENV_ERROR))]
    failed_ids = {g.group_id for g in failed}
    if failed:
        counts = env_error_counts(failed)
        logger.warning(
            "left out %d group(s) whose environment failed (%s), drawing others in their place; last: %s",
            len(failed),
            ", ".join(f"{kind} x{count}" for kind, count in counts.items()),
            _last_env_error(failed),
        )
    return [g for g in groups if g.group_id not in failed_ids]


def env_error_counts(groups: list[Group]) -> dict[str, int]:
    """{kind: episodes whose environment failed with it} over `groups`."""
    counts: dict[str, int] = {}
    for group in groups:
        for kind in group.values(Extras.ENV_ERROR):
            if kind:
                counts[kind] = counts.get(kind, 0) + 1
    return counts


def check_env_error_rate(groups: list[Group], max_rate: float) -> None:
    """Raise when more than `max_rate` of the episodes of `groups` (a step's) ended in an environment failure."""
    counts = env_error_counts(groups)
    episodes = sum(len(g) for g in groups)
    failed = sum(counts.values())
    if failed and failed / episodes > max_rate:
        kinds = ", ".join(f"{kind}: {count}" for kind, count in counts.items())
        raise RuntimeError(
            f"the environment failed in {failed} of the step's {episodes} episodes ({failed / episodes:.0%}), past "
            f"max_env_error_rate={max_rate} ({kinds}); last failure: {_last_env_error(groups)}. Check the "
            "environment (its server, its data), or raise env_timeout_s or max_env_error_rate in .training()"
        )


def _last_env_error(groups: list[Group]) -> str:
    episode = next(ep for g in reversed(groups) for ep in reversed(g.episodes) if episode_value(ep, Extras.ENV_ERROR))
    info = episode.get_infos(-1)
    return f"{info[Info.ENV_ERROR]}: {info[Info.ENV_ERROR_MESSAGE]}"


def informative_groups(
    groups: list[Group], metric_key: str, band: tuple[float, float] | None = None, min_std: float = 0.0
) -> list[Group]:
    """Groups whose metric varies (or single-member groups), inside `band` and with at least
    `min_std` if given, via core_algos.filter_groups."""
    if not groups:
        return []
    values = torch.tensor([float(v) for g in groups for v in g.values(metric_key)], dtype=torch.float64)
    ids = torch.tensor([i for i, g in enumerate(groups) for _ in range(len(g))])
    keep = core_algos.filter_groups(values, ids, band=band, min_std=min_std)
    first = np.cumsum([0] + [len(g) for g in groups[:-1]])
    return [g for g, start in zip(groups, first) if bool(keep[start])]
