"""Checks of a model's tokenizer and chat template, the parts of a run that no forward pass shows wrong:
multi-turn episodes need a prefix-preserving template, tool environments a template that renders tools, the
sampler and the learner the same end-of-turn token, and the run's sequences a context that holds them."""

from __future__ import annotations

from typing import Any

from dapo_rllib.doctor.report import FAIL, NOTE, PASS, Check
from dapo_rllib.tasks.chat_turns import TurnRenderer, check_renders_tools
from dapo_rllib.tasks.data.prompts import has_chat_template

#: A conversation with what templates and tokenizers get wrong: a system prompt, numbers, spaces, non-ASCII.
PROBE_CONVERSATION = (
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "What is  12 + 30?  Answer in English or français, e.g. « 42 »."},
    {"role": "assistant", "content": "12 + 30 = 42.\n\nAnswer: 42"},
    {"role": "user", "content": "And 42 − 2?"},
)


def template_checks(tokenizer: Any, model_config: Any, generation_config: Any, longest_sequence: int) -> list[Check]:
    """The template and tokenizer checks, in the table's order. `generation_config`: the model's
    (`GenerationConfig`), or its config where it has none."""
    if not has_chat_template(tokenizer):
        no_template = Check(
            "chat template", NOTE, "none: prompts are plain text, and episodes of more than one turn are refused"
        )
        return [
            no_template,
            end_of_turn_check(tokenizer, generation_config),
            context_check(model_config, longest_sequence),
        ]
    return [
        prefix_check(tokenizer),
        tools_check(tokenizer),
        end_of_turn_check(tokenizer, generation_config),
        round_trip_check(tokenizer),
        context_check(model_config, longest_sequence),
    ]


def prefix_check(tokenizer: Any) -> Check:
    """Whether the environment's messages can be appended to a model turn as ids (`TurnRenderer.turn_ids`)."""
    name = "prefix-preserving template"
    try:
        ids = TurnRenderer(tokenizer).turn_ids([{"role": "user", "content": "And then?"}])
    except ValueError as error:
        return Check(name, FAIL, f"{error}: multi-turn episodes are refused with this template")
    return Check(
        name,
        PASS,
        f"a conversation renders as a prefix of its continuation: a user turn after a model turn adds {len(ids)} ids",
        {"turn_ids": len(ids)},
    )


def tools_check(tokenizer: Any) -> Check:
    """Whether the template shows tools to the model; not rendering them is a limit, not a fault."""
    name = "tools in the template"
    try:
        check_renders_tools(tokenizer)
    except ValueError as error:
        return Check(
            name, NOTE, "not rendered: environments with tools are refused, others run", {"reason": str(error)}
        )
    return Check(name, PASS, "rendered: environments with tools can show them to the model")


def end_of_turn_check(tokenizer: Any, generation_config: Any) -> Check:
    """The tokenizer's EOS, the generation config's EOS ids and the template's end of an assistant turn agree.

    vLLM stops a sample at the tokenizer's EOS and at the generation config's EOS ids; the env runner closes a
    turn that stopped elsewhere with the tokenizer's EOS, and the template ends an assistant turn with it. A
    model that stops at a token the template does not end turns with trains on turns it never sees again.
    """
    name = "end of turn"
    eos = tokenizer.eos_token_id
    if eos is None:
        return Check(name, FAIL, "the tokenizer has no eos_token: samples would stop only at the length limit")
    generation_eos = _generation_eos_ids(generation_config)
    values = {"tokenizer_eos": eos, "generation_config_eos": generation_eos}
    problems = []
    if generation_eos and eos not in generation_eos:
        problems.append(f"the generation config stops at {generation_eos}, not at the tokenizer's EOS {eos}")
    if has_chat_template(tokenizer):
        turn = tokenizer.apply_chat_template(
            [dict(m) for m in PROBE_CONVERSATION[:3]], tokenize=True, return_dict=False, add_generation_prompt=False
        )
        values["template_ends_turns_with_eos"] = eos in list(turn)
        if eos not in list(turn):
            problems.append(f"the template does not end an assistant turn with the EOS token {tokenizer.eos_token!r}")
    if problems:
        return Check(name, FAIL, "; ".join(problems), values)
    stops = f"generation config {generation_eos}" if generation_eos else "no generation config EOS"
    return Check(name, PASS, f"EOS {tokenizer.eos_token!r} ({eos}) everywhere: tokenizer, {stops}, template", values)


def round_trip_check(tokenizer: Any) -> Check:
    """The rendered conversation's text encodes to the ids the template gives, and decodes back to the text:
    prompts rendered as text (a dataset's, `rllib data convert`'s) then mean what the env runner's ids mean."""
    name = "template round trip"
    messages = [dict(m) for m in PROBE_CONVERSATION]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = list(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False, add_generation_prompt=True))
    encoded = tokenizer.encode(text, add_special_tokens=False)
    decoded = tokenizer.decode(ids)
    values = {"ids": len(ids), "ids_of_text": len(encoded)}
    if encoded != ids:
        at = next((i for i, (a, b) in enumerate(zip(encoded, ids)) if a != b), min(len(encoded), len(ids)))
        return Check(
            name, FAIL, f"the rendered text encodes to other ids than the template's, from position {at}", values
        )
    if decoded != text:
        return Check(name, FAIL, "the template's ids decode to other text than the template renders", values)
    return Check(name, PASS, f"text -> {len(ids)} ids -> the same text", values)


def context_check(model_config: Any, longest_sequence: int) -> Check:
    """The run's longest sequence (prompt and response budget) fits the model's positions."""
    name = "context length"
    positions = getattr(model_config, "max_position_embeddings", None)
    values = {"max_position_embeddings": positions, "longest_sequence": longest_sequence}
    if positions is None:
        return Check(name, NOTE, "the model config does not say how many positions the model has", values)
    if longest_sequence > positions:
        return Check(
            name,
            FAIL,
            f"max_prompt_length + max_response_length = {longest_sequence} > the model's {positions} positions",
            values,
        )
    return Check(name, PASS, f"{positions} positions; this run's sequences up to {longest_sequence}", values)


def _generation_eos_ids(generation_config: Any) -> list[int]:
    eos = getattr(generation_config, "eos_token_id", None)
    return [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
