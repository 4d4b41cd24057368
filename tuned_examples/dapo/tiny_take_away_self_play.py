"""Self-play: the tiny take-away model plays both seats of the built-in take-away game against itself.

The game (`dapo_take_away`, dapo_rllib/tasks/games/take_away.py): one pile of 7-15 stones, the players take
1-3 in turn, written as `[2]`, and whoever takes the last stone wins; a move without brackets loses at once.
The model (`ensure_tiny_model(task="take_away")`, shipped with the package) is warm-started on one seat's games
against random moves, played best (leave a multiple of 4), at random or without brackets. RLlib's default
policy_mapping_fn maps both agents to the one policy: shared self-play, each seat's episodes a group of
their own, with role-conditioned advantages (adv_estimator="rae", SPIRAL's: a moving reward baseline per
game and seat). 100 iterations; validation plays 32 held-out positions against the random and the best-play
(heuristic) opponents, at both seats, every 20 iterations (dapo_rllib/experiments/self_play.py). The run
ends with

    win rate vs random_legal: <before> -> <after>
    win rate vs heuristic: <before> -> <after>

and the Elo ratings of the model and both opponents from those games (the random mover at 1000).
tiny_take_away_vs_heuristic.py trains the same model against the heuristic only, for comparison.

    python tuned_examples/dapo/tiny_take_away_self_play.py --no-tune
"""

import dapo_rllib  # noqa: F401  (registers "DAPO" and "dapo_take_away")
from dapo_rllib.cli.train import run_example
from dapo_rllib.experiments.self_play import ITERATIONS, report_versus, take_away_config

config = take_away_config()
stop = {"training_iteration": ITERATIONS}
after_run = report_versus

if __name__ == "__main__":
    run_example(config, stop, after_run)
