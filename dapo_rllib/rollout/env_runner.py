"""VLLMEnvRunner: RLlib's EnvRunner contract (sample, evaluate, state) over a vLLM engine.

`sample(requests=[(problem index, group id), ...])` takes the problems the algorithm drew (it
owns the draw order, `dapo_rllib.tasks.problem_env.DrawOrder`, and numbers the groups), runs
`group_size` episodes of each, every one on its own twin of the environment, turn by turn
(`dapo_rllib.rollout.TurnLoop`: a batched generation per turn, the environments' steps, their
messages appended as token ids), adds the soft overlong penalty and returns RLlib episodes with a
step per model turn. Token ids travel exactly as vLLM sampled them; text is decoded only for the
environment. `evaluate(...)` runs this runner's shard of the validation set the same way and
returns one record per problem. An environment of two-player games (`dapo_rllib.tasks.game_env.GameEnv`)
is played by `dapo_rllib.rollout.game_sampling` instead: an episode per seat the trained policy plays.

New weights stream into the running engine, no restart: `begin_weight_update`, one
`load_weight_bucket` per bucket the learner sends, `finish_weight_update` (see
`dapo_rllib.rollout.weight_sync`). The engine and everything vLLM-internal live in
`dapo_rllib.rollout.vllm_engine` (vLLM's private members behind `dapo_rllib.vllm_private`). This follows the pattern of RLlib's
`EnvRunnerServerForExternalInference`: an EnvRunner + Checkpointable without an RLModule of its
own, holding only the sampler.
"""

from __future__ import annotations

import dataclasses
import logging
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

from dapo_rllib.columns import Extras, Info, Metrics
from dapo_rllib.contracts import EvalRecord
from dapo_rllib.models.lora import POLICY_ADAPTER, lora_adapter_config
from dapo_rllib.models.rl_module import hf_weights
from dapo_rllib.rollout.game_sampling import GameSampling
from dapo_rllib.rollout.matchups import LeagueDraw
from dapo_rllib.rollout.timing import RolloutTiming
from dapo_rllib.rollout.turn_loop import EndReason, EpisodeRollout, Turn, TurnLoop, TurnSettings
from dapo_rllib.rollout.vllm_engine import (
    EVAL_STREAM,
    TRAIN_STREAM,
    EngineAdapter,
    EngineSettings,
    EngineWeights,
    build_vllm_engine,
    request_seed,
    sampling_params,
)
from dapo_rllib.rollout.weight_sync import TRANSPORTS
from dapo_rllib.tasks.chat_turns import TurnRenderer, check_renders_tools
from dapo_rllib.tasks.env_factory import build_env
from dapo_rllib.tasks.env_failures import EnvFailure
from dapo_rllib.tasks.game_env import GameEnv
from dapo_rllib.tasks.rewards.overlong import OverlongSettings, overlong_penalty
from dapo_rllib.tasks.tools import load_tool_call_parser

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RunnerSettings:
    """What an env runner reads of the algorithm's config, built once from the config RLlib hands it
    (`from_config`, the one place that knows `DAPOConfig`'s shape): as verl hands each worker a config of its
    own, a setting renamed in the algorithm breaks that mapping only. RLlib's own settings (env, env_config,
    seed, policies) are read off the config itself.

    Attributes:
        engine: The vLLM engine's (`EngineSettings`).
        turns: Turns, tools and environment deadlines.
        overlong: The soft overlong punishment of the episodes' rewards.
        group_size: Episodes sampled per problem.
        eval_env, eval_env_config: The validation environment and its config (`DAPOConfig.evaluation_env_config`).
    """

    engine: EngineSettings
    turns: TurnSettings
    overlong: OverlongSettings
    group_size: int
    eval_env: Any
    eval_env_config: dict

    @classmethod
    def from_config(cls, config) -> RunnerSettings:
        """The settings of an env runner of `config` (a `DAPOConfig`, or its evaluation copy)."""
        eval_config = config if config.in_evaluation else config.get_evaluation_config_object()
        return cls(
            engine=EngineSettings.from_config(config),
            turns=config.turn_settings,
            overlong=config.overlong_settings,
            group_size=config.group_size,
            eval_env=eval_config.env,
            eval_env_config=config.evaluation_env_config(),
        )


class VLLMEnvRunner(EnvRunner, Checkpointable):
    """Runs `group_size` episodes per prompt with vLLM, turn by turn, and returns them as RLlib episodes."""

    def __init__(self, *, config, **kwargs):
        super().__init__(config=config, **kwargs)
        from transformers import AutoTokenizer

        self.worker_index = self.worker_index or 0
        self.settings = RunnerSettings.from_config(config)
        self.make_env()
        self._eval_env = None
        self._curriculum: dict[str, int] | None = None  # the curriculum levels the driver set (None: none)
        engine = self.settings.engine
        self.tokenizer = AutoTokenizer.from_pretrained(engine.policy_model_path)
        self.llm = build_vllm_engine(engine, seed=(self.config.seed or 0) + self.worker_index)
        owner = f"env runner {self.worker_index}"
        if engine.adapter is None:  # every weight (full fine-tuning, or merged adapters)
            self._engine_weights = EngineWeights(self.llm, owner=owner)
        else:  # the base model serves the learner's adapter (dapo_rllib.models.lora)
            adapter_config = lora_adapter_config(engine.policy_model_path, engine.adapter)
            self._engine_weights = EngineAdapter(self.llm, adapter_config, owner=owner)
        self._held_seq_no = 0  # of the weights the engine holds (the learner's count of updates)
        self._tool_parser = load_tool_call_parser(self.settings.turns.tool_call_format)
        self._renderers: dict[type, TurnRenderer] = {}  # per environment class (its tools)
        self._train_loop, self._eval_loop = self._turn_loop(explore=True), self._turn_loop(explore=False)
        renderer = self._renderer(self.env)  # a chat template that cannot show the env's tools is refused here
        self._games = (
            GameSampling(
                self.config, self.settings.group_size, self._train_loop, self._eval_loop, renderer, self._fitted_prompt
            )
            if isinstance(self.env, GameEnv)
            else None
        )
        # Wall times of the last sample() call, returned to the algorithm with its episodes: a
        # generation round takes as long as its slowest runner, which summed metrics cannot show.
        self.last_sample_timing = RolloutTiming()  # of the last sample() or evaluate() call

    # ----- spaces, health, lifecycle --------------------------------------------------------
    @override(EnvRunner)
    def make_env(self) -> None:
        self.env = build_env(self.config.env, self.config.env_config, self.worker_index, self.num_workers)

    @override(EnvRunner)
    def get_spaces(self):
        vocab = len(self.tokenizer)
        sampler = self.settings.engine.sampler
        obs = gym.spaces.Box(0, vocab - 1, (sampler.max_prompt_length,), np.int64)
        act = gym.spaces.Box(0, vocab - 1, (sampler.max_response_length,), np.int64)
        return {
            INPUT_ENV_SPACES: (self.env.observation_space, self.env.action_space),
            DEFAULT_MODULE_ID: (obs, act),
        }

    @override(EnvRunner)
    def assert_healthy(self):
        assert self.llm is not None and self.env is not None, "VLLMEnvRunner has no engine or env"

    @override(EnvRunner)
    def stop(self):
        self._engine_weights.close()
        self.llm = None

    # ----- sampling ------------------------------------------------------------------------
    def _fitted_prompt(self, renderer: TurnRenderer, messages) -> tuple[list[int], bool]:
        """(the prompt's token ids, chat template where the tokenizer has one, left-truncated to
        max_prompt_length: DAPO keeps the end; whether it was truncated)."""
        ids = renderer.prompt_ids(messages)
        limit = self.settings.engine.sampler.max_prompt_length
        return list(ids[-limit:]), len(ids) > limit

    def _start_episodes(self, env, loop: TurnLoop, starts: list[tuple[int, tuple[int, ...]]]) -> list[EpisodeRollout]:
        """An episode for each `(problem index, seed stream)` of `starts`, each on a twin of `env`, reset (side by
        side, on `loop`'s environment calls) and with its prompt rendered; one whose reset failed has ended."""
        twins = [env.spawn() for _ in starts]
        resets = loop.env_calls.map(
            lambda k: twins[k].reset(options={Info.PROBLEM_INDEX: starts[k][0]}), range(len(starts))
        )
        rollouts = []
        for twin, (index, seed_stream), reset in zip(twins, starts, resets):
            if isinstance(reset, EnvFailure):
                rollout = EpisodeRollout(twin, index, [], seed_stream, self._renderer(env))
                rollout.fail(reset)
            else:
                messages, info = reset
                renderer = self._renderer(env, info[Info.TOOLS])
                prompt_ids, truncated = self._fitted_prompt(renderer, messages)
                rollout = EpisodeRollout(twin, index, prompt_ids, seed_stream, renderer, prompt_truncated=truncated)
            rollouts.append(rollout)
        return rollouts

    def _renderer(self, env, tools: list[dict] | None = None) -> TurnRenderer:
        """The turn renderer of `env`'s tools (its reset info's `tools`, or `env.tools`), checked to show
        them when it has any."""
        tools = [tool.schema for tool in env.tools] if tools is None else tools
        renderer = self._renderers.get(type(env))
        if renderer is None or renderer.tools != tools:
            if tools:
                check_renders_tools(self.tokenizer)
            renderer = TurnRenderer(self.tokenizer, tools, self.settings.turns.max_tool_response_tokens)
            self._renderers[type(env)] = renderer
        return renderer

    def _turn_loop(self, explore: bool) -> TurnLoop:
        from vllm.inputs import TokensPrompt

        engine, turns, run_seed = self.settings.engine, self.settings.turns, self.config.seed

        def generate(prompts, params, policies):
            prompts = [TokensPrompt(prompt_token_ids=p) for p in prompts]
            return self.llm.generate(prompts, params, use_tqdm=False, lora_request=self._adapters(policies))

        return TurnLoop(
            generate=generate,
            make_params=lambda seed, max_tokens, stop: sampling_params(
                engine, self.tokenizer, explore=explore, seed=seed, max_tokens=max_tokens, stop=stop
            ),
            tokenizer=self.tokenizer,
            parser=self._tool_parser,
            max_turns=turns.max_turns,
            budget=engine.sampler.max_response_length,
            seed=lambda stream: request_seed(run_seed, *stream),
            env_timeout_s=turns.env_timeout_s,
        )

    def _adapters(self, policies: list[str]):
        """The LoRA request of each prompt's policy: None for full fine-tuning; with LoRA, the trained policy's
        adapter of the last sync (None before it: the base model), or a league snapshot's. One request where
        all prompts share it."""
        held = getattr(self._engine_weights, "lora_request", None)
        if set(policies) <= {DEFAULT_MODULE_ID}:
            return held
        # (vLLM's CPU backend would sample a prompt without an adapter from another prompt's adapter.)
        if held is None:
            raise RuntimeError(
                f"env runner {self.worker_index} was asked for {sorted(set(policies) - {DEFAULT_MODULE_ID})} beside "
                "the trained policy, which has no adapter: league snapshots are LoRA adapters (lora_sync='adapter'), "
                "served once the trained policy's adapter is synced"
            )
        shelf = self._engine_weights.shelf
        return [held if policy == DEFAULT_MODULE_ID else shelf.request(policy) for policy in policies]

    @override(EnvRunner)
    def sample(self, *, requests: list[tuple[int, int]], explore: bool = True, **kwargs) -> list[SingleAgentEpisode]:
        """`group_size` episodes for each `(problem index, group id)` of `requests`, run turn by turn.

        The algorithm owns the training env's draw order and numbers the groups: an episode's sampling
        seeds follow from its group id, its place in the group and the turn alone, so a share sampled
        again on another env runner (its own died) gives the same episodes.
        """
        group_size = self.settings.group_size
        if self._games is not None:
            rollouts, group_ids, values, timing = self._games.sample(self.env, requests)
        else:
            starts = [(i, (TRAIN_STREAM, group_id, k)) for i, group_id in requests for k in range(group_size)]
            rollouts = self._start_episodes(self.env, self._train_loop, starts)
            timing = self._train_loop.run(rollouts)
            group_ids = [group_id for _, group_id in requests for _ in range(group_size)]
            values = [None] * len(rollouts)
        for rollout in rollouts:
            if rollout.prompt_truncated:
                self.metrics.log_value(Metrics.PROMPTS_TRUNCATED, 1, reduce="sum")
        self.last_sample_timing = timing
        penalties = self._overlong_penalties([r.response_length for r in rollouts])
        episodes = [self._episode(*episode) for episode in zip(rollouts, group_ids, penalties, values)]
        turns = sum(len(r.turns) for r in rollouts)
        self.metrics.log_value(NUM_ENV_STEPS_SAMPLED, turns, reduce="sum")
        self.metrics.log_value(NUM_ENV_STEPS_SAMPLED_LIFETIME, turns, reduce="lifetime_sum")
        self.metrics.log_value(NUM_EPISODES, len(episodes), reduce="sum")
        self.metrics.log_value(NUM_EPISODES_LIFETIME, len(episodes), reduce="lifetime_sum")
        if episodes:  # none where, in every game, the other player ended it before the trained seat moved
            self.metrics.log_value(EPISODE_RETURN_MEAN, float(np.mean([e.get_return() for e in episodes])), window=1)
        return episodes

    def groups_per_request(self) -> int:
        """Groups a `sample` request yields: one, or one per seat the trained policy plays in a game."""
        return 1 if self._games is None else self._games.groups_per_request()

    def _overlong_penalties(self, lengths: list[int]) -> list[float]:
        """The soft overlong punishment of responses of these lengths (0 with overlong_buffer_len=0)."""
        overlong, max_response_length = self.settings.overlong, self.settings.engine.sampler.max_response_length
        penalties = overlong_penalty(
            lengths,
            max_response_length=max_response_length,
            overlong_buffer_len=overlong.buffer_tokens(max_response_length),
            penalty_factor=overlong.penalty_factor,
        )
        return penalties.tolist()

    def _episode(
        self, rollout: EpisodeRollout, group_id: int, penalty: float, extra_values: dict[str, Any] | None = None
    ) -> SingleAgentEpisode:
        """The RLlib episode of a finished rollout: a step per model turn.

        The observations are token ids: the prompt at reset, then the environment's tokens after each
        turn; the actions are the ids the model sampled in each turn, with vLLM's log-probs of them. The
        soft overlong penalty is added to the last step's reward. Every step carries the episode's values
        (`Extras`, `extra_values` among them), so that they can be read at any step.
        """
        info = rollout.final_info
        values = {
            Extras.GROUP_ID: group_id,
            Extras.SCORE: float(info[Info.SCORE]),
            Extras.ACC: float(info[Info.ACC]),
            Extras.TRUNCATED: rollout.truncated,
            Extras.SCORE_TIMED_OUT: bool(info.get(Info.SCORE_TIMED_OUT, False)),
            Extras.BROKEN_TASK: info.get(Info.BROKEN_TASK) or "",
            Extras.OVERLONG_PENALTY: penalty,
            Extras.END_REASON: str(rollout.end),
            Extras.TURNS: len(rollout.turns),
            Extras.ENV_TOKENS: rollout.env_tokens,
            Extras.TOOL_CALLS: rollout.tool_calls,
            Extras.TOOL_ERRORS: rollout.tool_errors,
            Extras.INVALID_MOVES: int(info.get(Info.INVALID_MOVES, 0)),
            Extras.ENV_ERROR: info.get(Info.ENV_ERROR, ""),
            WEIGHTS_SEQ_NO: self._held_seq_no,
            **(extra_values or {}),
        }
        ep = SingleAgentEpisode(observation_space=None, action_space=None)
        ep.add_env_reset(
            observation=np.asarray(rollout.prompt_ids, dtype=np.int64),
            infos={Info.GROUND_TRUTH: info[Info.GROUND_TRUTH]},
        )
        # An episode whose reset failed has no turn: one empty step carries its values.
        turns = rollout.turns or [Turn(model_ids=[], logp=[])]
        last = len(turns) - 1
        for t, turn in enumerate(turns):
            ep.add_env_step(
                observation=np.asarray(turn.env_ids, dtype=np.int64),
                action=np.asarray(turn.model_ids, dtype=np.int64),
                reward=turn.reward + (penalty if t == last else 0.0),
                infos=dict(info if t == last else turn.info),
                terminated=t == last and rollout.end is EndReason.ENV,
                truncated=t == last and rollout.end is not EndReason.ENV,
                extra_model_outputs={**values, Extras.ROLLOUT_LOGP: np.asarray(turn.logp, dtype=np.float32)},
            )
        return ep

    # ----- evaluation on the held-out split ---------------------------------------------
    def _evaluation_env(self) -> gym.Env:
        """The validation env: `RunnerSettings.eval_env_config` (eval_dataset, evaluation_config)."""
        if self._eval_env is None:
            settings = self.settings
            self._eval_env = build_env(settings.eval_env, settings.eval_env_config, self.worker_index, self.num_workers)
            self._renderer(self._eval_env)
            self._set_levels(self._eval_env)
        return self._eval_env

    # ----- the curriculum (dapo_rllib.tasks.curriculum) -----------------------------------------
    def curriculum_levels(self) -> dict[str, int] | None:
        """The training env's curriculum levels, or None where it has no curriculum."""
        levels = getattr(self.env, "curriculum_levels", None)
        return None if levels is None else levels()

    def next_curriculum_levels(self, levels: dict[str, int], accuracy: dict[str, float]) -> dict[str, int]:
        return self.env.next_curriculum_levels(levels, accuracy)

    def set_curriculum_levels(self, levels: dict[str, int]) -> None:
        """Put the training and validation envs at `levels` (kept for a validation env built later)."""
        self._curriculum = dict(levels)
        for env in (self.env, self._eval_env):
            self._set_levels(env)

    def _set_levels(self, env) -> None:
        if env is not None and self._curriculum is not None and hasattr(env, "set_curriculum_levels"):
            env.set_curriculum_levels(self._curriculum)

    def evaluate(
        self, *, num_samples: int, max_problems: int | None = None, progress: bool = False
    ) -> list[EvalRecord]:
        """`num_samples` scored episodes of each problem in this runner's shard of the validation set.

        Problems (the first `max_problems`, or all) are split round-robin over the runners
        (worker_index 1..n; a local runner takes them all) and run with the evaluation settings and
        fixed seeds per problem and sample, so successive evaluations differ only by the weights.
        Returns one `dapo_rllib.contracts.EvalRecord` per problem; the caller merges the shards and
        computes the metrics. `progress` shows a progress bar.
        """
        env = self._evaluation_env()
        count = env.num_problems if max_problems is None else min(max_problems, env.num_problems)
        shards = max(self.num_workers, 1)
        mine = [i for i in range(count) if i % shards == max(self.worker_index - 1, 0)]
        if self._games is not None:
            records, self.last_sample_timing = self._games.evaluate(env, mine, num_samples)
            return records
        starts = [(i, (EVAL_STREAM, i, k)) for i in mine for k in range(num_samples)]
        started = self._start_episodes(env, self._eval_loop, starts)
        rollouts = {i: started[n * num_samples : (n + 1) * num_samples] for n, i in enumerate(mine)}
        bar = tqdm(total=len(mine) * num_samples, desc="evaluating", unit="episode", disable=not progress)
        timing = self._eval_loop.run([r for samples in rollouts.values() for r in samples], progress=bar.update)
        bar.close()
        self.last_sample_timing = timing
        failed = [r.failure for samples in rollouts.values() for r in samples if r.failure is not None]
        if failed:
            logger.warning(
                "%d of %d validation episodes ended in an environment failure, scored wrong; last: %s: %s",
                len(failed),
                len(mine) * num_samples,
                failed[-1].kind,
                failed[-1],
            )
        records = []
        for i, samples in rollouts.items():
            problem = env.problem(i)
            records.append(
                EvalRecord.from_infos(
                    [r.final_info for r in samples],
                    problem_index=i,
                    data_source=problem.data_source,
                    ground_truth=problem.ground_truth,
                    length=[r.response_length for r in samples],
                    truncated=[r.truncated for r in samples],
                    prompt_truncated=samples[0].prompt_truncated,
                    turns=[len(r.turns) for r in samples],
                    tool_calls=[r.tool_calls for r in samples],
                    # Only where it can differ from acc: an answer was followed by another.
                    first_acc=[r.first_acc for r in samples] if any(r.answered_again for r in samples) else [],
                )
            )
        return records

    # ----- weights: streamed in buckets (see dapo_rllib.rollout.weight_sync) ----------------------
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
        """Copies of the named parameters as the engine holds them (for tests and debugging); with
        LoRA, the adapter tensors of the engine's current adapter."""
        return self._engine_weights.parameters(names)

    def engine_adapter(self) -> tuple[str | None, set[int]]:
        """(the name of the adapter generate calls carry, the ids of the adapters the engine holds);
        (None, set()) for full fine-tuning."""
        if not isinstance(self._engine_weights, EngineAdapter):
            return None, set()
        request = self._engine_weights.lora_request
        return (None if request is None else request.lora_name), self._engine_weights.engine_adapters()

    # ----- the league's snapshots (dapo_rllib.algorithm.self_play.league), served as adapters ----------------
    def adapter_tensors(self, name: str = POLICY_ADAPTER) -> dict[str, np.ndarray]:
        """The tensors of an adapter this engine serves: by default the trained policy's, what a league snapshot
        freezes; or a snapshot's, by its name."""
        return {key: tensor.numpy() for key, tensor in self._engine_weights.shelf.tensors(name).items()}

    def serve_league(self, league: LeagueDraw, added: dict[str, dict[str, np.ndarray]], removed: list[str]) -> None:
        """Serve the `added` snapshots (adapters of the trained policy's shape) beside the trained policy, stop
        serving the `removed` ones, and draw the games' opponents from `league` (`rollout.matchups.versus_league`)."""
        if self._games is None or not isinstance(self._engine_weights, EngineAdapter):
            raise ValueError(
                f"a league (league_size >= 1) plays games of two players with adapters: env {self.config.env!r} is "
                f"{'not a game of two players' if self._games is None else 'served without adapters'}"
            )
        shelf, config = self._engine_weights.shelf, self._engine_weights.config
        for name in removed:
            shelf.remove(name)
        for name, tensors in added.items():
            shelf.put(name, {key: torch.as_tensor(tensor) for key, tensor in tensors.items()}, config)
        self._games.league = league

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
