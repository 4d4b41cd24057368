"""The policy's models: the tiny models built locally (`tiny`)."""
