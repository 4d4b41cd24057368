"""The policy model, shared by the learner and the env runners: the RLlib module around a Hugging Face
causal LM, and LoRA adapters."""
