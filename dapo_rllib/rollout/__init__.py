"""The rollout side: the vLLM env runner and its group, the turn loop, the engine, weight sync into
the engine, and the chat rendering of turns. It runs the tasks' environments and never imports the
algorithm side."""
