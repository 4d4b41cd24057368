"""Small DAPO runs on the tiny model, and what the tests read from a run: the learner's, the engine's and the
adapters' weights, and one iteration of a run restored from its checkpoint."""

import numpy as np
from ray.rllib.algorithms.algorithm import Algorithm

from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.models.lora import adapter_tensors

# Parameters vLLM keeps under their Hugging Face names (it fuses q/k/v and gate/up).
CHECKED = ["model.embed_tokens.weight", "model.layers.0.input_layernorm.weight", "model.norm.weight"]


def tiny_config(model_path, **overrides):
    settings = dict(
        model_path=model_path,
        group_size=4,
        train_batch_size_prompts=8,
        gen_batch_size_prompts=12,
        max_num_gen_batches=8,
        minibatch_size_prompts=4,
        max_prompt_length=128,
        max_response_length=24,
        overlong_buffer_len=4,
        # Small enough that the few iterations of a test cannot collapse the policy, whichever tiny
        # model the build produced (issue 21): at 1e-3 the share of informative groups fell from
        # 0.83 to 0.11 in 5 iterations on one model, at 3e-4 it stayed >= 0.5 on all three tried.
        lr=3e-4,
        lr_warmup_steps=2,
    )
    settings.update(overrides)
    return (
        DAPOConfig()
        .training(**settings)
        .evaluation(eval_num_samples=2, eval_max_problems=16, val_before_train=False)
        .debugging(seed=0)
    )


def learner_weights(algo):
    return {
        k: v.detach().numpy().copy()
        for k, v in algo.learner_group._learner.module["default_policy"].model.state_dict().items()
    }


def resume_once(checkpoint, read=learner_weights):
    """One training iteration of a new algorithm restored from `checkpoint`: its result, and `read(algorithm)`
    after it (None: nothing read)."""
    restored = Algorithm.from_checkpoint(str(checkpoint))
    try:
        result = restored.train()
        return result, None if read is None else read(restored)
    finally:
        restored.stop()


def on_env_runners(algo, func) -> list:
    """`func` called on every env runner that holds an engine: the actors, or the driver's own where there are
    none (num_env_runners=0)."""
    group = algo.env_runner_group
    return group.foreach_env_runner(func, local_env_runner=group.num_remote_env_runners() == 0)


def engine_weights(algo):
    """The `CHECKED` parameters of the first env runner's engine."""
    return on_env_runners(algo, lambda runner: runner.engine_parameters(CHECKED))[0]


def unpadded(engine_param, learner_param):
    """vLLM pads the vocabulary dimension of embeddings; compare the real rows."""
    return engine_param[: learner_param.shape[0]]


def learner_adapters(algo) -> dict[str, np.ndarray]:
    model = algo.learner_group._learner.module["default_policy"].model
    return {name: tensor.detach().numpy().copy() for name, tensor in adapter_tensors(model).items()}


# One small step on the tiny task (tests/cli/test_cli.py trains GSPO with it through the rllib command).
ONE_STEP = dict(
    group_size=4,
    train_batch_size_prompts=4,
    gen_batch_size_prompts=4,
    minibatch_size_prompts=2,
    max_prompt_length=128,
    max_response_length=16,
    lr_warmup_steps=0,
)


#: Small steps of multi-turn episodes (the guessing game's, and the other environments' that train on games):
#: with dynamic sampling off every group is trained, informative or not.
SMALL_MULTI_TURN_STEPS = dict(
    max_turns=3,
    max_response_length=96,
    overlong_buffer_len=0,
    dynamic_sampling=False,
    group_size=2,
    train_batch_size_prompts=4,
    minibatch_size_prompts=2,
)


def guess_config(model_path, **overrides):
    """Small steps on the docs' guessing game (registered by the `guess_number_example` fixture). The tiny
    arithmetic model guesses the number rarely, so most episodes take all their turns."""
    settings = SMALL_MULTI_TURN_STEPS | overrides
    return tiny_config(model_path, **settings).environment("guess_number", env_config={"num_problems": 40})
