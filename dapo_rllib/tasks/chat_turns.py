"""Token ids of the turns of a multi-turn episode, rendered by the tokenizer's chat template.

The model's turns are kept exactly as vLLM sampled them; they are never decoded and encoded again. What
the environment says between them (tool results, feedback) is rendered alone and appended: the
template renders a fixed conversation ending in an assistant turn, then the same conversation followed by
the new messages (with the generation prompt of the next assistant turn), and the new messages' ids are
what the second has past the first's last end-of-turn token. The piece after that token (Qwen's
``\\n`` after ``<|im_end|>``) therefore comes with them, as a render of the whole conversation would
have it. A template for which this is not a prefix of the whole render is refused, naming the template.

Tools reach the model through the template (``apply_chat_template(..., tools=[...])``); a template that
renders the same prompt with and without tools cannot show them and is refused when the environment is
built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dapo_rllib.tasks.data.prompts import has_chat_template, render_prompt_ids

# The fixed conversation new messages are rendered after; its content does not matter.
_BASE = ({"role": "user", "content": "?"}, {"role": "assistant", "content": "."})
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "probe_tool_name_x",
        "description": "probe",
        "parameters": {"type": "object", "properties": {}},
    },
}


def template_name(tokenizer: Any) -> str:
    """How errors name a tokenizer's chat template: the tokenizer's path, and the template's start."""
    template = getattr(tokenizer, "chat_template", None)
    start = template if not isinstance(template, str) else (template[:60] + "..." if len(template) > 60 else template)
    return f"the chat template of tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} ({start!r})"


def _render(tokenizer: Any, messages: Sequence[Mapping], tools, *, generation_prompt: bool) -> list[int]:
    ids = tokenizer.apply_chat_template(
        [dict(m) for m in messages],
        tools=tools or None,
        add_generation_prompt=generation_prompt,
        tokenize=True,
        return_dict=False,
    )
    return list(ids)


def check_renders_tools(tokenizer: Any) -> None:
    """Raise unless the tokenizer's chat template shows tools to the model.

    Raises:
        ValueError: The tokenizer has no chat template, or its template renders a prompt the same with and
            without a tool (it ignores ``tools``).
    """
    if not has_chat_template(tokenizer):
        raise ValueError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template, so it cannot show tools "
            "to the model; use a tokenizer whose chat template renders `tools` (Qwen2.5's does)"
        )
    plain = _render(tokenizer, _BASE[:1], None, generation_prompt=True)
    try:
        with_tool = _render(tokenizer, _BASE[:1], [_PROBE_TOOL], generation_prompt=True)
    except Exception as error:
        raise ValueError(f"{template_name(tokenizer)} fails to render tools: {error}") from error
    if with_tool == plain:
        raise ValueError(
            f"{template_name(tokenizer)} does not render tools (the prompt is the same with and without them); "
            "use a tokenizer whose chat template renders `tools` (Qwen2.5's does)"
        )


class TurnRenderer:
    """Token ids of a prompt and of the environment's messages between model turns, for one tokenizer and
    one set of tool schemas.

    Args:
        tokenizer: A Hugging Face tokenizer.
        tools: The tools' schemas (``Tool.schema``), or empty.
        max_tool_response_tokens: Tool messages (role ``"tool"``) longer than this are cut to their first
            ``max_tool_response_tokens`` tokens, with a note of how many were cut.
    """

    def __init__(self, tokenizer: Any, tools: Sequence[Mapping] = (), max_tool_response_tokens: int = 256):
        self.tokenizer = tokenizer
        self.tools = [dict(tool) for tool in tools]
        self.max_tool_response_tokens = max_tool_response_tokens
        self._base: tuple[list[int], int] | None = None  # (ids of _BASE, where its last end of turn ends)

    def prompt_ids(self, messages: Sequence[Mapping]) -> list[int]:
        """The ids of the first messages, ending with the generation prompt (tools shown where given)."""

        if self.tools:
            return _render(self.tokenizer, messages, self.tools, generation_prompt=True)
        return render_prompt_ids(self.tokenizer, messages)

    def turn_ids(self, messages: Sequence[Mapping]) -> list[int]:
        """The ids that follow a model turn's end-of-turn token: ``messages`` and the next generation prompt.

        Raises:
            ValueError: The tokenizer has no chat template, or its template does not render the base
                conversation as a prefix of the longer one.
        """
        if not has_chat_template(self.tokenizer):
            raise ValueError(
                f"tokenizer {getattr(self.tokenizer, 'name_or_path', '?')!r} has no chat template: an episode of "
                "more than one turn needs one to show the environment's messages to the model"
            )
        base, cut = self._base_ids()
        full = _render(
            self.tokenizer, [*_BASE, *map(self._cut_tool_message, messages)], self.tools, generation_prompt=True
        )
        if full[:cut] != base[:cut]:
            raise ValueError(
                f"{template_name(self.tokenizer)} renders a conversation differently once messages follow it, so "
                "the environment's messages cannot be appended to the model's turns as token ids"
            )
        return full[cut:]

    def end_of_turn_ids(self) -> list[int]:
        """What closes a model turn that stopped at a stop string rather than at its end-of-turn token."""
        return [self.tokenizer.eos_token_id]

    def _base_ids(self) -> tuple[list[int], int]:
        if self._base is None:
            base = _render(self.tokenizer, _BASE, self.tools, generation_prompt=False)
            eos = self.tokenizer.eos_token_id
            ends = [i for i, token in enumerate(base) if token == eos]
            if not ends:
                raise ValueError(
                    f"{template_name(self.tokenizer)} does not end an assistant turn with the end-of-turn "
                    f"token {self.tokenizer.eos_token!r}, so a model turn's end cannot be found"
                )
            self._base = (base, ends[-1] + 1)
        return self._base

    def _cut_tool_message(self, message: Mapping) -> dict:
        message = dict(message)
        if message.get("role") != "tool":
            return message
        ids = self.tokenizer.encode(message["content"], add_special_tokens=False)
        limit = self.max_tool_response_tokens
        if len(ids) > limit:
            message["content"] = (
                self.tokenizer.decode(ids[:limit]) + f"\n[... {len(ids) - limit} more tokens of output cut]"
            )
        return message
