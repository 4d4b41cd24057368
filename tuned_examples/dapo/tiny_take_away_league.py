"""A league: the tiny take-away model trains LoRA adapters against frozen snapshots of its own adapters.

The game and the model are those of tiny_take_away_self_play.py. The trained policy takes one seat of each
request (seats alternate); the other is a league snapshot drawn for the request (`versus_league`) by
prioritized fictitious self-play: the snapshots it still loses to come up most. The league starts with the
initial policy (league_0) and takes a snapshot every 10 steps, keeping the last 4. Snapshots are LoRA adapters
that the one vLLM engine serves beside the trained adapter, sampled in the same batches
(dapo_rllib/algorithm/self_play/league.py). Validation plays the scripts and every snapshot, at both seats.
The run ends with the win rates against the scripts, before -> after, and the Elo table of the model, the
scripts and the snapshots.

    python tuned_examples/dapo/tiny_take_away_league.py --no-tune
"""

import dapo_rllib  # noqa: F401  (registers "DAPO" and "dapo_take_away")
from dapo_rllib.cli.train import run_example
from dapo_rllib.experiments.self_play import ITERATIONS, report_versus, take_away_league_config

config = take_away_league_config()
stop = {"training_iteration": ITERATIONS}
after_run = report_versus

if __name__ == "__main__":
    run_example(config, stop, after_run)
