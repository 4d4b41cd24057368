"""Episodes shaped as the env runner builds them, and the learner connector pieces run on them."""

import numpy as np
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from dapo_rllib.algorithm.connectors import GroupAdvantages, PadTokenBatch
from dapo_rllib.columns import Extras

PAD = 0


def episode(prompt, response, reward, group_id, *, truncated=False, acc=None, rollout_logp=None, role=None):
    """A one-turn episode as the env runner builds it."""
    logp = np.full(len(response), -1.0, np.float32) if rollout_logp is None else np.asarray(rollout_logp, np.float32)
    return turns_episode(prompt, [(response, logp, [])], reward, group_id, truncated=truncated, acc=acc, role=role)


def turns_episode(prompt, turns, reward, group_id, *, truncated=False, acc=None, broken_task="", role=None, game=None):
    """An episode of `turns` [(model ids, vLLM log-probs, environment ids after)], shaped as the env runner
    builds it: a step per turn, the environment's ids the next observation, the reward at the end; `role`:
    the role its policy played, as a self-play env runner marks it (None: a single-agent episode's); `game`:
    (opponent, outcome) of a game of two players."""
    ep = SingleAgentEpisode()
    ep.add_env_reset(observation=np.array(prompt))
    for t, (model_ids, logp, env_ids) in enumerate(turns):
        last = t == len(turns) - 1
        ep.add_env_step(
            observation=np.array(env_ids, dtype=np.int64),
            action=np.array(model_ids),
            reward=reward if last else 0.0,
            terminated=last,
            extra_model_outputs={
                Extras.GROUP_ID: group_id,
                Extras.SCORE: reward,
                Extras.ACC: float(reward > 0) if acc is None else acc,
                Extras.TRUNCATED: truncated,
                Extras.BROKEN_TASK: broken_task,
                Extras.ROLLOUT_LOGP: np.asarray(logp, np.float32),
            }
            | ({} if role is None else {Extras.ROLE: role})
            | ({} if game is None else {Extras.OPPONENT: game[0], Extras.OUTCOME: game[1]}),
        )
    return ep


def run_pieces(episodes, overlong_filtering=False, estimator="grpo"):
    batch = PadTokenBatch(pad_token_id=PAD, overlong_filtering=overlong_filtering)(
        rl_module=None, batch={}, episodes=episodes
    )
    return GroupAdvantages(estimator=estimator)(rl_module=None, batch=batch, episodes=episodes)[DEFAULT_MODULE_ID]
