"""The policy model, shared by the learner and the env runners: where it comes from (`resolve`, the tiny
models of `tiny`), the RLlib module around a Hugging Face causal LM, and LoRA adapters."""
