"""Real models' config fields, for tests that need a model's shape but not its weights."""

# Qwen2.5-0.5B-Instruct's config fields: the examples' and the LoRA sync rule's model, without its weights.
QWEN2_5_0_5B_CONFIG = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    tie_word_embeddings=True,
)
