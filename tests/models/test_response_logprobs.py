"""`rl_module.response_logprobs`, the learner's one forward pass, against the plain computation:
the model's full logits, log-softmax, gather. It asks the model for hidden states only and
projects them to the vocabulary itself, in chunks recomputed in the backward pass; both must give
the same log-probs, entropies and gradients."""

import pytest
import torch

from dapo_rllib.columns import Columns
from dapo_rllib.models import rl_module
from dapo_rllib.models.rl_module import entropy_from_logits

TEMPERATURE = 0.7


def batch():
    """Three prompts (left-padded) and responses (right-padded) of uneven lengths."""
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 1]], dtype=torch.float32)
    response_mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 40, prompt_mask.shape, generator=generator) * prompt_mask.long()
    response = torch.randint(3, 40, response_mask.shape, generator=generator) * response_mask.long()
    return {
        Columns.OBS: prompt,
        Columns.PROMPT_MASK: prompt_mask,
        Columns.ACTIONS: response,
        Columns.RESPONSE_MASK: response_mask,
    }


def plain_logprobs(model, b):
    """Every position's logits from the model's own head, then the sampled tokens' log-probs."""
    ids = torch.cat([b[Columns.OBS], b[Columns.ACTIONS]], dim=1)
    mask = torch.cat([b[Columns.PROMPT_MASK], b[Columns.RESPONSE_MASK]], dim=1).long()
    logits = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits
    width_p, width_r = b[Columns.OBS].shape[1], b[Columns.ACTIONS].shape[1]
    logits = logits[:, width_p - 1 : width_p + width_r - 1].float() / TEMPERATURE
    logp = torch.log_softmax(logits, -1).gather(-1, b[Columns.ACTIONS].unsqueeze(-1)).squeeze(-1)
    keep = b[Columns.RESPONSE_MASK].bool()
    return logp.masked_fill(~keep, 0), entropy_from_logits(logits.detach()).masked_fill(~keep, 0)


@pytest.mark.parametrize("tokens_per_chunk", [3, None])  # several chunks, each recomputed; one chunk
def test_chunked_logprobs_and_gradients_equal_the_plain_computation(tiny_model_path, monkeypatch, tokens_per_chunk):
    model = rl_module.load_causal_lm(tiny_model_path)
    vocab = model.get_output_embeddings().out_features
    if tokens_per_chunk is not None:
        monkeypatch.setattr(rl_module, "LOGITS_CHUNK_ELEMENTS", tokens_per_chunk * vocab)
    b = batch()

    ours = rl_module.response_logprobs(model, b, TEMPERATURE)
    ours[Columns.LOGP].sum().backward()
    our_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    logp, entropy = plain_logprobs(model, b)
    logp.sum().backward()

    torch.testing.assert_close(ours[Columns.LOGP], logp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours[Columns.ENTROPY], entropy, rtol=1e-5, atol=1e-5)
    assert (ours[Columns.LOGP] < 0).sum() == b[Columns.RESPONSE_MASK].sum()  # every response token, no padding
    # Float32 sums in another order (the tied head's gradient accumulates chunk by chunk): equal to
    # 1e-4 of each parameter's largest gradient entry.
    for name, param in model.named_parameters():
        scale = param.grad.abs().max().item()
        assert scale > 0, name
        torch.testing.assert_close(
            our_grads[name], param.grad, rtol=1e-4, atol=1e-4 * scale, msg=lambda m: f"{name}: {m}"
        )


def test_eager_and_sdpa_attention_give_the_same_logprobs_and_gradients(tiny_model_path):
    """The learner's attention kernel (`DAPOConfig.learner_attn_implementation`) is a speed
    setting: left-padded prompts and right-padded responses give the same log-probs and
    gradients with either."""
    results = {}
    for kernel in ("eager", "sdpa"):
        model = rl_module.load_causal_lm(tiny_model_path, attn_implementation=kernel)
        assert model.config._attn_implementation == kernel
        logp = rl_module.response_logprobs(model, batch(), TEMPERATURE)[Columns.LOGP]
        logp.sum().backward()
        results[kernel] = logp.detach(), {n: p.grad for n, p in model.named_parameters()}
    (eager_logp, eager_grads), (sdpa_logp, sdpa_grads) = results["eager"], results["sdpa"]
    torch.testing.assert_close(eager_logp, sdpa_logp, rtol=1e-5, atol=1e-5)
    for name, grad in eager_grads.items():
        scale = grad.abs().max().item()
        torch.testing.assert_close(grad, sdpa_grads[name], rtol=1e-4, atol=1e-4 * scale, msg=lambda m: f"{name}: {m}")
