"""Several LoRA adapters served side by side by one vLLM engine (dapo_rllib.models.adapter_shelf), as a league
serves its snapshots: a batch whose prompts carry different adapters samples each prompt from its own adapter,
exactly as that adapter alone does, from one copy of the base model. The base model itself is served as an
adapter whose B matrices are zero (a LoRA run's initial policy): on vLLM 0.32's CPU backend a prompt without an
adapter, in a batch with adapter prompts, is sampled from one of their adapters (seen here: the base prompt gave
the league adapter's tokens, whether or not that adapter was in the batch)."""

import pytest
import torch

from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.models.adapter_shelf import AdapterShelf
from dapo_rllib.models.lora import adapter_config, adapter_tensors, apply_lora
from dapo_rllib.rollout.vllm_engine import EngineSettings, build_vllm_engine

ADAPTERS = ("policy", "league_10", "initial")
B_SCALE = {"policy": 0.5, "league_10": 0.5, "initial": 0.0}  # the initial policy's B matrices are zero


def random_adapter(model_path: str, config, seed: int, b_scale: float = 0.5) -> tuple[dict, dict]:
    """Adapter tensors with B matrices drawn at `b_scale` (a trained adapter moves the policy; a new one, B = 0,
    does not)."""
    from transformers import AutoModelForCausalLM

    model = apply_lora(AutoModelForCausalLM.from_pretrained(model_path), config.lora_settings)
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, tensor in adapter_tensors(model).items():
        with torch.no_grad():
            if "lora_B" in name:
                tensor.copy_(torch.randn(tensor.shape, generator=generator) * b_scale)
        tensors[name] = tensor.detach().clone()
    return tensors, adapter_config(model)


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    config = DAPOConfig().training(
        model_path=tiny_model_path,
        lora_rank=8,
        lora_sync="adapter",
        max_prompt_length=64,
        max_response_length=16,
        # Both adapters in one batch, and held at once.
        vllm_engine_kwargs={"max_loras": len(ADAPTERS), "max_cpu_loras": len(ADAPTERS)},
    )
    llm = build_vllm_engine(EngineSettings.from_config(config), seed=0)
    shelf = AdapterShelf(llm, owner="test engine")
    for seed, name in enumerate(ADAPTERS, 1):
        shelf.put(name, *random_adapter(tiny_model_path, config, seed, B_SCALE[name]))
    yield llm, shelf
    shelf.close()


def greedy(llm, prompt_ids, requests) -> list[tuple[list[int], list[float]]]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=12, logprobs=0)
    outputs = llm.generate(
        [TokensPrompt(prompt_token_ids=prompt_ids)] * len(requests), params, use_tqdm=False, lora_request=requests
    )
    return [
        (list(out.outputs[0].token_ids), [next(iter(step.values())).logprob for step in out.outputs[0].logprobs])
        for out in outputs
    ]


def test_one_batch_samples_each_prompt_from_its_own_adapter(engine, tiny_model_path):
    from transformers import AutoTokenizer

    llm, shelf = engine
    prompt = AutoTokenizer.from_pretrained(tiny_model_path).encode("What is 3 + 4?")
    alone = {name: greedy(llm, prompt, [shelf.request(name)])[0] for name in ADAPTERS}
    # The zero adapter is the base model; the two others are two other policies.
    assert alone["initial"][0] == greedy(llm, prompt, [None])[0][0]
    assert len({tuple(tokens) for tokens, _ in alone.values()}) == 3
    for order in (ADAPTERS, ADAPTERS[::-1]):
        mixed = greedy(llm, prompt, [shelf.request(name) for name in order])
        for name, (tokens, logprobs) in zip(order, mixed):
            assert tokens == alone[name][0], name
            torch.testing.assert_close(torch.tensor(logprobs), torch.tensor(alone[name][1]), atol=1e-4, rtol=0)


def test_a_name_replaced_serves_its_new_adapter_under_a_new_id(engine, tiny_model_path):
    llm, shelf = engine
    before = shelf.request("league_10")
    shelf.put("league_10", *random_adapter(tiny_model_path, DAPOConfig().training(lora_rank=8), seed=7))
    after = shelf.request("league_10")
    assert after.lora_int_id > before.lora_int_id and after.lora_name != before.lora_name
    assert shelf.engine_adapter_ids() == {shelf.request(name).lora_int_id for name in ADAPTERS}


def test_an_unknown_adapter_is_named_in_the_error(engine):
    _, shelf = engine
    with pytest.raises(
        KeyError, match=r"serves no adapter named 'league_99'; it serves \['initial', 'league_10', 'policy'\]"
    ):
        shelf.request("league_99")
