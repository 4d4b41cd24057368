"""Tasks: the environment base class (`problem_env.ProblemEnv`), its tools, the rewards (scorers and
the code judge), the problem data and the sandbox that runs model-written code. Nothing here imports
the algorithm or the rollout side's engine."""
