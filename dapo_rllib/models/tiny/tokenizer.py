"""The tiny models' tokenizer: byte-level BPE trained on a task's own text, with a Qwen-style chat template.

Digits are split one by one, as Qwen's tokenizer does, so numbers stay learnable.
"""

from __future__ import annotations

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
