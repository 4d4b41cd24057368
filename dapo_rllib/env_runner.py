"""VLLMEnvRunner: an RLlib EnvRunner that samples groups of completions with a vLLM engine.

One `sample(problem_indices=..., first_group_id=...)` call takes the problems the algorithm
drew (it owns the draw order, `envs.problem_env.DrawOrder`), asks vLLM for `group_size` completions of each in one batched `generate`, scores them all in one
`ProblemEnv.score_many` call (each completion becomes its own one-step episode), adds the soft
overlong penalty, and returns the episodes. Token ids travel exactly as vLLM sampled them;
text is decoded only for the scorer.

New weights stream into the running engine, no restart: `begin_weight_update`, one
`load_weight_bucket` per bucket the learner sends, `finish_weight_update` (see
`dapo_rllib.weight_sync`). vLLM processes each layer as soon as all its parameters have arrived.
`set_state` with an RL module state (RLlib's own weight sync, checkpoints) takes the same path.
This follows the pattern of RLlib's `EnvRunnerServerForExternalInference`: an EnvRunner +
Checkpointable without an RLModule of its own, holding only the sampler.
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
from ray.rllib.env.env_context import EnvContext
from ray.rllib.env.env_runner import EnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.metrics import (
    EPISODE_RETURN_MEAN,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    WEIGHTS_SEQ_NO,
)
from ray.tune.registry import ENV_CREATOR, _global_registry
from tqdm import tqdm

from dapo_rllib import core_algos
from dapo_rllib.columns import Extras, Metrics
from dapo_rllib.data.prompts import render_prompt_ids
from dapo_rllib.rl_module import hf_weights
from dapo_rllib.weight_sync import TRANSPORTS, BucketAssembler
from envs.problem_env import ProblemEnv

# Seed streams of training and evaluation requests (see VLLMEnvRunner._request_seed). Evaluation
# reuses its seeds at every evaluation, so accuracy changes reflect the weights, not the dice.
TRAIN_STREAM = 0
EVAL_STREAM = 1
# Samples per scoring call during validation (see VLLMEnvRunner.evaluate).
EVAL_SCORING_CHUNK_SAMPLES = 256


def make_env(env_spec, env_config: dict, worker_index: int, num_workers: int) -> ProblemEnv:
    """Build the environment named in `config.environment(...)`: a registered name or a class.

    It must be a `ProblemEnv`: the runner draws problems from it and scores whole rounds with it.
    """
    ctx = EnvContext(env_config or {}, worker_index=worker_index, num_workers=num_workers)
    # Tune keeps registered envs in a private registry; RLlib's own env runners read it too.
    if isinstance(env_spec, str) and _global_registry.contains(ENV_CREATOR, env_spec):
        env = _global_registry.get(ENV_CREATOR, env_spec)(ctx)
    elif isinstance(env_spec, type) and issubclass(env_spec, gym.Env):
        env = env_spec(ctx)
    else:
        raise ValueError(
            f"environment {env_spec!r} is neither a name registered with ray.tune.register_env nor a "
            "gymnasium.Env subclass; `import dapo_rllib` registers 'dapo_math' and 'dapo_code'"
        )
    if not isinstance(env, ProblemEnv):
        raise TypeError(
            f"environment {env_spec!r} built a {type(env).__name__}; VLLMEnvRunner needs an "
            "envs.ProblemEnv subclass (it draws problems and scores completions: see the README's "
            "'Your own task type')"
        )
    return env


def build_vllm_engine(config, seed: int):
    """An in-process vLLM engine for `config.model_path` (CPU build here, CUDA build on GPUs)."""
    from vllm import LLM  # after `import dapo_rllib`, which sets vLLM's environment defaults

    kwargs = dict(
        model=str(config.model_path),
        dtype=config.model_dtype,
        seed=seed,
        max_model_len=config.max_prompt_length + config.max_response_length,
        enforce_eager=not torch.cuda.is_available(),
        gpu_memory_utilization=0.5 if torch.cuda.is_available() else 0.1,
        # The sampled tokens' log-probs after temperature: the distribution sampled from, the
        # one the learner's log-probs are of (rollout_logp_abs_diff, rollout_correction).
        logprobs_mode="processed_logprobs",
    )
    if not torch.cuda.is_available():
        # Per-request seeds (see VLLMEnvRunner._sampling_params) crash vLLM's CPU backend when a
        # prefill is chunked ("CPU Generator does not use offset"): prefill prompts whole.
        max_model_len = kwargs["max_model_len"]
        kwargs.update(enable_chunked_prefill=False, max_num_batched_tokens=max(4096, max_model_len))
    kwargs.update(config.vllm_engine_kwargs)
    return LLM(**kwargs)


class VLLMEnvRunner(EnvRunner, Checkpointable):
    """Samples `group_size` completions per prompt with vLLM and returns one-step episodes."""

    def __init__(self, *, config, **kwargs):
        super().__init__(config=config, **kwargs)
        from transformers import AutoTokenizer

        self.worker_index = self.worker_index or 0
        self.env = make_env(self.config.env, self.config.env_config, self.worker_index, self.num_workers)
        self._eval_env = None
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.config.model_path))
        self.llm = build_vllm_engine(self.config, seed=(self.config.seed or 0) + self.worker_index)
        self._weights_seq_no = 0
        self._weight_update = None  # (BucketAssembler, names loaded, start time) while one is open
        # Wall times of the last sample() call, returned to the algorithm with its episodes: a
        # generation round takes as long as its slowest runner, which summed metrics cannot show.
        self.last_sample_timing: dict[str, float] = {}

    # ----- spaces, health, lifecycle --------------------------------------------------------
    def get_spaces(self):
        vocab = len(self.tokenizer)
        obs = gym.spaces.Box(0, vocab - 1, (self.config.max_prompt_length,), np.int64)
        act = gym.spaces.Box(0, vocab - 1, (self.config.max_response_length,), np.int64)
        return {
            INPUT_ENV_SPACES: (self.env.observation_space, self.env.action_space),
            DEFAULT_MODULE_ID: (obs, act),
        }

    def assert_healthy(self):
        assert self.llm is not None and self.env is not None, "VLLMEnvRunner has no engine or env"

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

    def _sampling_params(self, *, n: int, explore: bool, seeds: list[int]) -> list:
        """One SamplingParams per prompt, each with its own seed.

        Per-request seeds make a group's completions a function of (weights, seed, prompt)
        only, so a run resumed from a checkpoint samples exactly what the uninterrupted run
        would have, whatever else the engine generated in between. Training samples carry the
        sampled tokens' log-probs (flat: a few lists per completion, not a dict per token).
        """
        from vllm import SamplingParams

        cfg = self.config
        return [
            SamplingParams(
                n=n,
                seed=seed,
                temperature=cfg.temperature if explore else cfg.eval_temperature,
                top_p=cfg.top_p if explore else cfg.eval_top_p,
                max_tokens=cfg.max_response_length,
                logprobs=0 if explore else None,
                flat_logprobs=explore,
                # Training samples get their text from `_texts`: vLLM's detokenizer would also
                # decode every sampled token for its log-prob entry, which nothing here reads and
                # which costs ~10% of the generation throughput on the tiny example.
                detokenize=not (explore and self._backend_tokenizer() is not None),
            )
            for seed in seeds
        ]

    def _request_seed(self, *stream: int) -> int:
        """A 31-bit seed for one request, derived from the run seed and the request's stream: the
        same on whichever env runner samples it."""
        entropy = [self.config.seed or 0, *stream]
        return int(np.random.SeedSequence(entropy).generate_state(1)[0] >> 1)

    def _generate(self, prompt_ids: list[list[int]], params, progress: bool = False):
        from vllm.inputs import TokensPrompt

        start = time.perf_counter()
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompt_ids], params, use_tqdm=progress)
        elapsed = time.perf_counter() - start
        num_tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
        self.last_sample_timing = {Metrics.GENERATION_S: elapsed, Metrics.GENERATED_TOKENS: num_tokens}
        return outputs

    def _backend_tokenizer(self):
        """The Rust tokenizer that `_texts` decodes with; None where the tokenizer has none."""
        return getattr(self.tokenizer, "backend_tokenizer", None)

    def _texts(self, prompt_ids: list[int], completions: list) -> list[str]:
        """The completions' text for the scorer, as vLLM's detokenizer returns it.

        Its algorithm for Rust-backed tokenizers: a DecodeStream primed with the prompt (leading
        spaces decode as in context), the stop token left out, the bytes of a character still
        unfinished at the end (a response cut mid-character) held back. Without a Rust backend
        vLLM decoded them (see `_sampling_params`).
        """
        from tokenizers.decoders import DecodeStream

        backend = self._backend_tokenizer()
        if backend is None:
            return [c.text for c in completions]
        texts = []
        for c in completions:
            stream = DecodeStream(ids=prompt_ids, skip_special_tokens=True)
            pieces = []
            for token in c.token_ids[:-1] if c.finish_reason == "stop" else c.token_ids:
                try:
                    pieces.append(stream.step(backend, token))
                except Exception as error:  # tokenizers' "Invalid prefix": restart, as vLLM does
                    if not str(error).startswith("Invalid prefix"):
                        raise
                    stream = DecodeStream(skip_special_tokens=True)
                    pieces.append(stream.step(backend, token))
            texts.append("".join(filter(None, pieces)))
        return texts

    @staticmethod
    def _score(env, problems: list, completions: list) -> list[dict]:
        """The env's info for each completion (of vLLM's outputs), scored against its problem."""
        return env.score_many(problems, [c.text for c in completions])

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
        seeds = [self._request_seed(TRAIN_STREAM, group_id) for group_id in group_ids]
        outputs = self._generate(prompt_ids, self._sampling_params(n=cfg.group_size, explore=explore, seeds=seeds))

        start = time.perf_counter()
        episodes = []
        repeated = [problem for problem, out in zip(problems, outputs) for _ in out.outputs]
        texts = [text for ids, out in zip(prompt_ids, outputs) for text in self._texts(ids, out.outputs)]
        infos = iter(self.env.score_many(repeated, texts))
        for ids, out, group_id in zip(prompt_ids, outputs, group_ids):
            for completion in out.outputs:
                episodes.append(self._episode(ids, completion, group_id, next(infos)))
        self.last_sample_timing[Metrics.SCORING_S] = time.perf_counter() - start

        self.metrics.log_value(NUM_ENV_STEPS_SAMPLED, len(episodes), reduce="sum")
        self.metrics.log_value(NUM_ENV_STEPS_SAMPLED_LIFETIME, len(episodes), reduce="lifetime_sum")
        self.metrics.log_value(NUM_EPISODES, len(episodes), reduce="sum")
        self.metrics.log_value(NUM_EPISODES_LIFETIME, len(episodes), reduce="lifetime_sum")
        self.metrics.log_value(EPISODE_RETURN_MEAN, float(np.mean([e.get_return() for e in episodes])), window=1)
        return episodes

    def _episode(self, prompt_ids, completion, group_id: int, info: dict) -> SingleAgentEpisode:
        cfg = self.config
        response = np.asarray(completion.token_ids, dtype=np.int64)
        truncated = completion.finish_reason == "length"
        penalty = 0.0
        if cfg.overlong_buffer_len > 0:
            penalty = float(
                core_algos.overlong_penalty(
                    torch.tensor([len(response)]),
                    max_response_length=cfg.max_response_length,
                    overlong_buffer_len=cfg.overlong_buffer_len,
                    penalty_factor=cfg.overlong_penalty_factor,
                )[0]
            )
        rollout_logp = np.asarray(completion.logprobs.logprobs, dtype=np.float32)
        if rollout_logp.shape != response.shape:
            raise RuntimeError(f"vLLM returned {rollout_logp.shape[0]} log-probs for {len(response)} sampled tokens")
        prompt = np.asarray(prompt_ids, dtype=np.int64)
        ep = SingleAgentEpisode(observation_space=None, action_space=None)
        ep.add_env_reset(observation=prompt, infos={"ground_truth": info["ground_truth"]})
        ep.add_env_step(
            observation=prompt,
            action=response,
            reward=float(info["score"]) + penalty,
            infos=info,
            terminated=True,
            extra_model_outputs={
                Extras.GROUP_ID: group_id,
                Extras.SCORE: float(info["score"]),
                Extras.ACC: float(info["acc"]),
                Extras.TRUNCATED: truncated,
                Extras.SCORE_TIMED_OUT: bool(info["score_timed_out"]),
                Extras.OVERLONG_PENALTY: penalty,
                Extras.ROLLOUT_LOGP: rollout_logp,
                WEIGHTS_SEQ_NO: self._weights_seq_no,
            },
        )
        return ep.to_numpy()

    # ----- evaluation on the held-out split ---------------------------------------------
    def _evaluation_env(self) -> gym.Env:
        """The validation env: `config.evaluation_env_config()` (eval_dataset, evaluation_config)."""
        if self._eval_env is None:
            eval_cfg = self.config if self.config.in_evaluation else self.config.get_evaluation_config_object()
            self._eval_env = make_env(eval_cfg.env, self.config.evaluation_env_config(), self.worker_index, self.num_workers)
        return self._eval_env

    def evaluate(self, *, num_samples: int, max_problems: int | None = None, progress: bool = False) -> list[dict[str, Any]]:
        """`num_samples` scored samples of each problem in this runner's shard of the validation set.

        Problems (the first `max_problems`, or all) are split round-robin over the runners
        (worker_index 1..n; a local runner takes them all) and sampled with the evaluation
        settings and a fixed seed per problem, so successive evaluations differ only by the
        weights. Returns one record per problem (see `dapo_rllib.eval_metrics.ProblemSamples`,
        and `prompt_truncated`: its prompt was longer than max_prompt_length);
        the caller merges the shards and computes the metrics. `progress` shows progress bars.
        """
        env = self._evaluation_env()
        count = env.num_problems if max_problems is None else min(max_problems, env.num_problems)
        shards = max(self.num_workers, 1)
        mine = [i for i in range(count) if i % shards == max(self.worker_index - 1, 0)]
        # Truncations are reported per record, apart from the training metrics.
        fitted = {i: self._fitted_prompt(env.problem(i).messages) for i in mine}
        prompts = [fitted[i][0] for i in mine]
        seeds = [self._request_seed(EVAL_STREAM, i) for i in mine]
        outputs = self._generate(prompts, self._sampling_params(n=num_samples, explore=False, seeds=seeds), progress=progress)
        scoring = tqdm(total=len(mine) * num_samples, desc="scoring", unit="sample", disable=not progress)
        # Scored a chunk of problems at a time: enough samples to keep a parallel scorer (the
        # code env's sandbox pool) busy, few enough for the progress bar to move.
        per_chunk = max(1, EVAL_SCORING_CHUNK_SAMPLES // num_samples)
        pairs = list(zip(mine, outputs))
        records = []
        for start in range(0, len(pairs), per_chunk):
            chunk = pairs[start : start + per_chunk]
            infos = iter(self._score(env, [env.problem(i) for i, out in chunk for _ in out.outputs], [c for _, out in chunk for c in out.outputs]))
            for i, out in chunk:
                records.append(self._eval_record(env.problem(i), i, out.outputs, [next(infos) for _ in out.outputs]))
                records[-1]["prompt_truncated"] = fitted[i][1]
            scoring.update(sum(len(out.outputs) for _, out in chunk))
        scoring.close()
        return records

    @staticmethod
    def _eval_record(problem, problem_index: int, completions: list, infos: list[dict]) -> dict[str, Any]:
        """One problem's scored samples (the fields of `dapo_rllib.eval_metrics.ProblemSamples`)."""
        return {
            "problem_index": problem_index,
            "data_source": problem.data_source,
            "ground_truth": problem.ground_truth,
            "acc": [bool(info["acc"]) for info in infos],
            "pred": [info["pred"] for info in infos],
            "length": [len(c.token_ids) for c in completions],
            "truncated": [c.finish_reason == "length" for c in completions],
            "timed_out": [bool(info["score_timed_out"]) for info in infos],
        }

    # ----- weights: streamed in buckets (see dapo_rllib.weight_sync) ----------------------
    def begin_weight_update(self) -> None:
        """Open a weight update. Until `finish_weight_update` the engine must not generate:
        vLLM has moved the layers still to be loaded aside."""
        self.llm.collective_rpc(_begin_reload)
        self._weight_update = (BucketAssembler(), set(), time.perf_counter())

    def load_weight_bucket(self, handle, transport: str = "object_store") -> None:
        """Receive one bucket and load the parameters it completes."""
        assembler = self._open_update()[0]
        self._load_complete(assembler.add(TRANSPORTS[transport]().receive(handle)))

    def _load_complete(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        """Hand whole (HF name, tensor) parameters to the engine; records what they filled."""
        if weights:
            self._open_update()[1].update(self.llm.collective_rpc(_load_into_model, kwargs={"weights": weights})[0])

    def finish_weight_update(self, seq_no: int) -> None:
        """Close the update; raises unless every engine parameter got new values."""
        assembler, loaded, start = self._open_update()
        self._weight_update = None
        engine_names = self.llm.collective_rpc(_finish_reload)[0]
        missing = sorted(set(engine_names) - loaded) + assembler.incomplete()
        if missing:
            raise RuntimeError(f"env runner {self.worker_index}: the weight update left {len(missing)} parameters without new values: {missing[:5]}")
        # Cached prefixes were computed with the old weights.
        self.llm.reset_prefix_cache()
        self._weights_seq_no = seq_no
        self.metrics.log_value(Metrics.WEIGHT_LOAD_S, time.perf_counter() - start, reduce="sum")

    def _open_update(self):
        if self._weight_update is None:
            raise RuntimeError("no weight update is open: call begin_weight_update first")
        return self._weight_update

    def load_weights(self, state_dict: dict[str, Any], seq_no: int | None = None) -> None:
        """Load a whole Hugging Face-named state dict that is already in this process."""
        self.begin_weight_update()
        self._load_complete([(name, torch.as_tensor(value)) for name, value in state_dict.items()])
        self.finish_weight_update(self._weights_seq_no if seq_no is None else seq_no)

    def engine_parameters(self, names: list[str]) -> dict[str, np.ndarray]:
        """Copies of the named parameters as the engine holds them (for tests and debugging)."""

        def read(worker, wanted=tuple(names)):
            params = dict(worker.model_runner.model.named_parameters())
            return {n: params[n].detach().float().cpu().numpy() for n in wanted if n in params}

        return self.llm.collective_rpc(read)[0]

    def get_state(self, components=None, *, not_components=None, **kwargs) -> dict[str, Any]:
        """Nothing to save: weights come from the learner, the draw order is the algorithm's."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """Load the RL module's weights in `state` (RLlib's weight sync), if newer than those held."""
        seq_no = state.get(WEIGHTS_SEQ_NO, 0)
        if COMPONENT_RL_MODULE in state and (seq_no == 0 or seq_no > self._weights_seq_no):
            module_state = state[COMPONENT_RL_MODULE]
            if isinstance(module_state, ray.ObjectRef):  # RLlib's EnvRunnerGroup.sync_weights puts it there
                module_state = ray.get(module_state)
            module_state = module_state.get(DEFAULT_MODULE_ID, module_state)
            self.load_weights(hf_weights(module_state), seq_no)
        if seq_no > 0:
            self._weights_seq_no = seq_no

    def get_metrics(self):
        return self.metrics.reduce()

    def get_ctor_args_and_kwargs(self):
        return ((), {"config": self.config})

    def get_checkpointable_components(self):
        return []


# ----- functions run on vLLM's worker through `collective_rpc` (the worker is their first argument)
# vLLM's layerwise reload, opened and closed around the buckets rather than in one call: it holds
# each layer's incoming parameters until the layer is complete, then processes it into place.


def _begin_reload(worker) -> None:
    from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

    initialize_layerwise_reload(worker.model_runner.get_model())


def _load_into_model(worker, weights: list) -> set[str]:
    """Load (HF name, tensor) pairs; returns the engine parameters they filled."""
    return set(worker.model_runner.get_model().load_weights(iter(weights)))


def _finish_reload(worker) -> list[str]:
    """Process what is left and return the names of all engine parameters."""
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

    model = worker.model_runner.get_model()
    finalize_layerwise_reload(model, worker.model_runner.vllm_config.model_config)
    _reprocess_tied_layers(model)
    return [name for name, _ in model.named_parameters()]


def _reprocess_tied_layers(model) -> None:
    """Process again every layer whose weight is another's (a tied output head).

    vLLM's reload processes a layer when its own parameters arrive; a tied head receives none,
    yet on CPU it keeps a packed copy of the embedding for its matmul, which would go on
    computing logits with the old weights (measured: mean |log-prob difference| 0.02 after one
    reload, instead of 5e-7).
    """
    layers_by_weight: dict[int, list] = {}
    for layer in model.modules():
        weight = layer._parameters.get("weight")
        if weight is not None and getattr(layer, "quant_method", None) is not None:
            layers_by_weight.setdefault(id(weight), []).append(layer)
    for layers in layers_by_weight.values():
        if len(layers) > 1:
            for layer in layers:
                layer.quant_method.process_weights_after_loading(layer)
