"""The rollout side: the vLLM env runner and its group, the turn loop, the engine and weight sync into
the engine (a full model's weights or a LoRA adapter). It runs the tasks' environments, serves the
models' policy, and never imports the algorithm side."""
