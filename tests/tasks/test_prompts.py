"""Tests for prompt rendering: chat template where the tokenizer has one, plain text otherwise."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from dapo_rllib.tasks.data import DAPO_PROMPT_TEMPLATE, has_chat_template, render_prompt_ids
from dapo_rllib.tasks.data.arithmetic import DAPO_PROMPT_TEMPLATE as ARITHMETIC_MODULE_TEMPLATE

MESSAGES = (
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 47 + 8?"},
)


@pytest.fixture(scope="module")
def chat_tokenizer(tiny_model_path):
    return AutoTokenizer.from_pretrained(tiny_model_path, local_files_only=True)


@pytest.fixture(scope="module")
def plain_tokenizer(plain_tokenizer_path):
    return AutoTokenizer.from_pretrained(plain_tokenizer_path, local_files_only=True)


def test_has_chat_template(chat_tokenizer, plain_tokenizer):
    assert has_chat_template(chat_tokenizer)
    assert not has_chat_template(plain_tokenizer)


def test_chat_template_renders_every_message_and_the_generation_prompt(chat_tokenizer):
    ids = render_prompt_ids(chat_tokenizer, MESSAGES)
    assert type(ids) is list and all(type(i) is int for i in ids)
    assert chat_tokenizer.decode(ids) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 47 + 8?<|im_end|>\n<|im_start|>assistant\n"
    )
    # A tuple of messages (MathProblem.messages) renders like the list.
    assert render_prompt_ids(chat_tokenizer, list(MESSAGES)) == ids


def test_without_chat_template_contents_are_joined_by_a_blank_line(plain_tokenizer):
    ids = render_prompt_ids(plain_tokenizer, MESSAGES)
    assert plain_tokenizer.decode(ids) == "Be brief.\n\nWhat is 47 + 8?"
    assert ids == plain_tokenizer("Be brief.\n\nWhat is 47 + 8?")["input_ids"]


def test_chat_template_adds_tokens_around_the_same_text(chat_tokenizer, plain_tokenizer):
    single = ({"role": "user", "content": "What is 47 + 8?"},)
    chat_ids = render_prompt_ids(chat_tokenizer, single)
    plain_ids = render_prompt_ids(plain_tokenizer, single)
    assert len(chat_ids) > len(plain_ids)
    # Same vocabulary: the plain ids are the content tokens inside the template.
    start = chat_ids.index(plain_ids[0])
    assert chat_ids[start : start + len(plain_ids)] == plain_ids


def test_no_messages_is_an_error(chat_tokenizer):
    with pytest.raises(ValueError, match="no messages"):
        render_prompt_ids(chat_tokenizer, [])


def test_dapo_template_is_the_one_in_dapo_md_and_still_importable_from_arithmetic():
    assert ARITHMETIC_MODULE_TEMPLATE is DAPO_PROMPT_TEMPLATE
    prompt = DAPO_PROMPT_TEMPLATE.format(problem="Find x.")
    assert prompt.startswith("Solve the following math problem step by step. The last line of your response")
    assert "\n\nFind x.\n\n" in prompt
    assert prompt.endswith('Remember to put your answer on its own line after "Answer:".')
