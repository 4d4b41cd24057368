"""The small default policies: Qwen2-architecture causal LMs built and warm-started locally.

Nothing is downloaded. `ensure_tiny_model(task)` builds, once, into a cache directory:

1. a byte-level BPE tokenizer trained on the task's own text (digits are split one by one, as
   Qwen's tokenizer does, so numbers stay learnable), with a Qwen-style chat template;
2. a ~1M-parameter `Qwen2ForCausalLM` (a standard Hugging Face architecture, so vLLM serves it);
3. a short supervised warm start on worked answers, so that RL starts from a policy that is
   sometimes right.

Five tasks (`RECIPES`): "arithmetic" (the math environment's built-in problems), "code" (the
code environment's generated function-writing tasks), "sums" (the ablation's scratchpad sums,
dapo_rllib/tasks/data/scratchpad_sums.py), and two of several turns, warm-started on whole episodes
(trained on the model's turns only, rendered as the env runner renders them: `conversation_ids`):
"tool_arithmetic" (products with the python tool) and "code_repair" (the code tasks with the
code-repair environment's feedback). The warm start imitates several ways of answering, in fixed
proportions, and only some of them earn the reward:

- arithmetic: "Answer: 85" is right; "Answer: 85." keeps its period and "The answer is 85." has
  no "Answer:" line, both wrong for the DAPO math scorer (see rewards/math_dapo.py);
- code: `return a + b` in the requested function is right; printing instead of returning, or
  naming the function `solution`, fails the tests;
- sums: all three styles are in the right format and differ in length (SUMS_ANSWER_STYLES):
  what the reward then selects is getting the sum right within the response limit;
- tool_arithmetic: the python tool with the right expression, then its output copied into the
  answer, is right; the tool with `+` for `*`, or an answer without the tool, is wrong;
- code_repair: right at once; a code-style failure, the feedback, then the fix; or the same
  failure twice (REPAIR_ANSWER_STYLES).

Part of what RL then learns from the verifiable reward is that format, the rest is getting the
task right: both show up in held-out accuracy. The result is a plain `save_pretrained`
directory: any other Hugging Face model directory (a local Qwen2.5 checkpoint, say) can be used
in its place.

The build is as reproducible as torch allows: it runs in a child process whose kernels are
pinned where the CPU allows (`build_environment`: the AVX2 code paths of torch, oneDNN and, on
Intel CPUs, MKL on any x86-64 CPU with AVX2; `BUILD_THREADS` threads), with torch's
deterministic algorithms on, and every random draw (data, initialization, held-out sampling)
comes from `seed`; README.md ("The tiny model") says what still differs. Next to the weights
it writes `build_record.json` (`BUILD_RECORD`): the recipe, the seed, a fingerprint of the
weights (`weights_fingerprint`), the held-out accuracy of the built model (`held_out_accuracy`)
and the machine it was built on. `describe_build` compares a build with the one the test suite was
checked with (`REFERENCE_BUILDS`); tests/conftest.py prints that when a test fails.

$DAPO_RLLIB_TINY_SEED (`SEED_ENV`, default 0) is the seed of the default builds: another seed
builds another model the same recipe can produce, into `<version>-seed<N>`, to check that the
test suite does not depend on the particular model built.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dapo_rllib.tasks.data.arithmetic import generate_arithmetic_problems, parse_arithmetic_question
from dapo_rllib.tasks.data.code_arithmetic import generate_code_tasks, reference_solution
from dapo_rllib.tasks.data.datasets import short_repr
from dapo_rllib.tasks.data.scratchpad_sums import generate_sum_problems, parse_sum_question, scratchpad_lines
from dapo_rllib.tasks.data.tool_arithmetic import generate_tool_arithmetic_problems, parse_product_question
from dapo_rllib.tasks.rewards.math_dapo import compute_score as math_dapo_score
from dapo_rllib.tasks.tools import PYTHON_TOOL_SCHEMA

IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# The same, able to show tools, in Qwen2.5's format where it matters to the default tool parser: a call
# is <tool_call>{json}</tool_call> in the assistant's turn, tool results are inside
# <tool_response></tool_response> in a user turn (consecutive results share it). The system turn names
# each tool and its arguments only (Qwen's lists the whole JSON schema): the tiny models' prompts are short.
TOOL_CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system{{ '\\n' }}"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] + '\\n\\n' }}{% endif %}"
    "Tools:{% for tool in tools %} {{ tool.function.name }}"
    "({{ tool.function.parameters.properties | list | join(', ') }}){% endfor %}."
    " Call one as <tool_call>{{ '\\n' }}{\"name\": <name>, \"arguments\": <object>}{{ '\\n' }}</tool_call>"
    "<|im_end|>{{ '\\n' }}"
    "{% elif messages[0]['role'] == 'system' %}"
    "<|im_start|>system{{ '\\n' + messages[0]['content'] }}<|im_end|>{{ '\\n' }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>{{ '\\n' }}{% endif %}"
    "{% elif message['role'] != 'system' or not loop.first %}"
    "<|im_start|>{{ message['role'] }}{% if message['content'] %}{{ '\\n' + message['content'] }}{% endif %}"
    "{% for call in message.get('tool_calls') or [] %}"
    '{{ \'\\n<tool_call>\\n{"name": "\' + call.function.name + \'", "arguments": \' }}'
    "{{ (call.function.arguments | tojson) + '}\\n</tool_call>' }}"
    "{% endfor %}<|im_end|>{{ '\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}{% endif %}"
)
# (weight, format) of the final line; only "Answer: {r}" satisfies the DAPO scorer.
ANSWER_STYLES = ((0.4, "Answer: {r}"), (0.3, "Answer: {r}."), (0.3, "The answer is {r}."))
# (weight, style) of a code answer; only "return" passes the tests.
CODE_ANSWER_STYLES = ((0.4, "return"), (0.3, "print"), (0.3, "wrong name"))
# (weight, style) of a sums answer, all in the right format: the scratchpad; the same with spaces
# around + and = (right as often, half as long again: long sums no longer fit the response
# limit); the answer alone (short, right only when the sum is done in one go).
SUMS_ANSWER_STYLES = ((0.4, "scratchpad"), (0.3, "spaced"), (0.3, "direct"))
# (weight, style) of a tool-arithmetic answer: the python tool with the right expression, then its
# output copied into the answer (right); the tool with a wrong operator (wrong); the answer without the
# tool (right only if the model can multiply in its head, which the tiny model cannot).
TOOL_ANSWER_STYLES = ((0.35, "tool"), (0.35, "wrong expression"), (0.3, "no tool"))
# (weight, style) of a code-repair episode: right at once; wrong, then fixed after the feedback; wrong
# twice. Only "return" passes; the feedback names the failed calls (REPAIR_PUBLIC_TESTS of them).
REPAIR_ANSWER_STYLES = (
    (0.3, "return"),
    (0.25, "print, then return"),
    (0.25, "wrong name, then return"),
    (0.2, "print, then print"),
)
REPAIR_PUBLIC_TESTS = 2  # the code-repair environment's default public_tests
SUMS_TRAIN_PROBLEMS = 2400
SUMS_TEST_PROBLEMS = 120  # the ablation's held-out set (tuned_examples/dapo/tiny_ablation.py)

#: The build's file of record, written next to the weights.
BUILD_RECORD = "build_record.json"
#: The environment variable that holds the seed of default builds (0 when unset).
SEED_ENV = "DAPO_RLLIB_TINY_SEED"
#: Intra-op threads of a build: fixed, so that reductions are split the same way on any machine.
#: Two: as fast as an unpinned build on an idle 2-core machine (one thread takes 1.7 times as long).
BUILD_THREADS = 2
#: Samples per held-out problem in a build record (at temperature 1.0, as RL samples).
HELD_OUT_SAMPLES = 4


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


def python_call(code: str) -> str:
    """A call of the python tool in the default (Hermes) format."""
    return "<tool_call>\n" + json.dumps({"name": "python", "arguments": {"code": code}}) + "\n</tool_call>"


def tool_answer(problem, style: str) -> list:
    """The turns of a tool-arithmetic episode in one of the TOOL_ANSWER_STYLES: [call, tool message, answer]
    with the tool, [answer] without. The tool message holds what the python tool prints."""
    a, b = parse_product_question(problem.prompt_text)
    if style == "no tool":
        return [f"Answer: {a * b}"]
    expression, value = (f"{a} * {b}", a * b) if style == "tool" else (f"{a} + {b}", a + b)
    return [python_call(expression), {"role": "tool", "content": f"{value}\n"}, f"Answer: {value}"]


def repair_answer(task, style: str) -> list:
    """The turns of a code-repair episode in one of the REPAIR_ANSWER_STYLES: the first attempt (a
    CODE_ANSWER_STYLES answer), and after a failed one the feedback the code-repair environment gives on
    its first REPAIR_PUBLIC_TESTS tests, then the second attempt."""
    first, _, second = style.partition(", then ")
    attempts = [code_answer(task, first)]
    if second:
        attempts += [{"role": "user", "content": repair_feedback(task, first)}, code_answer(task, second)]
    return attempts


def repair_feedback(task, style: str) -> str:
    """What the code-repair environment says of an attempt in a failing CODE_ANSWER_STYLES style: a print
    returns None, a misnamed function is not found."""
    from dapo_rllib.tasks.rewards.code import CaseReport, call_text, feedback_text

    calls = [test[0] for test in task.calls[:REPAIR_PUBLIC_TESTS]]
    if style == "print":
        reports = [CaseReport(call_text(c), "wrong answer", "None", short_repr(c.expected)) for c in calls]
    else:
        got = f"runtime error: the program defines no {calls[0].fn_name}"
        reports = [CaseReport(call_text(c), "runtime error", got, short_repr(c.expected)) for c in calls]
    return feedback_text(reports[0].outcome, reports)


def _first_turn_right(problem, response: str) -> bool:
    """The first turn calls python with an expression whose value is the answer, or gives the answer."""
    from dapo_rllib.tasks.tools import HermesToolParser

    calls = HermesToolParser().parse(response)
    if not calls:
        return _math_correct(problem, response)
    code = (calls[0].arguments or {}).get("code")
    return isinstance(code, str) and _product_value(code) == int(problem.ground_truth)


def _product_value(code: str) -> int | None:
    """The value of `code` when it is one product or sum of two integers ("347 * 58"), else None."""
    match = re.fullmatch(r"\s*(\d+)\s*([*+])\s*(\d+)\s*", code)
    if match is None:
        return None
    a, op, b = int(match[1]), match[2], int(match[3])
    return a * b if op == "*" else a + b


def _code_train_tasks(seed: int) -> list:
    return generate_code_tasks("train", seed=seed)


def _math_correct(problem, response: str) -> bool:
    return bool(math_dapo_score(response, problem.ground_truth)["acc"])


def _code_matches_reference(task, response: str) -> bool:
    """The response's code is the reference solution (up to trailing whitespace): a lower bound
    on passing the tests, without running model-written code during a build."""
    from dapo_rllib.tasks.rewards.code import extract_code, normalize_output

    return normalize_output(extract_code(response) or "") == normalize_output(extract_code(reference_solution(task)))


@dataclass(frozen=True)
class WarmStartRecipe:
    """What a tiny model learns before RL: a task's training problems and ways of answering.

    Attributes:
        version: Name of its cache directory (bump it when the recipe changes).
        train_problems: seed -> training problems (with chat `messages`).
        answer: (problem, style) -> the response text imitated; for an episode of several turns, the
            list of its model turns with the environment's message (a dict) between them.
        styles: (weight, style) pairs: how often each way of answering is imitated.
        sft_steps, batch_size: Length of the warm start: how far from right the RL starts.
        test_problems: () -> the held-out problems the build record's accuracy is measured on.
        correct: (problem, response) -> whether the response is right (`scored_by` says how).
        max_new_tokens: Response limit of that measurement (the task's tuned example's).
        chat_template: The tokenizer's chat template.
        tools: The schemas of the tools its prompts show (rendered as the env runner renders them).
    """

    version: str
    train_problems: Callable[[int], list]
    answer: Callable[[Any, str], str]
    styles: tuple[tuple[float, str], ...]
    test_problems: Callable[[], list]
    correct: Callable[[Any, str], bool]
    scored_by: str
    max_new_tokens: int
    sft_steps: int = 800
    batch_size: int = 64
    chat_template: str = CHAT_TEMPLATE
    tools: tuple = ()  # tool schemas shown in the prompt (`dapo_rllib.tasks.tools.Tool.schema`)


# v2: built with pinned kernels and a fixed thread count (a v1 build depended on the CPU it ran on).
RECIPES: dict[str, WarmStartRecipe] = {
    "arithmetic": WarmStartRecipe(
        "tiny-qwen2-arith-v2",
        lambda seed: generate_arithmetic_problems("train", seed=seed),
        lambda problem, style: worked_solution(problem.prompt_text, style),
        ANSWER_STYLES,
        lambda: generate_arithmetic_problems("test"),
        _math_correct,
        "math_dapo",
        max_new_tokens=32,
    ),
    "code": WarmStartRecipe(
        "tiny-qwen2-code-v2",
        _code_train_tasks,
        code_answer,
        CODE_ANSWER_STYLES,
        lambda: generate_code_tasks("test"),
        _code_matches_reference,
        "the reference solution's code, exactly (a lower bound on passing the tests)",
        max_new_tokens=64,
    ),
    "sums": WarmStartRecipe(
        "tiny-qwen2-sums-v2",
        lambda seed: generate_sum_problems("train", SUMS_TRAIN_PROBLEMS, seed=seed),
        lambda problem, style: sums_answer(problem.prompt_text, style),
        SUMS_ANSWER_STYLES,
        lambda: generate_sum_problems("test", SUMS_TEST_PROBLEMS),
        _math_correct,
        "math_dapo",
        max_new_tokens=64,
        # Light: the RL starts right on a quarter to a third of held-out sums (avg@4 0.34 for the
        # v1 build, 0.26 for v2's reference build). The accuracy jumps with the length of the warm
        # start (v1): 600 steps start at 0.12, where naive GRPO finds too few right answers to
        # learn from; 1,000 start at 0.78.
        sft_steps=800,
        batch_size=32,
    ),
    "code_repair": WarmStartRecipe(
        "tiny-qwen2-code-repair-v1",
        _code_train_tasks,
        repair_answer,
        REPAIR_ANSWER_STYLES,
        lambda: generate_code_tasks("test"),
        _code_matches_reference,
        "the first attempt: the reference solution's code, exactly",
        max_new_tokens=64,
    ),
    "tool_arithmetic": WarmStartRecipe(
        "tiny-qwen2-tool-arith-v1",
        lambda seed: generate_tool_arithmetic_problems("train", seed=seed),
        tool_answer,
        TOOL_ANSWER_STYLES,
        lambda: generate_tool_arithmetic_problems("test"),
        _first_turn_right,
        "the first turn: a python call computing the answer, or the answer (math_dapo)",
        max_new_tokens=48,
        # Copying the operands from the prompt into the call is what takes long: after 500 steps of 32 the
        # calls were well-formed and their numbers random (held-out 0.0); after 1,500, 0.40. Batches of
        # 32: its conversations are four times as long as the arithmetic ones.
        sft_steps=1500,
        batch_size=32,
        chat_template=TOOL_CHAT_TEMPLATE,
        tools=(PYTHON_TOOL_SCHEMA,),
    ),
}


def _answer_text(answer: str | list) -> str:
    """The text of an imitated answer: its turns' and messages' text."""
    if isinstance(answer, str):
        return answer
    return "\n".join(turn if isinstance(turn, str) else turn["content"] for turn in answer)


def _recipe(task: str) -> WarmStartRecipe:
    if task not in RECIPES:
        raise ValueError(f"no tiny model for task {task!r}; expected one of {sorted(RECIPES)}")
    return RECIPES[task]


def default_cache_dir() -> Path:
    """Where built models live: $DAPO_RLLIB_CACHE, else ~/.cache/dapo_rllib."""
    return Path(os.environ.get("DAPO_RLLIB_CACHE", Path.home() / ".cache" / "dapo_rllib"))


def default_seed() -> int:
    """The seed of default builds: $DAPO_RLLIB_TINY_SEED, else 0."""
    value = os.environ.get(SEED_ENV, "0")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"${SEED_ENV}={value!r} is not an integer seed") from None


def default_tiny_model_path(task: str = "arithmetic", seed: int | None = None) -> Path:
    """`<cache>/<version>` for seed 0, `<cache>/<version>-seed<N>` for another."""
    seed = default_seed() if seed is None else seed
    return default_cache_dir() / (_recipe(task).version + (f"-seed{seed}" if seed else ""))


def build_tokenizer(corpus: list[str], chat_template: str = CHAT_TEMPLATE):
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
        chat_template=chat_template,
        model_max_length=1024,
    )


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
    from dapo_rllib.rollout.chat_turns import TurnRenderer

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


def _warm_start(
    recipe: WarmStartRecipe, model, tokenizer, *, steps: int, batch_size: int, lr: float, seed: int
) -> None:
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


def build_environment() -> dict[str, str]:
    """Environment variables that pin a build's kernels, as far as this CPU allows.

    torch, MKL and oneDNN read them when they first run, so the build runs in a child process
    that starts with them: on an x86-64 CPU with AVX2 (and FMA), torch's own vectorized kernels
    (`ATEN_CPU_CAPABILITY`), MKL's code path (`MKL_CBWR`, its conditional numerical
    reproducibility) and oneDNN's (`ONEDNN_MAX_CPU_ISA`) are those of AVX2, whatever newer
    instructions (AVX-512, AMX) the CPU has. MKL honours its AVX2 branch on Intel CPUs only (on
    others it picks its kernels itself; its one branch for every CPU, COMPATIBLE, doubles the build
    time); elsewhere (ARM, older x86) all kernels are the CPU's own. Always: `BUILD_THREADS`
    OpenMP/MKL threads, which sleep rather than spin while they wait (on a busy machine spinning
    threads made the build up to 3 times slower), no tokenizer threads.
    """
    env = {
        "OMP_NUM_THREADS": str(BUILD_THREADS),
        "MKL_NUM_THREADS": str(BUILD_THREADS),
        "OMP_WAIT_POLICY": "PASSIVE",
        "TOKENIZERS_PARALLELISM": "false",
    }
    if {"avx2", "fma"} <= _cpu_flags():
        env |= {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    return env


def _cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux; empty elsewhere)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    match = re.search(r"^(?:flags|Features)\s*:(.*)$", cpuinfo, re.MULTILINE)
    return set(match.group(1).split()) if match else set()


def _cpu_name() -> str:
    try:
        match = re.search(r"^model name\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    except OSError:
        match = None
    return match.group(1).strip() if match else platform.processor() or platform.machine()


def build_tiny_model(
    output_dir: str | os.PathLike,
    *,
    task: str = "arithmetic",
    sft_steps: int | None = None,
    batch_size: int | None = None,
    lr: float = 3e-3,
    seed: int = 0,
) -> Path:
    """Build tokenizer + Qwen2 model, warm-start it and `save_pretrained` it to `output_dir`,
    with its `BUILD_RECORD`.

    Runs in a child process with `build_environment()` (its output goes to this process's).
    `sft_steps` and `batch_size` default to the task's recipe. Written atomically (see `_save`).

    Raises:
        RuntimeError: The build failed (the child's output above says why).
    """
    _recipe(task)
    args = {
        "output_dir": str(output_dir),
        "task": task,
        "sft_steps": sft_steps,
        "batch_size": batch_size,
        "lr": lr,
        "seed": seed,
    }
    package_root = str(Path(__file__).resolve().parents[1])
    env = os.environ | build_environment() | {"DAPO_RLLIB_NO_REGISTRATION": "1"}  # the child needs no Ray
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    code = "import sys, json; from dapo_rllib.tiny_model import _build; _build(**json.loads(sys.argv[1]))"
    sys.stdout.flush()
    done = subprocess.run([sys.executable, "-c", code, json.dumps(args)], env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"building the tiny {task} model into {output_dir} failed (exit status {done.returncode}); "
            "the build's output above says why"
        )
    return Path(output_dir)


def _build(output_dir: str, *, task: str, sft_steps: int | None, batch_size: int | None, lr: float, seed: int) -> Path:
    """The build itself, in the process `build_tiny_model` started."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    start = time.time()
    torch.set_num_threads(BUILD_THREADS)
    torch.use_deterministic_algorithms(True)
    recipe = _recipe(task)
    output_dir = Path(output_dir)
    sft_steps, batch_size = sft_steps or recipe.sft_steps, batch_size or recipe.batch_size
    torch.manual_seed(seed)
    corpus = [
        p.messages[-1]["content"] + "\n" + _answer_text(recipe.answer(p, recipe.styles[i % len(recipe.styles)][1]))
        for i, p in enumerate(recipe.train_problems(seed))
    ]
    tokenizer = build_tokenizer(corpus, recipe.chat_template)
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
    _warm_start(recipe, model, tokenizer, steps=sft_steps, batch_size=batch_size, lr=lr, seed=seed)
    held_out = held_out_accuracy(model, tokenizer, task, seed=seed)
    print(f"[tiny model] held-out {held_out['problems']} problems: " + _accuracy_text(held_out), flush=True)
    flags = _cpu_flags()
    record = {
        "task": task,
        "version": recipe.version,
        "seed": seed,
        "sft_steps": sft_steps,
        "batch_size": batch_size,
        "lr": lr,
        "held_out": held_out,
        "built_with": {
            "torch": torch.__version__,
            "transformers": _version("transformers"),
            "tokenizers": _version("tokenizers"),
            "python": platform.python_version(),
            "threads": torch.get_num_threads(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "environment": {name: os.environ.get(name) for name in build_environment()},
            "cpu": _cpu_name(),
            "machine": platform.machine(),
            "cpu_flags": sorted(f for f in flags if re.fullmatch(r"sse4_2|avx|avx2|fma|f16c|avx512\w*|amx\w*", f)),
            "seconds": None,  # filled in by _save
        },
    }
    return _save(model, tokenizer, output_dir, record=record, started=start)


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


@torch.no_grad()
def held_out_accuracy(model, tokenizer, task: str, *, samples: int = HELD_OUT_SAMPLES, seed: int = 0) -> dict:
    """Accuracy of `model` on the task's held-out problems, `samples` seeded samples per problem at
    temperature 1.0 (what RL starts from): avg@samples, and mixed@samples, the share of problems
    whose samples are neither all right nor all wrong (what dynamic sampling keeps)."""
    from transformers import GenerationConfig

    from dapo_rllib.rollout.chat_turns import TurnRenderer

    recipe = _recipe(task)
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


def _accuracy_text(held_out: dict) -> str:
    n = held_out["samples"]
    return f"avg@{n} {held_out[f'avg@{n}']:.3f}, mixed@{n} {held_out[f'mixed@{n}']:.3f}"


def weights_fingerprint(model_dir: str | os.PathLike) -> str:
    """sha256 over a model directory's weights: every tensor of its *.safetensors files, in name
    order, as name, dtype, shape and raw bytes. Equal fingerprints: bit-identical weights."""
    from safetensors.torch import load_file

    tensors = {}
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        tensors |= load_file(file)
    if not tensors:
        raise FileNotFoundError(f"no *.safetensors weights in {model_dir}")
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def read_build_record(model_dir: str | os.PathLike) -> dict | None:
    """The `BUILD_RECORD` of a model directory, None if it has none (not built here, or before v2)."""
    try:
        return json.loads((Path(model_dir) / BUILD_RECORD).read_text())
    except (OSError, ValueError):
        return None


#: The builds the test suite was last checked with (seed 0; torch 2.13.0+cpu on an AMD EPYC with
#: AVX-512, kernels pinned to AVX2): version -> the fingerprint and held-out accuracy of its record.
REFERENCE_BUILDS: dict[str, dict[str, Any]] = {
    "tiny-qwen2-arith-v2": {
        "fingerprint": "9b98d9d9349c31037634e083f7e39f89d87a3e4dc2d4dee4b85b838ee21f5381",
        "held_out": {"samples": 4, "avg@4": 0.285, "mixed@4": 0.6839},
    },
    "tiny-qwen2-code-v2": {
        "fingerprint": "f59d8f94f0f34ad07dbdd6db249fce561f7508f909914f226b01240f46c4b99f",
        "held_out": {"samples": 4, "avg@4": 0.0668, "mixed@4": 0.2094},
    },
    "tiny-qwen2-sums-v2": {
        "fingerprint": "267ad9b380e3da81dc751516529bed3e87df8badccf53d534393ddb3b1160e68",
        "held_out": {"samples": 4, "avg@4": 0.2604, "mixed@4": 0.5083},
    },
    # Held-out of the first attempt only.
    "tiny-qwen2-code-repair-v1": {
        "fingerprint": "d4721e8c88bd7ccae1e10324f6b1a9b920b0997e3c4b35cc37e75ab01fe0f815",
        "held_out": {"samples": 4, "avg@4": 0.4123, "mixed@4": 0.822},
    },
    # Held-out of the first turn only: a python call computing the answer, or the answer.
    "tiny-qwen2-tool-arith-v1": {
        "fingerprint": "c36dd732afa696b8c43b6ce98a0e825fdd9ed9677744ed40aa9981e21e4d9d2a",
        "held_out": {"samples": 4, "avg@4": 0.3987, "mixed@4": 0.85},
    },
}


def is_reference_build(model_dir: str | os.PathLike) -> bool | None:
    """Whether the model in `model_dir` is the reference build of its recipe (`REFERENCE_BUILDS`);
    None when it has no build record or its version no reference."""
    record = read_build_record(model_dir)
    reference = REFERENCE_BUILDS.get(record["version"]) if record else None
    return None if reference is None else reference["fingerprint"] == record["fingerprint"]


def describe_build(model_dir: str | os.PathLike) -> str:
    """One line on the model in `model_dir`: its fingerprint and held-out accuracy, and whether it
    is the reference build of its recipe, the one the tests were checked with."""
    record = read_build_record(model_dir)
    if record is None:
        fingerprint = weights_fingerprint(model_dir)[:16]
        return f"{model_dir}: fingerprint {fingerprint}, no {BUILD_RECORD} (not built by this tiny_model.py)"
    built = record["built_with"]
    line = (
        f"{model_dir}: {record['version']} seed {record['seed']}, fingerprint {record['fingerprint'][:16]}, "
        f"held-out {_accuracy_text(record['held_out'])}; built with torch {built['torch']}, "
        f"{built['cpu_capability']} kernels, {built['threads']} thread(s) on {built['cpu']}"
    )
    match = is_reference_build(model_dir)
    if match is None:
        return line + "; no reference build of this version to compare with"
    if match:
        return line + "; the reference build (the model the tests were checked with)"
    reference = REFERENCE_BUILDS[record["version"]]
    return line + (
        f"; NOT the reference build (fingerprint {reference['fingerprint'][:16]}, held-out "
        f"{_accuracy_text(reference['held_out'])}) the tests were checked with"
    )


def _save(model, tokenizer, output_dir: Path, *, record: dict | None = None, started: float | None = None) -> Path:
    """`save_pretrained` model and tokenizer (and `record`, completed with the weights'
    fingerprint, as `BUILD_RECORD`) into a temporary sibling directory, renamed at the end, so a
    crashed or concurrent build never leaves a half-written model behind."""
    from transformers import GenerationConfig

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=output_dir.name + ".", dir=output_dir.parent))
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if record is not None:
        record = {"fingerprint": weights_fingerprint(tmp)} | record
        if started is not None:
            record["built_with"]["seconds"] = round(time.time() - started, 1)
        (tmp / BUILD_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        print(f"[tiny model] fingerprint {record['fingerprint'][:16]} ({BUILD_RECORD})", flush=True)
    try:
        tmp.rename(output_dir)
    except OSError:  # another process finished first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return output_dir


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
    return _save(model, tokenizer, output_dir)


def ensure_tiny_model(path: str | os.PathLike | None = None, *, task: str = "arithmetic", **build_kwargs) -> Path:
    """Return the directory of the tiny model for `task`, building it first if it is not there yet.

    Without `path`: the default build of `seed` (build_kwargs; default $DAPO_RLLIB_TINY_SEED or 0)."""
    build_kwargs.setdefault("seed", default_seed())
    path = Path(path) if path is not None else default_tiny_model_path(task, build_kwargs["seed"])
    if not (path / "config.json").exists():
        build_tiny_model(path, task=task, **build_kwargs)
    return path
