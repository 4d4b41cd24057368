"""The league's bookkeeping on the driver: snapshots in and out, results against each, the odds of the next
draws, its checkpoint. The env runners that serve the snapshots are stood in for by a recorder of what the
league asks them to serve; the self-play runs serve them for real (tests/algorithm/test_self_play.py)."""

import numpy as np
import pytest
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.algorithm.dynamic_sampling import Group
from dapo_rllib.algorithm.self_play.league import League, LeagueSettings
from dapo_rllib.columns import Metrics
from tests.support.episodes import turns_episode


class ServedLeague:
    """Stands in for the `RunnerFleet`: each policy adapter it gives is the next number, and it records the
    snapshots it was last asked to serve and the draw."""

    def __init__(self):
        self.adapters_taken, self.syncs, self.served, self.draw, self.replaced = 0, 0, {}, None, False

    def sync_weights(self):
        self.syncs += 1

    def policy_adapter(self):
        self.adapters_taken += 1
        return {"lora_B": np.full(2, float(self.adapters_taken))}

    def serve_league(self, league, snapshots, *, replace=False):
        self.draw, self.served, self.replaced = league, {name: t["lora_B"][0] for name, t in snapshots.items()}, replace


def game_group(*games):
    """A group of episodes, one per (opponent, outcome) of `games`."""
    return Group(0, [turns_episode([1], [([2], [-1.0], [])], 0.0, 0, game=game) for game in games])


def league(size=2, every=2, sampling="uniform"):
    fleet = ServedLeague()
    return League(
        LeagueSettings(size=size, snapshot_every=every, opponent_sampling=sampling), seed=0, fleet=fleet
    ), fleet


def test_the_initial_policy_is_the_first_snapshot_after_a_sync():
    keeper, fleet = league()
    keeper.start()
    assert (fleet.syncs, fleet.served, fleet.draw.odds) == (1, {"league_0": 1.0}, {"league_0": 1.0})


def test_snapshots_join_every_k_steps_and_the_oldest_leaves_past_the_size():
    keeper, fleet = league(size=2, every=2)
    keeper.start()
    for step in (1, 2, 3, 4):
        keeper.after_step(step, [], MetricsLogger(root=True))
    # Adapters taken at steps 0, 2 and 4 (the 1st, 2nd, 3rd): league_0 left when league_4 joined.
    assert fleet.served == {"league_2": 2.0, "league_4": 3.0}
    assert list(keeper.results) == ["league_2", "league_4"]


def test_pfsp_draws_the_snapshot_the_policy_loses_to_most():
    keeper, fleet = league(size=2, every=1, sampling="pfsp")
    keeper.start()
    metrics = MetricsLogger(root=True)
    # Against league_0: won 3 of 4 and drew 1 -> win rate 3.5/4 = 0.875; a game against a script is not counted.
    keeper.after_step(
        1,
        [game_group(*[("league_0", "win")] * 3, ("league_0", "draw"), ("heuristic", "loss"))],
        metrics,
    )
    assert keeper.results["league_0"] == {"win": 3, "draw": 1, "loss": 0}
    # league_1 unseen counts as 0.5: PFSP weights (1 - 0.875)^2 = 0.015625 and (1 - 0.5)^2 = 0.25 -> odds
    # 0.015625 / 0.265625 = 0.0588 and 0.9412.
    assert fleet.draw.odds == pytest.approx({"league_0": 0.0588235, "league_1": 0.9411765})
    league_metrics = metrics.peek((Metrics.ROLLOUT, Metrics.LEAGUE))
    assert league_metrics[Metrics.LEAGUE_SIZE] == 2 and league_metrics[Metrics.LEAGUE_WIN_RATE] == 0.875
    assert league_metrics[Metrics.LEAGUE_ODDS]["league_1"] == pytest.approx(0.9411765)


def test_a_restored_league_replaces_what_the_engines_serve():
    keeper, fleet = league(size=3, every=1)
    keeper.start()
    keeper.after_step(1, [game_group(("league_0", "loss"))], MetricsLogger(root=True))
    state = keeper.get_state()
    restored, restored_fleet = league(size=3, every=1)
    restored.start()  # serves its own league_0 (another adapter: 1.0 in its count) until the state arrives
    restored.set_state(state)
    assert restored_fleet.served == {"league_0": 1.0, "league_1": 2.0} and restored_fleet.replaced
    assert restored.results == keeper.results and restored.draw() == keeper.draw()


def test_idle_without_a_league():
    keeper, fleet = league(size=0)
    keeper.start()
    keeper.after_step(1, [], MetricsLogger(root=True))
    assert (fleet.syncs, fleet.served, keeper.get_state()) == (0, {}, {})


@pytest.mark.parametrize(
    "training, message",
    [
        (dict(league_size=-1), r"league_size=-1 must be a whole number >= 0"),
        (dict(league_snapshot_every=0), r"league_snapshot_every=0 must be a whole number of training steps >= 1"),
        (
            dict(league_opponent_sampling="elo"),
            r"league_opponent_sampling='elo'; expected one of \('uniform', 'pfsp'\)",
        ),
        (
            dict(league_size=2),
            r"league_size=2 serves its snapshots as LoRA adapters .* \(lora_rank=None, lora_sync='auto'\)",
        ),
        (dict(league_size=2, lora_rank=8, lora_sync="merged"), r"set lora_rank and lora_sync='adapter'"),
    ],
)
def test_bad_league_settings_are_clear_errors(training, message):
    with pytest.raises(ValueError, match=message):
        DAPOConfig().training(**training).validate()
