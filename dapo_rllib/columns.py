"""Every name that travels between DAPO's pieces, in one place (as RLlib's `Columns` does).

    Info          keys of an environment's info dicts (typed in `dapo_rllib.contracts`)
    Extras        per-episode values the env runner writes into `extra_model_outputs`
    CustomData    per-episode values DAPO's driver adds after sampling (the episode's `custom_data`)
    Columns       training-batch columns: RLlib's that DAPO uses, and DAPO's own
    Metrics       metric names, by the section of the results they appear in

A TensorBoard tag is `<section>/<name>` (see `tag`). Plain Python, no Ray: the pure math in
`core_algos` names its metrics from here too.
"""

from __future__ import annotations

import enum


class Info:
    """Keys of the info dicts of a problem environment (`dapo_rllib.tasks.problem_env.ProblemEnv`): a scored
    completion's (`contracts.ScoreInfo`, also what a scorer returns: `contracts.ScoreResult`) and a reset's
    (`contracts.ResetInfo`). A test checks that they are the keys of those types."""

    SCORE = "score"  # the reward the scorer gives (+1.0 / -1.0 for the math scorers)
    ACC = "acc"  # correct (bool)
    PRED = "pred"  # the extracted answer, or None; majority voting compares these
    SCORE_TIMED_OUT = "score_timed_out"  # scoring ran out of time: scored wrong, counted
    BROKEN_TASK = "broken_task"  # why the problem's own tests fail whatever the answer (code tasks), or None
    GROUND_TRUTH = "ground_truth"  # the problem's reference answer
    DATA_SOURCE = "data_source"  # the problem's data source (metrics are per source)
    PROBLEM_INDEX = "problem_index"  # the problem's index in the dataset; also the reset option that replays one
    EPOCH = "epoch"  # epochs of the draw order completed before this problem was drawn
    TOOLS = "tools"  # the schemas of the tools the model may call (a reset's info)
    TOOL_CALLS = "tool_calls"  # tool calls in a turn (a tool step's info); also the assistant message's key
    TOOL_ERRORS = "tool_errors"  # failed tool calls by kind
    TOOL_S = "tool_s"  # seconds a turn's tool calls took
    INVALID_MOVES = "invalid_moves"  # moves the game refused in the episode (games: TextArena, OpenEnv)
    ENV_ERROR = "env_error"  # the kind of failure the episode's environment ended in (`tasks.env_failures`)
    ENV_ERROR_MESSAGE = "env_error_message"  # what that failure said
    OUTCOME = "outcome"  # games of two players: the player's result, an `Outcome`


class Outcome(enum.StrEnum):
    """A game's result for one player (`Info.OUTCOME`)."""

    WIN = "win"
    DRAW = "draw"
    LOSS = "loss"


class Extras:
    """Values of an episode, set by `VLLMEnvRunner` at each of its steps (a step per model turn; the same at
    every step except ROLLOUT_LOGP, the turn's own) and read by connectors and `DAPO`."""

    GROUP_ID = "group_id"  # episodes sampled for the same prompt share it
    SCORE = Info.SCORE  # the verifier's reward, before length shaping
    ACC = Info.ACC  # 0/1 correctness
    TRUNCATED = "truncated"  # the response hit max_response_length
    SCORE_TIMED_OUT = Info.SCORE_TIMED_OUT  # scoring ran out of time: scored wrong, counted
    BROKEN_TASK = Info.BROKEN_TASK  # why the task is broken ("" if it is not): its group is not trained on
    OVERLONG_PENALTY = "overlong_penalty"  # the soft overlong punishment added to the reward
    ROLLOUT_LOGP = "rollout_logp"  # vLLM's log-prob of each token the model sampled in the turn (float32 array)
    END_REASON = "end_reason"  # why the episode ended (`dapo_rllib.rollout.EndReason` value)
    TURNS = "turns"  # model turns
    ENV_TOKENS = "env_tokens"  # tokens the environment added after the prompt (not trained on)
    TOOL_CALLS = Info.TOOL_CALLS  # tool calls the model made
    TOOL_ERRORS = Info.TOOL_ERRORS  # failed tool calls by kind
    INVALID_MOVES = Info.INVALID_MOVES  # moves the game refused (0 where the environment has none)
    ENV_ERROR = Info.ENV_ERROR  # the kind of failure the environment ended the episode in ("" if none)
    ROLE = "role"  # the role the episode's policy played (self-play: the game and seat); absent: `DEFAULT_ROLE`
    OPPONENT = "opponent"  # games of two players: who played the other seat (a policy, script or league snapshot)
    OUTCOME = Info.OUTCOME  # games of two players: the episode's `Outcome` ("" where the game failed)


DEFAULT_ROLE = "policy"  # the one role of the episodes of a single-agent environment


class CustomData:
    """Values DAPO's driver attaches to a sampled episode (`SingleAgentEpisode.custom_data`, which travels
    with the episode to the learners and into checkpoints), read by the learner connector."""

    ROLE_BASELINE = "role_baseline"  # adv_estimator="rae": its role's reward baseline, read before its reward moved it


class Columns:
    """Training-batch columns. The first four are RLlib's (`ray.rllib.core.columns.Columns`),
    repeated so that this module needs no Ray; a test checks they stay equal."""

    OBS = "obs"  # prompt token ids, left-padded
    ACTIONS = "actions"  # response token ids, right-padded: every token after the prompt, model and environment
    ADVANTAGES = "advantages"
    LOSS_MASK = "loss_mask"  # the tokens the model sampled, with overlong-filtered responses zeroed
    PROMPT_MASK = "prompt_mask"
    RESPONSE_MASK = "response_mask"
    OLD_LOGP = "old_logp"  # log-probs under the policy before this step's updates
    LOGP = "logp"  # forward output: log-prob of each sampled response token
    ENTROPY = "entropy"  # forward output: policy entropy at each response position
    ROLLOUT_LOGP = "rollout_logp"  # vLLM's log-probs of the sampled tokens (0 on the environment's), right-padded
    COV_SELECTED = "cov_selected"  # Clip-Cov / KL-Cov: the tokens the mini-batch's covariance selected (learner-made)


class Metrics:
    """Result sections and the metric names under them."""

    # Sections of the results (and TensorBoard tag prefixes).
    ROLLOUT = "rollout"
    TIMING = "timing"
    LEARNER = "learner"
    PROGRESS = "progress"

    # rollout/: one training step's samples and dynamic sampling.
    GENERATION_ROUNDS = "generation_rounds"
    GROUPS_GENERATED = "groups_generated"
    GROUPS_KEPT = "groups_kept"  # groups trained on
    GROUPS_KEPT_FRACTION = "groups_kept_fraction"  # informative / generated
    PARTIAL_BATCH = "partial_batch"  # 1: the round cap was hit, fewer groups trained
    GROUPS_ALL_CORRECT_FRACTION = "groups_all_correct_fraction"
    GROUPS_ALL_WRONG_FRACTION = "groups_all_wrong_fraction"
    TRUNCATION_RATIO = "truncation_ratio"
    SCORING_TIMEOUTS = "scoring_timeouts"
    BROKEN_TASKS = "broken_tasks"  # groups dropped because their task's tests are broken
    RESPONSE_LENGTH_MEAN = "response_length_mean"
    RESPONSE_LENGTH_MAX = "response_length_max"
    REWARD_MEAN = "reward_mean"
    SCORE_MEAN = "score_mean"
    ACC_MEAN = "acc_mean"
    PROMPTS_TRUNCATED = "prompts_left_truncated"
    ENV_RUNNERS_LOST = "env_runners_lost"  # died while sampling this step; their shares were sampled again

    GENERATED_TOKENS = "generated_tokens"
    # Episodes over turns (one turn for single-step tasks).
    TURNS_MEAN = "turns_mean"  # model turns per episode
    TURNS_MAX = "turns_max"
    TOOL_CALLS = "tool_calls"  # tool calls per episode, mean
    TOOL_ERRORS = "tool_errors"  # a section of its own, under rollout/: failed tool calls by kind, per step
    MODEL_TOKENS_MEAN = "model_tokens_mean"  # per episode: tokens the model sampled
    ENV_TOKENS_MEAN = "env_tokens_mean"  # per episode: tokens the environment added (tool results, feedback)
    ENDED_BY = "ended_by"  # a section of its own, under rollout/: share of episodes per `EndReason`
    INVALID_MOVES = "invalid_moves"  # games: moves the game refused, per episode, mean
    # Episodes whose environment failed (`dapo_rllib.tasks.env_failures`), per step: a section of its own, under
    # rollout/, counted by kind; their groups are left out (groups_dropped_env_error) and replaced.
    ENV_ERRORS = "env_errors"
    GROUPS_DROPPED_ENV_ERROR = "groups_dropped_env_error"
    # evaluation/<game source>/: a game's Elo ratings from validation against fixed opponents (`eval_metrics`).
    ELO = "elo"  # the model's; "elo/<opponent>" each opponent's
    DRAW_RATE = "draw_rate"  # evaluation/<game source>/vs_<opponent>/: games drawn (won: avg@n)
    ROLE_BASELINES = "role_baselines"  # adv_estimator="rae": a section of its own, under rollout/: each role's baseline
    # league/ (league_size >= 1): the league's snapshots, the odds of drawing each and the trained policy's
    # training games against them, per step.
    LEAGUE = "league"
    LEAGUE_SIZE = "size"
    LEAGUE_WIN_RATE = "win_rate"  # the trained policy's wins in this step's games against the league
    LEAGUE_ODDS = "odds"  # a section of its own, under league/: the odds of drawing each snapshot next step

    # timing/: wall seconds of the phases of one training step, logged as RLlib timers
    # (`TIMERS`) next to RLlib's own, which TensorBoard shows under these names.
    GENERATION_S = "generation_s"
    SCORING_S = "scoring_s"  # environment steps that rated answers
    TOOL_S = "tool_s"  # environment steps that ran tool calls
    OLD_LOG_PROBS_S = "old_log_probs_s"  # part of update_s
    UPDATE_S = "update_s"
    WEIGHT_SYNC_S = "weight_sync_s"
    WEIGHT_LOAD_S = "weight_load_s"  # per env runner, inside weight_sync_s
    WEIGHT_SYNC_BUCKETS = "weight_sync_buckets"
    ASYNC_WAIT_S = "async_rollout_wait_s"  # async_rollout: time the step waited for generation after the update
    GENERATION_TOKENS_PER_S = "generation_tokens_per_s"
    ITERATION_S = "iteration_s"
    EVALUATION_S = "evaluation_s"
    LEAGUE_S = "league_s"  # a league's snapshot (from an engine to every engine) and the odds of the next draws
    EVAL_TIME_S = "eval_time_s"  # in the evaluation results (next to RLlib's counters) and `rllib evaluate`'s report

    # learner/: the update.
    POLICY_LOSS = "policy_loss"
    KL_LOSS = "kl_loss"
    ENTROPY = "entropy"
    MEAN_TOKEN_PROB = "mean_token_prob"
    APPROX_KL = "approx_kl"
    PG_CLIPFRAC_LOW = "pg_clipfrac_low"
    PG_CLIPFRAC_HIGH = "pg_clipfrac_high"
    PG_CLIPFRAC_DUAL = "pg_clipfrac_dual"
    RATIO_MEAN = "ratio_mean"
    COV_SELECTED_FRACTION = "cov_selected_fraction"  # Clip-Cov / KL-Cov: loss tokens selected by covariance
    GRAD_NORM = "grad_norm"
    GRAD_STEPS_SKIPPED = "grad_steps_skipped"
    LR = "lr"
    OVERLONG_FILTERED_FRACTION = "overlong_filtered_fraction"
    LOSS_TOKENS = "loss_tokens_per_step"
    PADDING_FRACTION = "padding_fraction"  # padded / all token positions of the forward passes
    MICRO_BATCHES = "micro_batches"  # forward passes per optimizer step
    ROLLOUT_LOGP_ABS_DIFF = "rollout_logp_abs_diff"  # mean |old log-prob - vLLM's| per token
    ROLLOUT_LOGP_ABS_DIFF_MAX = "rollout_logp_abs_diff_max"
    ROLLOUT_IS_WEIGHT_MEAN = "rollout_is_weight_mean"  # the rollout correction's importance weights
    ROLLOUT_IS_CAPPED_FRACTION = "rollout_is_capped_fraction"  # tokens whose weight hit the cap
    ROLLOUT_IS_MASKED_FRACTION = "rollout_is_masked_fraction"  # tokens a masking correction dropped

    # progress/: lifetime counters.
    ENV_STEPS_SAMPLED = "env_steps_sampled"

    # evaluation/<data source>/: validation (`dapo_rllib.reporting.eval_metrics`), with RESPONSE_LENGTH_MEAN,
    # TRUNCATION_RATIO and SCORING_TIMEOUTS. A name ending in "@" is followed by a sample count:
    # f"{Metrics.AVG_AT}{n}" is "avg@32" for n = 32.
    AVG_AT = "avg@"  # avg@n: mean accuracy of n samples per problem (the headline number)
    CURRICULUM_LEVELS = "curriculum_levels"  # {data source: level} of an env's curriculum (result, checkpoint)
    PASS_AT = "pass@"  # pass@k: some of k of the n samples is correct (unbiased estimate)
    MAJ_AT = "maj@"  # maj@n: the majority answer of the n samples is correct
    NUM_PROBLEMS = "num_problems"
    NUM_SAMPLES = "num_samples"
    # Where some episode took several turns or called a tool: TURNS_MEAN, and these where they apply.
    TOOL_USE = "tool_use"  # share of samples that called a tool (where some did)
    FIRST_ANSWER_ACC = "first_answer_acc"  # accuracy of the first answer, where some were followed by another
    # (avg@n is of the last, after feedback)


def tag(section: str, name: str) -> str:
    """The TensorBoard tag (and flattened result key) of metric `name` in `section`."""
    return f"{section}/{name}"
