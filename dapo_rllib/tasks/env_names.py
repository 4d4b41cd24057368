"""The names the built-in environments are registered under (`dapo_rllib.registry`; their classes are in envs/)."""

#: The entry-point group an environment package declares its environments in (pyproject.toml).
ENVIRONMENTS_GROUP = "dapo_rllib.environments"
MATH_ENV = "dapo_math"  # envs.math_env.MathEnv, DAPOConfig's default environment
CODE_ENV = "dapo_code"  # envs.code_env.CodeEnv
