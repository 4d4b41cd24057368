"""The league of a self-play run: frozen snapshots of the trained policy, which it plays against.

At the start, and every `league_snapshot_every` steps after, the trained policy's adapter as the engines serve it
joins the league as snapshot ``league_<step>`` (``league_0``: the initial policy); past `league_size` snapshots
the oldest leaves. Before each step the league sets the odds of drawing each snapshot: uniform, or prioritized
fictitious self-play (`pfsp.opponent_probabilities`) from the trained policy's results against each in its
training games so far (a draw half a win). `rollout.matchups.versus_league` draws one per request.

Snapshots are LoRA adapters that every engine serves beside the trained policy's (`models.adapter_shelf`): a
snapshot costs its adapter's tensors (in the driver, in each engine and in checkpoints), not a copy of the model.
So a league needs ``lora_sync="adapter"``; with full fine-tuning a snapshot would be a whole model per engine.
The driver holds the snapshots' tensors and results, checkpoints them, and serves them again to a restarted env
runner (`RunnerFleet.serve_league`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, ClassVar

import numpy as np
from ray.rllib.utils.metrics import TIMERS
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from dapo_rllib.algorithm.connectors import episode_value
from dapo_rllib.algorithm.self_play.pfsp import OPPONENT_SAMPLING, opponent_probabilities
from dapo_rllib.columns import Extras, Metrics, Outcome
from dapo_rllib.models.lora import LoraSettings
from dapo_rllib.rollout.matchups import LeagueDraw
from dapo_rllib.settings import FeatureSettings, is_positive_int, require

SNAPSHOT_PREFIX = "league_"
LEAGUE_STATE = "league"
_OUTCOMES = (Outcome.WIN, Outcome.DRAW, Outcome.LOSS)


@dataclasses.dataclass(frozen=True)
class LeagueSettings(FeatureSettings):
    """The league's settings (`DAPOConfig.training(league_size=...)`).

    Attributes:
        size: ``league_size``, the snapshots kept; 0 (default): no league. Each is a LoRA adapter every engine
            serves at once (vLLM's ``max_loras`` and ``max_cpu_loras`` are 1 + size).
        snapshot_every: ``league_snapshot_every``, training steps between snapshots.
        opponent_sampling: ``league_opponent_sampling``, "uniform" or "pfsp" (the snapshots the trained policy
            still loses to come up most).
        pfsp_exponent: ``league_pfsp_exponent``, k in PFSP's weight (1 - win rate) ** k.
    """

    prefix: ClassVar[str] = "league_"
    size: int = 0
    snapshot_every: int = 10
    opponent_sampling: str = "uniform"
    pfsp_exponent: float = 2.0

    def validate(self) -> None:
        require(
            isinstance(self.size, int) and self.size >= 0,
            f"league_size={self.size!r} must be a whole number >= 0 (0: no league)",
        )
        require(
            is_positive_int(self.snapshot_every),
            f"league_snapshot_every={self.snapshot_every!r} must be a whole number of training steps >= 1",
        )
        require(
            self.opponent_sampling in OPPONENT_SAMPLING,
            f"league_opponent_sampling={self.opponent_sampling!r}; expected one of {OPPONENT_SAMPLING}",
        )
        require(self.pfsp_exponent > 0, f"league_pfsp_exponent={self.pfsp_exponent} must be > 0")


def check_league_config(league: LeagueSettings, lora: LoraSettings) -> None:
    """A league's needs across features: its snapshots are adapters beside the trained policy's (`lora`: the
    LoRA settings as set, rank None for full fine-tuning)."""
    require(
        league.size == 0 or (lora.rank is not None and lora.sync == "adapter"),
        f"league_size={league.size} serves its snapshots as LoRA adapters beside the trained policy's: set "
        f"lora_rank and lora_sync='adapter' (lora_rank={lora.rank}, lora_sync={lora.sync!r}); with "
        "full fine-tuning a snapshot would be a copy of the whole model in every engine",
    )


class League:
    """The driver's league: its snapshots' adapter tensors (oldest first) and the trained policy's results
    against each; idle without a league (`active`).

    Args:
        settings: The league's settings.
        seed: The run's seed (the requests' draws follow from it).
        fleet: The env runners that serve the snapshots (`RunnerFleet`).
    """

    def __init__(self, settings: LeagueSettings, seed: int, fleet):
        self.settings, self.seed, self.fleet = settings, seed, fleet
        self.active = settings.size > 0
        self.snapshots: dict[str, dict[str, np.ndarray]] = {}
        self.results: dict[str, dict[str, int]] = {}  # snapshot -> {outcome: games of the trained policy}

    @classmethod
    def for_config(cls, config, fleet) -> League:
        return cls(LeagueSettings.from_flat(config), config.seed or 0, fleet)

    def start(self) -> None:
        """The first snapshot: the initial policy, whose adapter is synced to the engines first."""
        if self.active:
            self.fleet.sync_weights()
            self._snapshot(0)

    def after_step(self, step: int, groups, metrics: MetricsLogger) -> None:
        """Count step `step`'s games against the league (`groups`: the episodes trained on), take a snapshot
        when one is due, and set the odds of the next step's draws; the league's metrics go to `metrics`."""
        if not self.active:
            return
        start = time.perf_counter()
        played = {outcome: 0 for outcome in _OUTCOMES}
        for episode in (ep for group in groups for ep in group.episodes):
            opponent, outcome = episode_value(episode, Extras.OPPONENT), episode_value(episode, Extras.OUTCOME)
            if opponent in self.results and outcome in played:
                self.results[opponent][outcome] += 1
                played[outcome] += 1
        if step % self.settings.snapshot_every == 0:
            self._snapshot(step)
        else:
            self.fleet.serve_league(self.draw(), self.snapshots)
        metrics.log_value((TIMERS, Metrics.LEAGUE_S), time.perf_counter() - start, window=1)
        league = (Metrics.ROLLOUT, Metrics.LEAGUE)
        metrics.log_value((*league, Metrics.LEAGUE_SIZE), len(self.snapshots), window=1)
        if games := sum(played.values()):
            metrics.log_value((*league, Metrics.LEAGUE_WIN_RATE), _score(played) / games, window=1)
        for name, odds in self.draw().odds.items():
            metrics.log_value((*league, Metrics.LEAGUE_ODDS, name), odds, window=1)

    def draw(self) -> LeagueDraw:
        """The snapshots and the odds of drawing each for the next step."""
        win_rates = [
            _score(self.results[name]) / n if (n := sum(self.results[name].values())) else None
            for name in self.snapshots
        ]
        odds = opponent_probabilities(win_rates, self.settings.opponent_sampling, self.settings.pfsp_exponent)
        return LeagueDraw(dict(zip(self.snapshots, odds)), self.seed)

    def _snapshot(self, step: int) -> None:
        """The trained policy's adapter joins as ``league_<step>``; the oldest snapshots past the size leave."""
        name = f"{SNAPSHOT_PREFIX}{step}"
        self.snapshots[name] = self.fleet.policy_adapter()
        self.results[name] = {outcome: 0 for outcome in _OUTCOMES}
        while len(self.snapshots) > self.settings.size:
            oldest = next(iter(self.snapshots))
            del self.snapshots[oldest], self.results[oldest]
        self.fleet.serve_league(self.draw(), self.snapshots)

    def get_state(self) -> dict[str, Any]:
        return {LEAGUE_STATE: {"snapshots": self.snapshots, "results": self.results}} if self.active else {}

    def set_state(self, state: dict[str, Any]) -> None:
        """The league of a checkpoint, served by every engine in place of the one they serve."""
        if self.active and LEAGUE_STATE in state:
            league = state[LEAGUE_STATE]
            self.snapshots = dict(league["snapshots"])
            self.results = {name: dict(counts) for name, counts in league["results"].items()}
            self.fleet.serve_league(self.draw(), self.snapshots, replace=True)


def _score(results: dict[str, int]) -> float:
    """Wins, a draw counted half."""
    return results[Outcome.WIN] + 0.5 * results[Outcome.DRAW]
