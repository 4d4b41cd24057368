"""The learner and the vLLM engine against each other on sampled text: the log-prob each gives every sampled
token, before and after one weight sync.

Before: both load the model from its directory, so any gap is the two implementations' (kernels, precision,
the template's ids). After: the learner's weights are moved (seeded noise, `PERTURBATION` of each weight's
spread) and streamed into the engine as a run's sync streams them; an engine that kept any old weight (a stale
cache, a tied head left behind) gives the old model's log-probs, as far from the learner's as the move itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dapo_rllib.columns import Columns
from dapo_rllib.doctor.report import FAIL, PASS, Check
from dapo_rllib.models.rl_module import padded_sequences
from dapo_rllib.rollout.vllm_engine import EngineWeights
from dapo_rllib.rollout.weight_sync import bucket_tensors, plan_buckets
from dapo_rllib.tasks.data.prompts import render_prompt_ids

#: Prompts the parity is measured on: the sampled text matters more than the prompts.
PROBE_PROMPTS = (
    "What is 17 + 25?",
    "Write one sentence about the sea.",
    "List three prime numbers.",
    "Explain in one line what a function is in Python.",
)
#: |Δ log-prob| bounds per sampled token, (mean, max), by the dtype the learner computes and vLLM serves in.
#: float32 agrees to float noise (~1e-6 on the tiny and the real model here), bfloat16 to its 8 bits.
PARITY_BOUNDS = {"float32": (1e-4, 1e-2), "bfloat16": (5e-2, 1.0), "float16": (1e-2, 0.5)}
#: How far the sync check moves each weight: this fraction of the weight's standard deviation.
PERTURBATION = 0.05
#: Sequences per learner forward pass.
FORWARD_BATCH = 8


def sample_sequences(llm, tokenizer, *, samples: int, max_tokens: int, seed: int, temperature: float) -> list[tuple]:
    """`samples` completions of each probe prompt at the run's sampling `temperature` (the one the learner's
    log-probs are of), as `(prompt ids, response ids, model mask,
    vLLM's log-probs)`, the sequences the learner trains on."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    prompts = [render_prompt_ids(tokenizer, [{"role": "user", "content": text}]) for text in PROBE_PROMPTS]
    params = SamplingParams(
        n=samples,
        temperature=temperature,
        max_tokens=max_tokens,
        logprobs=0,
        flat_logprobs=True,
        seed=seed,
        detokenize=False,
    )
    outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts], params, use_tqdm=False)
    sequences = []
    for prompt, output in zip(prompts, outputs):
        for completion in output.outputs:
            response = np.asarray(completion.token_ids, dtype=np.int64)
            if len(response):
                logp = np.asarray(completion.logprobs.logprobs, dtype=np.float32)
                sequences.append((np.asarray(prompt, dtype=np.int64), response, np.ones(len(response)), logp))
    return sequences


@torch.no_grad()
def learner_logprobs(module, sequences: list[tuple], pad_token_id: int) -> list[np.ndarray]:
    """The learner module's log-prob of each sampled token of `sequences`, through its own forward pass
    (padded batches, as it trains)."""
    out = []
    for start in range(0, len(sequences), FORWARD_BATCH):
        chunk = sequences[start : start + FORWARD_BATCH]
        batch = {k: torch.from_numpy(v) for k, v in padded_sequences(chunk, pad_token_id).items()}
        logp = module.forward_train(batch)[Columns.LOGP].float().numpy()
        out += [logp[i, : len(response)] for i, (_, response, _, _) in enumerate(chunk)]
    return out


def logprob_gap(module, sequences: list[tuple], pad_token_id: int) -> np.ndarray:
    """|learner's log-prob - vLLM's| of every sampled token."""
    learner = learner_logprobs(module, sequences, pad_token_id)
    return np.concatenate([np.abs(mine - seq[3]) for mine, seq in zip(learner, sequences)])


def parity_check(name: str, gap: np.ndarray, dtype: str, what: str) -> Check:
    """PASS when the mean and the max of `gap` are within `PARITY_BOUNDS[dtype]`."""
    mean_bound, max_bound = PARITY_BOUNDS[dtype]
    values = {
        "tokens": int(gap.size),
        "mean": float(gap.mean()),
        "max": float(gap.max()),
        "bounds": [mean_bound, max_bound],
    }
    detail = f"{what}: mean |Δ| {gap.mean():.2e}, max {gap.max():.2e} over {gap.size} tokens ({dtype} bounds {mean_bound:g}, {max_bound:g})"
    ok = gap.mean() <= mean_bound and gap.max() <= max_bound
    return Check(name, PASS if ok else FAIL, detail, values)


def perturb_weights(model: torch.nn.Module, seed: int) -> None:
    """Move every weight by seeded noise of `PERTURBATION` times its standard deviation, plus 1e-3 so that a
    weight of all equal values (a norm's ones) moves too (in place)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            spread = param.float().std() if param.numel() > 1 else param.float().abs()
            noise = torch.randn(param.shape, generator=generator) * (PERTURBATION * spread + 1e-3)
            param.add_(noise.to(param.dtype))


def sync_weights(model: torch.nn.Module, engine: EngineWeights, bucket_bytes: int) -> int:
    """Stream `model`'s parameters into the engine as a full fine-tuning run's sync does (tied parameters
    once, in buckets); returns the number of buckets."""
    weights = dict(model.named_parameters())
    plan = plan_buckets(((n, tuple(p.shape), p.element_size()) for n, p in weights.items()), bucket_bytes)
    engine.begin()
    for bucket in plan:
        engine.load_bucket(bucket_tensors(bucket, weights))
    engine.finish()
    return len(plan)


def engine_checks(module, llm, tokenizer, settings: dict[str, Any]) -> list[Check]:
    """Log-prob parity of the loaded model, then the weight sync: the engine's log-probs after one sync of
    moved weights must match the learner's as closely as before, and be far from the old model's."""
    dtype, seed = settings["dtype"], settings["seed"]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    sample = dict(samples=settings["samples"], max_tokens=settings["max_tokens"], temperature=settings["temperature"])
    sequences = sample_sequences(llm, tokenizer, seed=seed, **sample)
    before = parity_check("log-prob parity", logprob_gap(module, sequences, pad), dtype, "learner vs vLLM, as loaded")

    model = module.model
    perturb_weights(model, seed)
    moved = logprob_gap(module, sequences, pad)  # the moved learner against the engine still on the old weights
    engine = EngineWeights(llm, owner="the doctor's engine")
    try:
        buckets = sync_weights(model, engine, settings["bucket_bytes"])
    except RuntimeError as error:
        return [before, Check("weights after one sync", FAIL, str(error))]
    after_sequences = sample_sequences(llm, tokenizer, seed=seed + 1, **sample)
    after = parity_check(
        "weights after one sync",
        logprob_gap(module, after_sequences, pad),
        dtype,
        f"moved weights synced in {buckets} bucket(s), the old model {moved.mean():.2e} away",
    )
    after.values["moved_mean"] = float(moved.mean())
    return [before, after]
