"""Models of a real model's shape with random weights, for measuring scale without downloading a checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from dapo_rllib.models.tiny.record import save_model


def build_random_model(
    output_dir: str | os.PathLike, shape: dict, tokenizer_path: str | os.PathLike, *, seed: int = 0
) -> Path:
    """A Qwen2 of the given shape with random weights and the tokenizer of `tokenizer_path`.

    For measuring scale without downloading a checkpoint: e.g. Qwen2.5-0.5B's shape (hidden 896,
    24 layers, vocabulary 151,936) with the tiny tokenizer. `shape` holds Qwen2Config fields.
    Cached: an existing `output_dir` with a config.json is returned as is.
    """
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    output_dir = Path(output_dir)
    if (output_dir / "config.json").exists():
        return output_dir
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path))
    if shape.get("vocab_size", len(tokenizer)) < len(tokenizer):
        raise ValueError(f"vocab_size={shape['vocab_size']} is smaller than the tokenizer's {len(tokenizer)} tokens")
    torch.manual_seed(seed)
    config = Qwen2Config(
        **({"vocab_size": len(tokenizer), "tie_word_embeddings": True, "max_position_embeddings": 4096} | shape),
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    print(
        f"[model] building a random {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M-parameter Qwen2 into {output_dir}",
        flush=True,
    )
    return save_model(model, tokenizer, output_dir)
