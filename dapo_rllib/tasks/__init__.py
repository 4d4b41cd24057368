"""Tasks: the environment base class (`problem_env.ProblemEnv`), its tools, the chat rendering of its
turns (`chat_turns`), the rewards (scorers and the code judge), the problem data and the sandbox that
runs model-written code. Nothing here imports another subpackage: the models, the rollout side and the
algorithm all build on it."""
