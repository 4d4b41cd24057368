"""What the policy is shown: the DAPO prompt wording and the token ids of a chat prompt.

Everything that measures or feeds a prompt to the model (the env runner, the converter's
length filter) goes through :func:`render_prompt_ids`, so a length checked offline is the
length the model sees in training.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

logger = logging.getLogger(__name__)

#: DAPO-Math-17K's prompt template (docs/design/algorithm.md §3); ``{problem}`` is the question.
DAPO_PROMPT_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your "
    "response should be of the form Answer: $Answer (without quotes) where "
    "$Answer is the answer to the problem.\n\n{problem}\n\nRemember to put your "
    'answer on its own line after "Answer:".'
)

#: Separator between message contents when a tokenizer has no chat template.
PLAIN_MESSAGE_SEPARATOR = "\n\n"

# Tokenizers already warned about rendering without a chat template (once each).
_WARNED_PLAIN: weakref.WeakSet = weakref.WeakSet()


def has_chat_template(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` carries a chat template (base models often do not)."""
    return bool(getattr(tokenizer, "chat_template", None))


def render_prompt_ids(tokenizer: Any, messages: Iterable[Mapping[str, str]]) -> list[int]:
    """Token ids of the prompt the model sees for chat ``messages``.

    With a chat template: the template applied with ``add_generation_prompt=True``, so
    the ids end where the assistant's reply starts; when the last message is the assistant's,
    with ``continue_final_message=True``, so the ids end inside it and the model continues it. Without one: the message contents
    joined with a blank line and tokenized as plain text (roles dropped), which is logged
    as a warning the first time for each tokenizer.

    Raises:
        ValueError: ``messages`` is empty.
    """
    messages = [dict(message) for message in messages]
    if not messages:
        raise ValueError("cannot render a prompt from no messages; expected at least one {'role', 'content'} message")
    if has_chat_template(tokenizer):
        # A final assistant message is the start of the reply, which the model continues
        # (completion-style prompts: HumanEval's function header).
        prefilled = messages[-1]["role"] == "assistant"
        ids = tokenizer.apply_chat_template(
            messages,
            add_generation_prompt=not prefilled,
            continue_final_message=prefilled,
            tokenize=True,
            return_dict=False,
        )
        return list(ids)
    _warn_plain_once(tokenizer)
    text = PLAIN_MESSAGE_SEPARATOR.join(message["content"] for message in messages)
    # The tokenizer's default special tokens (a BOS where the model expects one): with no
    # template to supply them, this is how the model saw text in pretraining.
    return list(tokenizer(text)["input_ids"])


def _warn_plain_once(tokenizer: Any) -> None:
    try:
        if tokenizer in _WARNED_PLAIN:
            return
        _WARNED_PLAIN.add(tokenizer)
    except TypeError:  # not weak-referenceable: warn every time rather than never
        pass
    logger.warning(
        "tokenizer %r has no chat template: prompts are rendered as plain text, the message "
        "contents joined with %r and the roles dropped; set the tokenizer's chat_template "
        "(tokenizer_config.json) for chat-formatted prompts",
        getattr(tokenizer, "name_or_path", type(tokenizer).__name__),
        PLAIN_MESSAGE_SEPARATOR,
    )


__all__ = ["DAPO_PROMPT_TEMPLATE", "PLAIN_MESSAGE_SEPARATOR", "has_chat_template", "render_prompt_ids"]
