"""Rendering the turns of an episode as token ids (dapo_rllib.tasks.chat_turns): the environment's messages appended
to the model's turns give exactly the ids of the whole conversation rendered at once; templates that cannot
show tools or cannot be appended to are refused, naming the template."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from dapo_rllib.models.tiny import CHAT_TEMPLATE, TOOL_CHAT_TEMPLATE
from dapo_rllib.tasks.chat_turns import TurnRenderer, check_renders_tools
from dapo_rllib.tasks.tools import PYTHON_PARAMETERS, Tool

TOOLS = [Tool("python", "Run Python code.", PYTHON_PARAMETERS, str).schema]
PROMPT = [{"role": "user", "content": "What is 123 * 45?"}]
CALL = '<tool_call>\n{"name": "python", "arguments": {"code": "123 * 45"}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    return tokenizer


def render(tokenizer, messages, **kwargs):
    return tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=True, return_dict=False, **kwargs)


def test_turns_appended_as_ids_equal_the_whole_conversation_rendered_at_once(tokenizer):
    renderer = TurnRenderer(tokenizer, TOOLS)
    tool_results = [{"role": "tool", "name": "python", "content": "5535"}]
    # The model's turn as sampled: its text's ids, then the end-of-turn token.
    model_turn = tokenizer.encode(CALL, add_special_tokens=False) + [tokenizer.eos_token_id]
    ids = renderer.prompt_ids(PROMPT) + model_turn + renderer.turn_ids(tool_results)
    whole = [*PROMPT, {"role": "assistant", "content": CALL}, *tool_results]
    assert ids == render(tokenizer, whole, add_generation_prompt=True)
    assert tokenizer.decode(renderer.turn_ids(tool_results)) == (
        "\n<|im_start|>user\n<tool_response>\n5535\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_turn_that_stopped_at_a_stop_string_is_closed_with_the_end_of_turn_token(tokenizer):
    assert TurnRenderer(tokenizer, TOOLS).end_of_turn_ids() == [tokenizer.convert_tokens_to_ids("<|im_end|>")]


def test_feedback_messages_render_as_a_user_turn(tokenizer):
    renderer = TurnRenderer(tokenizer)  # no tools: the tokenizer's template as it is
    ids = renderer.turn_ids([{"role": "user", "content": "Wrong, try again."}])
    assert tokenizer.decode(ids) == "\n<|im_start|>user\nWrong, try again.<|im_end|>\n<|im_start|>assistant\n"


def test_long_tool_output_is_cut_to_max_tool_response_tokens(tokenizer):
    renderer = TurnRenderer(tokenizer, TOOLS, max_tool_response_tokens=8)
    text = tokenizer.decode(renderer.turn_ids([{"role": "tool", "content": "1234567890" * 3}]))
    # The tiny tokenizer splits digits one by one: 8 tokens are 8 digits, 22 are cut.
    assert "\n12345678\n[... 22 more tokens of output cut]\n</tool_response>" in text
    assert "9" not in text


def test_a_template_that_ignores_tools_is_refused_with_its_name(tiny_model_path):
    plain = AutoTokenizer.from_pretrained(tiny_model_path)
    assert plain.chat_template == CHAT_TEMPLATE  # the tiny math model's: no tools
    with pytest.raises(
        ValueError, match=r"the chat template of tokenizer '.*' \(\"\{% for message.*does not render tools"
    ):
        check_renders_tools(plain)
    plain.chat_template = None
    with pytest.raises(ValueError, match="has no chat template, so it cannot show tools"):
        check_renders_tools(plain)


def test_a_tools_template_passes_the_check(tokenizer):
    check_renders_tools(tokenizer)


def test_a_template_that_renders_a_conversation_differently_once_it_goes_on_is_refused(tiny_model_path):
    counting = AutoTokenizer.from_pretrained(tiny_model_path)
    # Starts with the number of messages: a longer conversation changes its beginning.
    counting.chat_template = "{{ messages | length }}" + CHAT_TEMPLATE
    with pytest.raises(ValueError, match="renders a conversation differently once messages follow it"):
        TurnRenderer(counting).turn_ids([{"role": "user", "content": "again"}])


def test_more_than_one_turn_needs_a_chat_template(tiny_model_path):
    plain = AutoTokenizer.from_pretrained(tiny_model_path)
    plain.chat_template = None
    with pytest.raises(ValueError, match="an episode of more than one turn needs one"):
        TurnRenderer(plain).turn_ids([{"role": "user", "content": "again"}])
