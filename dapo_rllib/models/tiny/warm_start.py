"""The tiny models' warm start: a short supervised fine-tuning on a recipe's worked answers, so that RL
starts from a policy that is sometimes right. Episodes of several turns train on the model's turns only."""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from dapo_rllib.models.tiny.recipes import WarmStartRecipe
from dapo_rllib.tasks.chat_turns import TurnRenderer


def _sft_examples(
    recipe: WarmStartRecipe, tokenizer, num_examples: int, seed: int
) -> list[tuple[list[int], list[int]]]:
    """(token ids, loss mask) of conversations on training-split problems (`conversation_ids`)."""
    rng = np.random.default_rng(seed)
    problems = recipe.train_problems(seed)
    weights = np.array([w for w, _ in recipe.styles])
    examples = []
    for i in range(num_examples):
        problem = problems[i % len(problems)]
        style = recipe.styles[rng.choice(len(recipe.styles), p=weights / weights.sum())][1]
        examples.append(conversation_ids(recipe, tokenizer, problem, style))
    return examples


def conversation_ids(recipe: WarmStartRecipe, tokenizer, problem, style: str) -> tuple[list[int], list[int]]:
    """(token ids, loss mask) of the prompt and the imitated answer in `style`, as the env runner renders an
    episode: the prompt (mask 0), each model turn's ids and end-of-turn token (mask 1), and between them
    the environment's message (a tool's output, feedback) rendered by the chat template (mask 0)."""
    renderer = TurnRenderer(tokenizer, recipe.tools, max_tool_response_tokens=tokenizer.model_max_length)
    answer = recipe.answer(problem, style)
    turns = [answer] if isinstance(answer, str) else list(answer)
    ids = renderer.prompt_ids(problem.messages)
    mask = [0] * len(ids)
    for k, turn in enumerate(turns):
        if k % 2 == 0:
            piece = tokenizer(turn, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        else:
            piece = renderer.turn_ids([turn])
        ids += piece
        mask += [1 - k % 2] * len(piece)
    return ids, mask


def _collate(examples, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad to the longest example; labels are -100 except where the loss mask is 1."""
    width = max(len(seq) for seq, _ in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    attn = torch.zeros_like(ids)
    for row, (seq, mask) in enumerate(examples):
        ids[row, : len(seq)] = torch.tensor(seq)
        labels[row, : len(seq)] = torch.where(torch.tensor(mask) == 1, torch.tensor(seq), -100)
        attn[row, : len(seq)] = 1
    return ids, labels, attn


def warm_start(recipe: WarmStartRecipe, model, tokenizer, *, steps: int, batch_size: int, lr: float, seed: int) -> None:
    examples = _sft_examples(recipe, tokenizer, steps * batch_size, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))),
    )
    model.train()
    start = time.time()
    for step in range(steps):
        batch = examples[step * batch_size : (step + 1) * batch_size]
        ids, labels, attn = _collate(batch, tokenizer.pad_token_id)
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            print(
                f"[tiny model] warm start step {step + 1}/{steps}  loss {loss.item():.3f}  {time.time() - start:.0f}s",
                flush=True,
            )
    model.eval()
