"""A Ray Tune sweep of the league (tiny_take_away_league.py): league size x snapshot interval, 4 trials.

League sizes 2 and 4, a snapshot every 5 or 20 steps; the rest as the league example. A trial asks for the 2
CPUs it uses, so on a 2-core machine Tune runs them one after another. Ends with a table of the trials and
their held-out results before and after training.

    python tuned_examples/dapo/tiny_take_away_league_sweep.py
    rllib train file tuned_examples/dapo/tiny_take_away_league_sweep.py
"""

from ray import tune

from dapo_rllib.cli.train import run_example
from dapo_rllib.experiments.self_play import ITERATIONS, take_away_league_config

config = take_away_league_config().training(
    league_size=tune.grid_search([2, 4]), league_snapshot_every=tune.grid_search([5, 20])
)
stop = {"training_iteration": ITERATIONS}

if __name__ == "__main__":
    run_example(config, stop)
