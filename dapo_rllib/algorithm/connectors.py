"""Learner connector pieces: grouped episodes in, DAPO training batch out.

Each episode is a prompt and the turns that followed it, sampled by `VLLMEnvRunner` (a step per
model turn: the action is the ids the model sampled, the next observation the ids the environment
added); the episodes of one prompt share a `group_id`. The learner sees one sequence per episode:
the prompt, then every turn's model ids and environment ids in order, exactly as they were sampled
and rendered; only the model's ids are in the loss. The pipeline DAPO builds (see
`DAPOConfig.build_learner_connector`):

    PadTokenBatch → GroupAdvantages → NumpyToTensor → RecomputeOldLogProbs

Advantages are computed here, on the whole batch of complete groups, before RLlib slices the
batch into mini-batches (or shards it across learners): later splitting cannot change them.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import TIMERS

from dapo_rllib.algorithm import core_algos
from dapo_rllib.algorithm.micro_batching import plan_for_batch, take
from dapo_rllib.columns import Columns, CustomData, Extras, Metrics
from dapo_rllib.models.rl_module import padded_sequences


def episode_value(episode, key: str):
    """The value of an episode-wide `extra_model_outputs` key (the env runner sets it at every step)."""
    return episode.get_extra_model_outputs(key, 0)


def role_baseline(episode) -> float:
    """The reward baseline DAPO's driver gave the episode's role (`algorithm.role_baselines`, adv_estimator="rae")."""
    if CustomData.ROLE_BASELINE not in episode.custom_data:
        raise ValueError(
            f"episode {episode.id_} has no role baseline (custom_data[{CustomData.ROLE_BASELINE!r}]): the estimator "
            "takes one per episode, which DAPO's training_step gives the episodes it trains on"
        )
    return episode.custom_data[CustomData.ROLE_BASELINE]


def episode_sequence(episode) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(prompt ids, response ids, model mask, rollout log-probs) of an episode.

    The response is every token after the prompt: each turn's model ids followed by the environment's
    ids after it. The mask is 1 on the model's ids, 0 on the environment's; the log-probs are vLLM's on
    the model's ids and 0 on the environment's.
    """
    pieces, mask, logp = [], [], []
    observations = episode.get_observations()
    for t in range(len(episode)):
        action = np.asarray(episode.get_actions(t), dtype=np.int64)
        env_ids = np.asarray(observations[t + 1], dtype=np.int64)
        pieces += [action, env_ids]
        mask += [np.ones(len(action), np.float32), np.zeros(len(env_ids), np.float32)]
        logp += [
            np.asarray(episode.get_extra_model_outputs(Extras.ROLLOUT_LOGP, t), np.float32),
            np.zeros(len(env_ids), np.float32),
        ]
    prompt = np.asarray(observations[0], dtype=np.int64)
    return prompt, np.concatenate(pieces), np.concatenate(mask), np.concatenate(logp)


class PadTokenBatch(ConnectorV2):
    """Left-pads prompts, right-pads responses (and vLLM's log-probs of them), and builds the
    response and loss masks.

    The response mask covers every token after the prompt (the forward pass sees them all); the
    loss mask only those the model sampled, with truncated responses zeroed when overlong
    filtering is on (docs/design/algorithm.md §2.4), so every later token count (the loss's denominator,
    entropy, clip fractions, the rollout mismatch) is counted after masking.
    """

    def __init__(self, *args, pad_token_id: int, overlong_filtering: bool, **kwargs):
        super().__init__(*args, **kwargs)
        self.pad_token_id = pad_token_id
        self.overlong_filtering = overlong_filtering

    @override(ConnectorV2)
    def __call__(self, *, rl_module, batch, episodes, metrics=None, **kwargs):
        episodes = list(self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False))
        sequences = [episode_sequence(ep) for ep in episodes]
        if any(len(response) == 0 for _, response, _, _ in sequences):
            raise ValueError("an episode has an empty response; the env runner must drop or pad it")
        arrays = padded_sequences(sequences, self.pad_token_id)
        loss_mask = arrays[Columns.LOSS_MASK]

        truncated = np.array([bool(episode_value(ep, Extras.TRUNCATED)) for ep in episodes])
        if self.overlong_filtering:
            loss_mask[truncated] = 0.0
        if metrics is not None:
            metrics.log_value(
                Metrics.OVERLONG_FILTERED_FRACTION,
                float(truncated.mean()) if self.overlong_filtering else 0.0,
                window=1,
            )
            metrics.log_value(Metrics.LOSS_TOKENS, float(loss_mask.sum()), window=1)

        batch[DEFAULT_MODULE_ID] = arrays
        return batch


class GroupAdvantages(ConnectorV2):
    """The advantage of every loss token, by the config's `adv_estimator` (GRPO's group-normalised
    one by default, docs/design/algorithm.md §1), over the whole batch: estimators that normalise over
    the batch's tokens (REINFORCE++) see all of it.

    The score is the episode's reward: the verifier's score plus the soft overlong penalty,
    both added by the env runner.
    """

    def __init__(self, *args, estimator: str = "grpo", **kwargs):
        super().__init__(*args, **kwargs)
        self.estimator = estimator
        # An unknown name fails here, listing the registered ones.
        self.wants_baselines = core_algos.wants_baselines(estimator)

    @override(ConnectorV2)
    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        episodes = list(self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False))
        # The episode's return: the sum of its turns' rewards (with a final reward only, that reward).
        scores = torch.tensor([ep.get_return() for ep in episodes], dtype=torch.float32)
        group_ids = torch.tensor([int(episode_value(ep, Extras.GROUP_ID)) for ep in episodes], dtype=torch.long)
        loss_mask = torch.from_numpy(batch[DEFAULT_MODULE_ID][Columns.LOSS_MASK])
        baselines = torch.tensor([role_baseline(ep) for ep in episodes]) if self.wants_baselines else None
        advantages = core_algos.compute_advantages(self.estimator, scores, group_ids, loss_mask, baselines)
        batch[DEFAULT_MODULE_ID][Columns.ADVANTAGES] = advantages.to(torch.float32).numpy()
        return batch


class RecomputeOldLogProbs(ConnectorV2):
    """Log-probs of the sampled tokens under the policy before this training step's updates.

    DAPO (docs/design/algorithm.md §5) recomputes them with the trainer's model rather than trusting the inference
    engine's numbers, which differ (kernels, precision). Runs without grad in the learner's
    token-budget micro-batches (`micro_batching`); its wall time is one of the step's timers
    (`timing/old_log_probs_s`). Not in the pipeline when a batch gets one optimizer step
    (`DAPOConfig.recomputes_old_logp`).
    """

    def __init__(self, *args, max_tokens: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_tokens = max_tokens

    @override(ConnectorV2)
    def __call__(self, *, rl_module, batch, episodes, metrics=None, **kwargs):
        module = rl_module[DEFAULT_MODULE_ID].unwrapped()
        data = batch[DEFAULT_MODULE_ID]
        inputs = {c: data[c] for c in (Columns.OBS, Columns.PROMPT_MASK, Columns.ACTIONS, Columns.RESPONSE_MASK)}
        old_logp = torch.zeros(data[Columns.ACTIONS].shape, dtype=torch.float32, device=data[Columns.ACTIONS].device)
        start_time = time.perf_counter()
        with torch.no_grad():
            for micro_batch in plan_for_batch(inputs, self.max_tokens):
                logp = module.forward_inference(take(inputs, micro_batch))[Columns.LOGP]
                old_logp[micro_batch.rows.to(old_logp.device), : micro_batch.response_width] = logp
        data[Columns.OLD_LOGP] = old_logp
        if metrics is not None:
            metrics.log_value((TIMERS, Metrics.OLD_LOG_PROBS_S), time.perf_counter() - start_time, window=1)
        return batch
