"""The environment a config names, built and checked to be one DAPO's env runner can run."""

from __future__ import annotations

import gymnasium

from dapo_rllib.ray_private import registered_env_creator
from dapo_rllib.tasks.env_names import declared_environments
from dapo_rllib.tasks.game_env import GameEnv
from dapo_rllib.tasks.problem_env import ProblemEnv


def build_env(env_spec, env_config: dict, worker_index: int, num_workers: int):
    """Build the environment named in `config.environment(...)`: a registered name or a class.

    It must be a `ProblemEnv` (the runner draws problems from it and scores whole rounds with it) or a
    `GameEnv` (games of two players).
    """
    from ray.rllib.env.env_context import EnvContext

    ctx = EnvContext(env_config or {}, worker_index=worker_index, num_workers=num_workers)
    creator = registered_env_creator(env_spec) if isinstance(env_spec, str) else None
    if creator is None and isinstance(env_spec, str) and env_spec in (declared := declared_environments()):
        # Ray Tune keeps registrations in the running Ray's store, and forgets them when Ray shuts down: a process
        # that started and stopped Ray (a notebook, `rllib evaluate` after a run) builds an installed package's
        # environment from its entry point.
        creator = declared[env_spec].load()  # the environment's class, built on the context as a creator is
    if creator is not None:
        env = creator(ctx)
    elif isinstance(env_spec, type) and issubclass(env_spec, gymnasium.Env):
        env = env_spec(ctx)
    else:
        raise ValueError(
            f"environment {env_spec!r} is neither a name registered with ray.tune.register_env nor a "
            "gymnasium.Env subclass; `import dapo_rllib` registers 'dapo_math' and 'dapo_code'"
        )
    if not isinstance(env, (ProblemEnv, GameEnv)):
        raise TypeError(
            f"environment {env_spec!r} built a {type(env).__name__}; VLLMEnvRunner needs a "
            "dapo_rllib.tasks.problem_env.ProblemEnv subclass (it draws problems and scores completions: see the docs' "
            "guide 'Your own task type', docs/guides/task-type.md) or a game of two players, a "
            "dapo_rllib.tasks.game_env.GameEnv"
        )
    return env
