"""The held-out accuracy a build record holds: what RL starts from, measured as RL samples."""

from __future__ import annotations

import numpy as np
import torch

from dapo_rllib.models.tiny.recipes import recipe_for
from dapo_rllib.tasks.chat_turns import TurnRenderer

#: Samples per held-out problem in a build record (at temperature 1.0, as RL samples).
HELD_OUT_SAMPLES = 4


@torch.no_grad()
def held_out_accuracy(model, tokenizer, task: str, *, samples: int = HELD_OUT_SAMPLES, seed: int = 0) -> dict:
    """Accuracy of `model` on the task's held-out problems, `samples` seeded samples per problem at
    temperature 1.0 (what RL starts from): avg@samples, and mixed@samples, the share of problems
    whose samples are neither all right nor all wrong (what dynamic sampling keeps)."""
    from transformers import GenerationConfig

    recipe = recipe_for(task)
    problems = recipe.test_problems()
    generation = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=None,
        max_new_tokens=recipe.max_new_tokens,
        num_return_sequences=samples,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    was_training = model.training
    model.eval()
    torch.manual_seed(seed)
    right = []
    for first in range(0, len(problems), 64):
        chunk = problems[first : first + 64]
        prompts = [TurnRenderer(tokenizer, recipe.tools).prompt_ids(p.messages) for p in chunk]
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), tokenizer.pad_token_id, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for row, prompt in enumerate(prompts):  # left-padded
            ids[row, width - len(prompt) :] = torch.tensor(prompt)
            attn[row, width - len(prompt) :] = 1
        out = model.generate(input_ids=ids, attention_mask=attn, generation_config=generation)
        texts = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
        right += [[recipe.correct(p, texts[i * samples + j]) for j in range(samples)] for i, p in enumerate(chunk)]
    model.train(was_training)
    right = np.array(right, dtype=bool)
    mixed = right.any(axis=1) & ~right.all(axis=1)
    return {
        "problems": len(problems),
        "samples": samples,
        "temperature": 1.0,
        "max_new_tokens": recipe.max_new_tokens,
        f"avg@{samples}": round(float(right.mean()), 4),
        f"mixed@{samples}": round(float(mixed.mean()), 4),
        "scored_by": recipe.scored_by,
    }


def accuracy_text(held_out: dict) -> str:
    n = held_out["samples"]
    return f"avg@{n} {held_out[f'avg@{n}']:.3f}, mixed@{n} {held_out[f'mixed@{n}']:.3f}"
