"""The self-play examples' settings: the tiny take-away model on the built-in take-away game, and their report.

`take_away_config` is shared self-play (RLlib's default policy_mapping_fn maps both agents to the one
policy) with role-conditioned advantages; the comparison run sets `versus(<script>)` on the same config;
`take_away_league_config` trains LoRA adapters against a league of their own frozen snapshots.
`report_versus` prints what the examples end with: the win rate against each scripted opponent (held out,
seat-swapped) before -> after, and the Elo table of the model and the opponents.
"""

from __future__ import annotations

from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.columns import Metrics
from dapo_rllib.models.tiny import ensure_tiny_model
from dapo_rllib.reporting.eval_metrics import MODEL_PLAYER, versus_source
from dapo_rllib.reporting.tables import format_table
from dapo_rllib.rollout.game_loop import RANDOM_SCRIPT, SCRIPTS
from dapo_rllib.rollout.matchups import versus_league
from dapo_rllib.tasks.games.take_away import TakeAwayEnv

ITERATIONS = 100
VALIDATION_INTERVAL = 20
EVAL_GAMES, EVAL_SAMPLES = 32, 4


def take_away_config(model_path: str | None = None) -> DAPOConfig:
    """Shared self-play on take-away: 16 positions x 8 games a step (a group per seat), RAE, lr 1e-4;
    validation on 32 held-out positions x 4 games per seat against each script, every 20 iterations. The
    model: the tiny take-away model (shipped with the package), or `model_path`."""
    return (
        DAPOConfig()
        .environment("dapo_take_away", env_config={"num_problems": 512})
        .evaluation(
            evaluation_interval=VALIDATION_INTERVAL,
            eval_num_samples=EVAL_SAMPLES,
            eval_max_problems=EVAL_GAMES,
            evaluation_config={"env_config": {"split": "test", "num_problems": EVAL_GAMES}},
        )
        .training(
            model_path=model_path or str(ensure_tiny_model(task="take_away")),
            adv_estimator="rae",
            # Under RAE a group whose games all ended alike still has a signal: no dynamic sampling.
            dynamic_sampling=False,
            group_size=8,
            train_batch_size_prompts=16,
            minibatch_size_prompts=8,
            max_turns=8,
            max_prompt_length=256,
            max_response_length=256,
            overlong_buffer_len=0,
            lr=1e-4,
            lr_warmup_steps=0,
        )
        .env_runners(num_env_runners=0)
        .debugging(seed=0)
    )


def take_away_league_config(model_path: str | None = None) -> DAPOConfig:
    """`take_away_config` training rank-8 LoRA adapters (lr 1e-3) against a league (`versus_league`): the
    initial policy and a snapshot every 10 steps, the last 4 kept, drawn by PFSP; each snapshot an adapter the
    engine serves beside the trained one (`lora_sync="adapter"`). Validation also plays every snapshot."""
    return (
        take_away_config(model_path)
        .training(
            lora_rank=8,
            lora_sync="adapter",
            lr=1e-3,
            league_size=4,
            league_snapshot_every=10,
            league_opponent_sampling="pfsp",
        )
        .multi_agent(policy_mapping_fn=versus_league)
    )


def report_versus(outcomes, run_dir=None) -> None:
    """Win rate vs each script, before -> after, and the Elo table (an example's `after_run`); a run that
    stopped before validating after training (every `VALIDATION_INTERVAL` iterations) says so instead."""
    before, after = outcomes[0].eval_before, outcomes[0].eval_after
    game = TakeAwayEnv.data_source
    wins = {opponent: f"{versus_source(game, opponent)}/avg@{2 * EVAL_SAMPLES}" for opponent in SCRIPTS}
    if not all(key in before and key in after for key in wins.values()):
        print(f"win rates and Elo: no validation after training (one every {VALIDATION_INTERVAL} iterations)")
        return
    for opponent, key in wins.items():
        print(f"win rate vs {opponent}: {before[key]:.3f} -> {after[key]:.3f}")
    elo = f"{game}/{Metrics.ELO}"
    # The scripts, and in a league run the snapshots (league_0, the initial policy, is rated before training).
    opponents = [key.removeprefix(f"{elo}/") for key in {**before, **after} if key.startswith(f"{elo}/")]
    players = {MODEL_PLAYER: elo} | {opponent: f"{elo}/{opponent}" for opponent in opponents}
    rows = [[player, *(_rounded(run.get(key)) for run in (before, after))] for player, key in players.items()]
    print(format_table([[f"Elo ({RANDOM_SCRIPT} = 1000)", "before", "after"], *rows]))


def _rounded(rating: float | None) -> int | str:
    return "-" if rating is None else round(rating)
