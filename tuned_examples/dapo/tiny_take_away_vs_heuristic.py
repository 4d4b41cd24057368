"""The comparison run of tiny_take_away_self_play.py, as SPIRAL made it: the same model and settings, trained
against a fixed opponent only, the best-play script ("heuristic", at the seat the model does not take,
alternating by request), instead of against itself. Its validation plays both scripts, as the self-play
run's does: which of the two generalizes to the opponent it did not train against (the random mover)?

    python tuned_examples/dapo/tiny_take_away_vs_heuristic.py --no-tune
"""

import dapo_rllib  # noqa: F401  (registers "DAPO" and "dapo_take_away")
from dapo_rllib.cli.train import run_example
from dapo_rllib.experiments.self_play import ITERATIONS, report_versus, take_away_config
from dapo_rllib.rollout.matchups import versus

config = take_away_config().multi_agent(policy_mapping_fn=versus("heuristic"))
stop = {"training_iteration": ITERATIONS}
after_run = report_versus

if __name__ == "__main__":
    run_example(config, stop, after_run)
