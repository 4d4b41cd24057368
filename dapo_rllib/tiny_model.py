"""The small default policy: a Qwen2-architecture causal LM built and warm-started locally.

Nothing is downloaded. `ensure_tiny_model()` builds, once, into a cache directory:

1. a byte-level BPE tokenizer trained on the arithmetic task's own text (digits are split one by
   one, as Qwen's tokenizer does, so numbers stay learnable), with a Qwen-style chat template;
2. a ~1M-parameter `Qwen2ForCausalLM` (a standard Hugging Face architecture, so vLLM serves it);
3. a short supervised warm start on worked arithmetic solutions, so that RL starts from a policy
   that is sometimes right.

The warm start imitates three ways of ending a solution, in the proportions of `ANSWER_STYLES`,
and only the first is scored correct by the DAPO math scorer ("Answer: 85." keeps its period;
"The answer is 85." has no "Answer:" line; see rewards/math_dapo.py). Part of what RL then
learns from the verifiable reward is that format, the rest is getting the sum right: both show
up in held-out accuracy. The result is a plain `save_pretrained` directory: any other Hugging Face
model directory (a local Qwen2.5 checkpoint, say) can be used in its place.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from dapo_rllib.data.arithmetic import generate_arithmetic_problems, parse_arithmetic_question
from dapo_rllib.data.prompts import render_prompt_ids


IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# (weight, format) of the final line; only "Answer: {r}" satisfies the DAPO scorer.
ANSWER_STYLES = ((0.4, "Answer: {r}"), (0.3, "Answer: {r}."), (0.3, "The answer is {r}."))
TINY_MODEL_VERSION = "tiny-qwen2-arith-v1"


def default_cache_dir() -> Path:
    """Where built models live: $DAPO_RLLIB_CACHE, else ~/.cache/dapo_rllib."""
    return Path(os.environ.get("DAPO_RLLIB_CACHE", Path.home() / ".cache" / "dapo_rllib"))


def default_tiny_model_path() -> Path:
    return default_cache_dir() / TINY_MODEL_VERSION


def worked_solution(problem_text: str, style: str) -> str:
    """The worked solution the warm start imitates, ending in one of the ANSWER_STYLES."""
    a, op, b = parse_arithmetic_question(problem_text)
    result = a + b if op == "+" else a - b
    return f"{a} {op} {b} = {result}\n" + style.format(r=result)


def build_tokenizer(corpus: list[str]):
    """Train a byte-level BPE tokenizer on `corpus` and wrap it for transformers and vLLM."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=640,
        special_tokens=[PAD, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD,
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=1024,
    )


def _sft_examples(tokenizer, num_examples: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, response ids + eos) pairs of training-split problems."""
    rng = np.random.default_rng(seed)
    problems = generate_arithmetic_problems("train", seed=seed)
    weights = np.array([w for w, _ in ANSWER_STYLES])
    examples = []
    for i in range(num_examples):
        problem = problems[i % len(problems)]
        style = ANSWER_STYLES[rng.choice(len(ANSWER_STYLES), p=weights / weights.sum())][1]
        response = worked_solution(problem.prompt_text, style)
        response_ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        examples.append((render_prompt_ids(tokenizer, problem.messages), response_ids))
    return examples


def _collate(examples, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad to the longest example; labels are -100 except on response tokens."""
    width = max(len(p) + len(r) for p, r in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    attn = torch.zeros_like(ids)
    for row, (p, r) in enumerate(examples):
        seq = p + r
        ids[row, : len(seq)] = torch.tensor(seq)
        labels[row, len(p) : len(seq)] = torch.tensor(r)
        attn[row, : len(seq)] = 1
    return ids, labels, attn


def _warm_start(model, tokenizer, *, steps: int, batch_size: int, lr: float, seed: int) -> None:
    examples = _sft_examples(tokenizer, steps * batch_size, seed)
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
                f"[tiny model] warm start step {step + 1}/{steps}  loss {loss.item():.3f}  "
                f"{time.time() - start:.0f}s",
                flush=True,
            )
    model.eval()


def build_tiny_model(
    output_dir: str | os.PathLike,
    *,
    sft_steps: int = 800,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
) -> Path:
    """Build tokenizer + Qwen2 model, warm-start it and `save_pretrained` it to `output_dir`.

    Written to a temporary sibling directory first and renamed at the end, so a crashed or
    concurrent build never leaves a half-written model behind.
    """
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    output_dir = Path(output_dir)
    torch.manual_seed(seed)
    corpus = [
        p.prompt_text
        + "\n"
        + worked_solution(p.prompt_text, ANSWER_STYLES[i % len(ANSWER_STYLES)][1])
        for i, p in enumerate(generate_arithmetic_problems("train", seed=seed))
    ]
    tokenizer = build_tokenizer(corpus)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,  # head_dim 32: one of vLLM's CPU attention head sizes
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"[tiny model] building {n_params / 1e6:.2f}M-parameter Qwen2 into {output_dir}", flush=True)
    _warm_start(model, tokenizer, steps=sft_steps, batch_size=batch_size, lr=lr, seed=seed)

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=output_dir.name + ".", dir=output_dir.parent))
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(output_dir)
    except OSError:  # another process finished first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return output_dir


def ensure_tiny_model(path: str | os.PathLike | None = None, **build_kwargs) -> Path:
    """Return the tiny model's directory, building it first if it is not there yet."""
    path = Path(path) if path is not None else default_tiny_model_path()
    if not (path / "config.json").exists():
        build_tiny_model(path, **build_kwargs)
    return path
