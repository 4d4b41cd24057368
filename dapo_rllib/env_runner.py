"""VLLMEnvRunner: RLlib's EnvRunner contract (sample, evaluate, state) over a vLLM engine.

`sample(requests=[(problem index, group id), ...])` takes the problems the algorithm drew (it
owns the draw order, `dapo_rllib.problem_env.DrawOrder`, and numbers the groups), generates
`group_size` completions of each in one batched call, scores them all in one
`ProblemEnv.score_many` call (each completion becomes its own one-step episode), adds the soft
overlong penalty and returns the episodes. Token ids travel exactly as vLLM sampled them; text
is decoded only for the scorer. `evaluate(...)` samples this runner's shard of the validation
set and returns one record per problem.

New weights stream into the running engine, no restart: `begin_weight_update`, one
`load_weight_bucket` per bucket the learner sends, `finish_weight_update` (see
`dapo_rllib.weight_sync`). The engine and everything vLLM-internal live in
`dapo_rllib.vllm_engine`. This follows the pattern of RLlib's
`EnvRunnerServerForExternalInference`: an EnvRunner + Checkpointable without an RLModule of its
own, holding only the sampler.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
import ray
import torch
from ray.rllib.core import COMPONENT_RL_MODULE, DEFAULT_MODULE_ID
from ray.rllib.env import INPUT_ENV_SPACES
from ray.rllib.env.env_runner import EnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.annotations import override
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.metrics import (
    EPISODE_RETURN_MEAN,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    WEIGHTS_SEQ_NO,
)
from tqdm import tqdm

from dapo_rllib import core_algos
from dapo_rllib.columns import Extras, Info, Metrics
from dapo_rllib.contracts import EvalRecord, ScoreInfo
from dapo_rllib.data.prompts import render_prompt_ids
from dapo_rllib.problem_env import build_env
from dapo_rllib.rl_module import hf_weights
from dapo_rllib.vllm_engine import (
    EngineWeights,
    build_vllm_engine,
    decode_completions,
    request_seed,
    sampling_params,
)
from dapo_rllib.weight_sync import TRANSPORTS

# Seed streams of training and evaluation requests (see vllm_engine.request_seed). Evaluation
# reuses its seeds at every evaluation, so accuracy changes reflect the weights, not the dice.
TRAIN_STREAM = 0
EVAL_STREAM = 1
# Samples per scoring call during validation (see VLLMEnvRunner.evaluate).
EVAL_SCORING_CHUNK_SAMPLES = 256


class VLLMEnvRunner(EnvRunner, Checkpointable):
    """Samples `group_size` completions per prompt with vLLM and returns one-step episodes."""

    def __init__(self, *, config, **kwargs):
        super().__init__(config=config, **kwargs)
        from transformers import AutoTokenizer

        self.worker_index = self.worker_index or 0
        self.make_env()
        self._eval_env = None
        self.tokenizer = AutoTokenizer.from_pretrained(self.config.policy_model_path)
        self.llm = build_vllm_engine(self.config, seed=(self.config.seed or 0) + self.worker_index)
        self._engine_weights = EngineWeights(self.llm, owner=f"env runner {self.worker_index}")
        self._held_seq_no = 0  # of the weights the engine holds (the learner's count of updates)
        # Wall times of the last sample() call, returned to the algorithm with its episodes: a
        # generation round takes as long as its slowest runner, which summed metrics cannot show.
        self.last_sample_timing: dict[str, float] = {}

    # ----- spaces, health, lifecycle --------------------------------------------------------
    @override(EnvRunner)
    def make_env(self) -> None:
        self.env = build_env(self.config.env, self.config.env_config, self.worker_index, self.num_workers)

    @override(EnvRunner)
    def get_spaces(self):
        vocab = len(self.tokenizer)
        obs = gym.spaces.Box(0, vocab - 1, (self.config.max_prompt_length,), np.int64)
        act = gym.spaces.Box(0, vocab - 1, (self.config.max_response_length,), np.int64)
        return {
            INPUT_ENV_SPACES: (self.env.observation_space, self.env.action_space),
            DEFAULT_MODULE_ID: (obs, act),
        }

    @override(EnvRunner)
    def assert_healthy(self):
        assert self.llm is not None and self.env is not None, "VLLMEnvRunner has no engine or env"

    @override(EnvRunner)
    def stop(self):
        self.llm = None

    # ----- sampling ------------------------------------------------------------------------
    def _prompt_ids(self, messages) -> list[int]:
        """A training prompt as the model sees it (see `_fitted_prompt`); a truncated one is
        counted in the runner's metrics (`prompts_left_truncated`)."""
        ids, truncated = self._fitted_prompt(messages)
        if truncated:
            self.metrics.log_value(Metrics.PROMPTS_TRUNCATED, 1, reduce="sum")
        return ids

    def _fitted_prompt(self, messages) -> tuple[list[int], bool]:
        """(the prompt's token ids, chat template where the tokenizer has one, left-truncated to
        max_prompt_length: DAPO keeps the end; whether it was truncated)."""
        ids = render_prompt_ids(self.tokenizer, messages)
        limit = self.config.max_prompt_length
        return list(ids[-limit:]), len(ids) > limit

    def _generate(self, prompt_ids: list[list[int]], params, progress: bool = False):
        from vllm.inputs import TokensPrompt

        start = time.perf_counter()
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompt_ids], params, use_tqdm=progress)
        elapsed = time.perf_counter() - start
        num_tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
        self.last_sample_timing = {Metrics.GENERATION_S: elapsed, Metrics.GENERATED_TOKENS: num_tokens}
        return outputs

    @override(EnvRunner)
    def sample(self, *, requests: list[tuple[int, int]], explore: bool = True, **kwargs) -> list[SingleAgentEpisode]:
        """`group_size` one-step episodes for each `(problem index, group id)` of `requests`.

        The algorithm owns the training env's draw order and numbers the groups: a group's
        sampling seed follows from its id alone, so a share sampled again on another env runner
        (its own died) gives the same completions.
        """
        cfg = self.config
        problems = [self.env.problem(index) for index, _ in requests]
        group_ids = [group_id for _, group_id in requests]
        prompt_ids = [self._prompt_ids(problem.messages) for problem in problems]
        seeds = [request_seed(cfg.seed, TRAIN_STREAM, group_id) for group_id in group_ids]
        outputs = self._generate(
            prompt_ids, sampling_params(cfg, self.tokenizer, n=cfg.group_size, explore=explore, seeds=seeds)
        )

        start = time.perf_counter()
        episodes = []
        repeated = [problem for problem, out in zip(problems, outputs) for _ in out.outputs]
        texts = [
            text
            for ids, out in zip(prompt_ids, outputs)
            for text in decode_completions(self.tokenizer, ids, out.outputs)
        ]
        infos = iter(self.env.score_many(repeated, texts))
        penalties = iter(self._overlong_penalties([len(c.token_ids) for out in outputs for c in out.outputs]))
        for ids, out, group_id in zip(prompt_ids, outputs, group_ids):
            for completion in out.outputs:
                episodes.append(self._episode(ids, completion, group_id, next(infos), next(penalties)))
        self.last_sample_timing[Metrics.SCORING_S] = time.perf_counter() - start

        self.metrics.log_value(NUM_ENV_STEPS_SAMPLED, len(episodes), reduce="sum")
        self.metrics.log_value(NUM_ENV_STEPS_SAMPLED_LIFETIME, len(episodes), reduce="lifetime_sum")
        self.metrics.log_value(NUM_EPISODES, len(episodes), reduce="sum")
        self.metrics.log_value(NUM_EPISODES_LIFETIME, len(episodes), reduce="lifetime_sum")
        self.metrics.log_value(EPISODE_RETURN_MEAN, float(np.mean([e.get_return() for e in episodes])), window=1)
        return episodes

    def _overlong_penalties(self, lengths: list[int]) -> list[float]:
        """The soft overlong punishment of responses of these lengths (0 with overlong_buffer_len=0)."""
        cfg = self.config
        penalties = core_algos.overlong_penalty(
            lengths,
            max_response_length=cfg.max_response_length,
            overlong_buffer_len=cfg.overlong_buffer_len,
            penalty_factor=cfg.overlong_penalty_factor,
        )
        return penalties.tolist()

    def _episode(self, prompt_ids, completion, group_id: int, info: ScoreInfo, penalty: float) -> SingleAgentEpisode:
        response = np.asarray(completion.token_ids, dtype=np.int64)
        truncated = completion.finish_reason == "length"
        rollout_logp = np.asarray(completion.logprobs.logprobs, dtype=np.float32)
        if rollout_logp.shape != response.shape:
            raise RuntimeError(f"vLLM returned {rollout_logp.shape[0]} log-probs for {len(response)} sampled tokens")
        prompt = np.asarray(prompt_ids, dtype=np.int64)
        ep = SingleAgentEpisode(observation_space=None, action_space=None)
        ep.add_env_reset(observation=prompt, infos={Info.GROUND_TRUTH: info[Info.GROUND_TRUTH]})
        ep.add_env_step(
            observation=prompt,
            action=response,
            reward=float(info[Info.SCORE]) + penalty,
            infos=info,
            terminated=True,
            extra_model_outputs={
                Extras.GROUP_ID: group_id,
                Extras.SCORE: float(info[Info.SCORE]),
                Extras.ACC: float(info[Info.ACC]),
                Extras.TRUNCATED: truncated,
                Extras.SCORE_TIMED_OUT: bool(info[Info.SCORE_TIMED_OUT]),
                Extras.OVERLONG_PENALTY: penalty,
                Extras.ROLLOUT_LOGP: rollout_logp,
                WEIGHTS_SEQ_NO: self._held_seq_no,
            },
        )
        return ep.to_numpy()

    # ----- evaluation on the held-out split ---------------------------------------------
    def _evaluation_env(self) -> gym.Env:
        """The validation env: `config.evaluation_env_config()` (eval_dataset, evaluation_config)."""
        if self._eval_env is None:
            eval_cfg = self.config if self.config.in_evaluation else self.config.get_evaluation_config_object()
            self._eval_env = build_env(
                eval_cfg.env, self.config.evaluation_env_config(), self.worker_index, self.num_workers
            )
        return self._eval_env

    def evaluate(
        self, *, num_samples: int, max_problems: int | None = None, progress: bool = False
    ) -> list[EvalRecord]:
        """`num_samples` scored samples of each problem in this runner's shard of the validation set.

        Problems (the first `max_problems`, or all) are split round-robin over the runners
        (worker_index 1..n; a local runner takes them all) and sampled with the evaluation
        settings and a fixed seed per problem, so successive evaluations differ only by the
        weights. Returns one `dapo_rllib.contracts.EvalRecord` per problem; the caller merges
        the shards and computes the metrics. `progress` shows progress bars.
        """
        env = self._evaluation_env()
        count = env.num_problems if max_problems is None else min(max_problems, env.num_problems)
        shards = max(self.num_workers, 1)
        mine = [i for i in range(count) if i % shards == max(self.worker_index - 1, 0)]
        # Truncations are reported per record, apart from the training metrics.
        fitted = {i: self._fitted_prompt(env.problem(i).messages) for i in mine}
        prompts = [fitted[i][0] for i in mine]
        seeds = [request_seed(self.config.seed, EVAL_STREAM, i) for i in mine]
        params = sampling_params(self.config, self.tokenizer, n=num_samples, explore=False, seeds=seeds)
        outputs = self._generate(prompts, params, progress=progress)
        scoring = tqdm(total=len(mine) * num_samples, desc="scoring", unit="sample", disable=not progress)
        # Scored a chunk of problems at a time: enough samples to keep a parallel scorer (the
        # code env's sandbox pool) busy, few enough for the progress bar to move.
        per_chunk = max(1, EVAL_SCORING_CHUNK_SAMPLES // num_samples)
        pairs = list(zip(mine, outputs))
        records = []
        for start in range(0, len(pairs), per_chunk):
            chunk = pairs[start : start + per_chunk]
            # Evaluation samples are detokenized by vLLM (`sampling_params`).
            problems = [env.problem(i) for i, out in chunk for _ in out.outputs]
            infos = iter(env.score_many(problems, [c.text for _, out in chunk for c in out.outputs]))
            for i, out in chunk:
                problem = env.problem(i)
                records.append(
                    EvalRecord.from_infos(
                        [next(infos) for _ in out.outputs],
                        problem_index=i,
                        data_source=problem.data_source,
                        ground_truth=problem.ground_truth,
                        length=[len(c.token_ids) for c in out.outputs],
                        truncated=[c.finish_reason == "length" for c in out.outputs],
                        prompt_truncated=fitted[i][1],
                    )
                )
            scoring.update(sum(len(out.outputs) for _, out in chunk))
        scoring.close()
        return records

    # ----- weights: streamed in buckets (see dapo_rllib.weight_sync) ----------------------
    def begin_weight_update(self) -> None:
        """Open a weight update; the engine must not generate until `finish_weight_update`."""
        self._engine_weights.begin()

    def load_weight_bucket(self, handle, transport: str = "object_store") -> None:
        """Receive one bucket and load the parameters it completes."""
        self._engine_weights.load_bucket(TRANSPORTS[transport]().receive(handle))

    def finish_weight_update(self, seq_no: int) -> None:
        """Close the update; raises unless every engine parameter got new values."""
        self.metrics.log_value(Metrics.WEIGHT_LOAD_S, self._engine_weights.finish(), reduce="sum")
        self._held_seq_no = seq_no

    def load_weights(self, state_dict: dict[str, Any], seq_no: int | None = None) -> None:
        """Load a whole Hugging Face-named state dict that is already in this process."""
        self.begin_weight_update()
        self._engine_weights.load([(name, torch.as_tensor(value)) for name, value in state_dict.items()])
        self.finish_weight_update(self._held_seq_no if seq_no is None else seq_no)

    def engine_parameters(self, names: list[str]) -> dict[str, np.ndarray]:
        """Copies of the named parameters as the engine holds them (for tests and debugging)."""
        return self._engine_weights.parameters(names)

    @override(Checkpointable)
    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict[str, Any]:
        """Nothing to save: weights come from the learner, the draw order is the algorithm's."""
        return {}

    @override(Checkpointable)
    def set_state(self, state: dict[str, Any]) -> None:
        """Load the RL module weights in `state`, if it has any newer than those held.

        RLlib's own weight sync (`EnvRunnerGroup.sync_weights`, run by `evaluate()`, `set_state`
        and restores) sends the module's inference-only state, which for DAPO's module is empty
        (see `CausalLMRLModule.get_non_inference_attributes`): the engine takes weights from the
        streamed sync only, and such a state changes nothing here.
        """
        seq_no = state.get(WEIGHTS_SEQ_NO, 0)
        module_state = state.get(COMPONENT_RL_MODULE)
        if isinstance(module_state, ray.ObjectRef):  # RLlib's EnvRunnerGroup.sync_weights puts it there
            module_state = ray.get(module_state)
        if module_state:
            module_state = module_state.get(DEFAULT_MODULE_ID, module_state)
        if module_state and (seq_no == 0 or seq_no > self._held_seq_no):
            self.load_weights(hf_weights(module_state), seq_no)
        if seq_no > 0:
            self._held_seq_no = seq_no

    @override(EnvRunner)
    def get_metrics(self):
        return self.metrics.reduce()

    @override(Checkpointable)
    def get_ctor_args_and_kwargs(self):
        return ((), {"config": self.config})

    @override(Checkpointable)
    def get_checkpointable_components(self):
        return []
