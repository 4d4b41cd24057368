"""What the policy is shown: the DAPO prompt wording and the token ids of a chat prompt.

Everything that measures or feeds a prompt to the model (the env runner, the converter's
length filter) goes through :func:`render_prompt_ids`, so a length checked offline is the
length the model sees in training.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: DAPO-Math-17K's prompt template (DAPO.md §3); ``{problem}`` is the question.
DAPO_PROMPT_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your "
    "response should be of the form Answer: $Answer (without quotes) where "
    "$Answer is the answer to the problem.\n\n{problem}\n\nRemember to put your "
    'answer on its own line after "Answer:".'
)

#: Separator between message contents when a tokenizer has no chat template.
PLAIN_MESSAGE_SEPARATOR = "\n\n"


def has_chat_template(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` carries a chat template (base models often do not)."""
    return bool(getattr(tokenizer, "chat_template", None))


def render_prompt_ids(tokenizer: Any, messages: Iterable[Mapping[str, str]]) -> list[int]:
    """Token ids of the prompt the model sees for chat ``messages``.

    With a chat template: the template applied with ``add_generation_prompt=True``, so
    the ids end where the assistant's reply starts. Without one: the message contents
    joined with a blank line and tokenized as plain text.

    Raises:
        ValueError: ``messages`` is empty.
    """
    messages = [dict(message) for message in messages]
    if not messages:
        raise ValueError("cannot render a prompt from no messages; expected at least one {'role', 'content'} message")
    if has_chat_template(tokenizer):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        return list(ids)
    text = PLAIN_MESSAGE_SEPARATOR.join(message["content"] for message in messages)
    # The tokenizer's default special tokens (a BOS where the model expects one): with no
    # template to supply them, this is how the model saw text in pretraining.
    return list(tokenizer(text)["input_ids"])


__all__ = ["DAPO_PROMPT_TEMPLATE", "PLAIN_MESSAGE_SEPARATOR", "has_chat_template", "render_prompt_ids"]
