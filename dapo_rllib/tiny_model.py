"""The small default policies: Qwen2-architecture causal LMs built and warm-started locally.

Nothing is downloaded. `ensure_tiny_model(task)` builds, once, into a cache directory:

1. a byte-level BPE tokenizer trained on the task's own text (digits are split one by one, as
   Qwen's tokenizer does, so numbers stay learnable), with a Qwen-style chat template;
2. a ~1M-parameter `Qwen2ForCausalLM` (a standard Hugging Face architecture, so vLLM serves it);
3. a short supervised warm start on worked answers, so that RL starts from a policy that is
   sometimes right.

Three tasks (`RECIPES`): "arithmetic" (the math environment's built-in problems), "code" (the
code environment's generated function-writing tasks) and "sums" (the ablation's scratchpad sums,
dapo_rllib/data/scratchpad_sums.py). The warm start imitates several ways of answering, in fixed
proportions, and only some of them earn the reward:

- arithmetic: "Answer: 85" is right; "Answer: 85." keeps its period and "The answer is 85." has
  no "Answer:" line, both wrong for the DAPO math scorer (see rewards/math_dapo.py);
- code: `return a + b` in the requested function is right; printing instead of returning, or
  naming the function `solution`, fails the tests;
- sums: all three styles are in the right format and differ in length (SUMS_ANSWER_STYLES):
  what the reward then selects is getting the sum right within the response limit.

Part of what RL then learns from the verifiable reward is that format, the rest is getting the
task right: both show up in held-out accuracy. The result is a plain `save_pretrained`
directory: any other Hugging Face model directory (a local Qwen2.5 checkpoint, say) can be used
in its place.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dapo_rllib.data.arithmetic import generate_arithmetic_problems, parse_arithmetic_question
from dapo_rllib.data.code_arithmetic import generate_code_tasks, reference_solution
from dapo_rllib.data.prompts import render_prompt_ids
from dapo_rllib.data.scratchpad_sums import generate_sum_problems, parse_sum_question, scratchpad_lines

IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# (weight, format) of the final line; only "Answer: {r}" satisfies the DAPO scorer.
ANSWER_STYLES = ((0.4, "Answer: {r}"), (0.3, "Answer: {r}."), (0.3, "The answer is {r}."))
# (weight, style) of a code answer; only "return" passes the tests.
CODE_ANSWER_STYLES = ((0.4, "return"), (0.3, "print"), (0.3, "wrong name"))
# (weight, style) of a sums answer, all in the right format: the scratchpad; the same with spaces
# around + and = (right as often, half as long again: long sums no longer fit the response
# limit); the answer alone (short, right only when the sum is done in one go).
SUMS_ANSWER_STYLES = ((0.4, "scratchpad"), (0.3, "spaced"), (0.3, "direct"))
SUMS_TRAIN_PROBLEMS = 2400


def worked_solution(problem_text: str, style: str) -> str:
    """The worked arithmetic solution the warm start imitates, ending in one of the ANSWER_STYLES."""
    a, op, b = parse_arithmetic_question(problem_text)
    result = a + b if op == "+" else a - b
    return f"{a} {op} {b} = {result}\n" + style.format(r=result)


def code_answer(task, style: str) -> str:
    """The task's reference solution, or one of the CODE_ANSWER_STYLES of getting it wrong."""
    solution = reference_solution(task)
    if style == "print":
        return re.sub(r"return (.+)", r"print(\1)", solution)
    if style == "wrong name":
        return re.sub(r"def \w+\(", "def solution(", solution)
    return solution


def sums_answer(problem_text: str, style: str) -> str:
    """The worked answer to a scratchpad-sums problem in one of the SUMS_ANSWER_STYLES."""
    start, addends = parse_sum_question(problem_text)
    lines = [] if style == "direct" else scratchpad_lines(start, addends, spaced=style == "spaced")
    return "\n".join([*lines, f"Answer: {start + sum(addends)}"])


def _code_train_tasks(seed: int) -> list:
    return generate_code_tasks("train", seed=seed)


@dataclass(frozen=True)
class WarmStartRecipe:
    """What a tiny model learns before RL: a task's training problems and ways of answering.

    Attributes:
        version: Name of its cache directory (bump it when the recipe changes).
        train_problems: seed -> training problems (with chat `messages`).
        answer: (problem, style) -> the response text imitated.
        styles: (weight, style) pairs: how often each way of answering is imitated.
        sft_steps, batch_size: Length of the warm start: how far from right the RL starts.
    """

    version: str
    train_problems: Callable[[int], list]
    answer: Callable[[Any, str], str]
    styles: tuple[tuple[float, str], ...]
    sft_steps: int = 800
    batch_size: int = 64


RECIPES: dict[str, WarmStartRecipe] = {
    "arithmetic": WarmStartRecipe(
        "tiny-qwen2-arith-v1",
        lambda seed: generate_arithmetic_problems("train", seed=seed),
        lambda problem, style: worked_solution(problem.prompt_text, style),
        ANSWER_STYLES,
    ),
    "code": WarmStartRecipe("tiny-qwen2-code-v1", _code_train_tasks, code_answer, CODE_ANSWER_STYLES),
    "sums": WarmStartRecipe(
        "tiny-qwen2-sums-v1",
        lambda seed: generate_sum_problems("train", SUMS_TRAIN_PROBLEMS, seed=seed),
        lambda problem, style: sums_answer(problem.prompt_text, style),
        SUMS_ANSWER_STYLES,
        # Light: the RL starts right on about a third of held-out sums (avg@4 0.34). The
        # accuracy jumps with the length of the warm start: 600 steps start at 0.12, where
        # naive GRPO finds too few right answers to learn from; 1,000 start at 0.78.
        sft_steps=800,
        batch_size=32,
    ),
}


def _recipe(task: str) -> WarmStartRecipe:
    if task not in RECIPES:
        raise ValueError(f"no tiny model for task {task!r}; expected one of {sorted(RECIPES)}")
    return RECIPES[task]


def default_cache_dir() -> Path:
    """Where built models live: $DAPO_RLLIB_CACHE, else ~/.cache/dapo_rllib."""
    return Path(os.environ.get("DAPO_RLLIB_CACHE", Path.home() / ".cache" / "dapo_rllib"))


def default_tiny_model_path(task: str = "arithmetic") -> Path:
    return default_cache_dir() / _recipe(task).version


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


def _sft_examples(recipe: WarmStartRecipe, tokenizer, num_examples: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, response ids + eos) pairs of training-split problems."""
    rng = np.random.default_rng(seed)
    problems = recipe.train_problems(seed)
    weights = np.array([w for w, _ in recipe.styles])
    examples = []
    for i in range(num_examples):
        problem = problems[i % len(problems)]
        style = recipe.styles[rng.choice(len(recipe.styles), p=weights / weights.sum())][1]
        response = recipe.answer(problem, style)
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


def _warm_start(recipe: WarmStartRecipe, model, tokenizer, *, steps: int, batch_size: int, lr: float, seed: int) -> None:
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
                f"[tiny model] warm start step {step + 1}/{steps}  loss {loss.item():.3f}  "
                f"{time.time() - start:.0f}s",
                flush=True,
            )
    model.eval()


def build_tiny_model(
    output_dir: str | os.PathLike,
    *,
    task: str = "arithmetic",
    sft_steps: int | None = None,
    batch_size: int | None = None,
    lr: float = 3e-3,
    seed: int = 0,
) -> Path:
    """Build tokenizer + Qwen2 model, warm-start it and `save_pretrained` it to `output_dir`.

    `sft_steps` and `batch_size` default to the task's recipe. Written atomically (see `_save`).
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM

    recipe = _recipe(task)
    output_dir = Path(output_dir)
    torch.manual_seed(seed)
    corpus = [
        p.messages[-1]["content"] + "\n" + recipe.answer(p, recipe.styles[i % len(recipe.styles)][1])
        for i, p in enumerate(recipe.train_problems(seed))
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
    print(f"[tiny model] building a {n_params / 1e6:.2f}M-parameter Qwen2 for {task} into {output_dir}", flush=True)
    _warm_start(recipe, model, tokenizer, steps=sft_steps or recipe.sft_steps, batch_size=batch_size or recipe.batch_size, lr=lr, seed=seed)

    return _save(model, tokenizer, output_dir)


def _save(model, tokenizer, output_dir: Path) -> Path:
    """`save_pretrained` model and tokenizer into a temporary sibling directory, renamed at the
    end, so a crashed or concurrent build never leaves a half-written model behind."""
    from transformers import GenerationConfig

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


def build_random_model(output_dir: str | os.PathLike, shape: dict, tokenizer_path: str | os.PathLike, *, seed: int = 0) -> Path:
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
    print(f"[model] building a random {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M-parameter Qwen2 into {output_dir}", flush=True)
    return _save(model, tokenizer, output_dir)


def ensure_tiny_model(path: str | os.PathLike | None = None, *, task: str = "arithmetic", **build_kwargs) -> Path:
    """Return the directory of the tiny model for `task`, building it first if it is not there yet."""
    path = Path(path) if path is not None else default_tiny_model_path(task)
    if not (path / "config.json").exists():
        build_tiny_model(path, task=task, **build_kwargs)
    return path
