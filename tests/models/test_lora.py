"""LoRA (dapo_rllib.models.lora): adapters trained by PEFT in the learner, and only the adapters synced to the
vLLM engines, which sample from exactly the learner's policy after every sync."""

import copy
import dataclasses
import json

import numpy as np
import pytest
import torch
from transformers import Qwen2Config

from dapo_rllib.columns import Metrics
from dapo_rllib.models.lora import LoraSettings, _adapter_layout, adapter_tensors, lora_sync_path
from tests.support.model_shapes import QWEN2_5_0_5B_CONFIG
from tests.support.runs import learner_adapters, on_env_runners, resume_once, tiny_config

# Large enough that one step moves the adapters by far more than float32 noise: an engine left with
# an old adapter would show a log-prob gap of about 1e-2 (the async run's one-step staleness below).
# The adapter path by name: for a model this small on CPU engines "auto" sends merged weights.
LORA = dict(lora_rank=8, lr=2e-3, train_on_partial_batch=True, lora_sync="adapter")


def engine_adapters(algo) -> list[tuple[dict, tuple]]:
    names = list(learner_adapters(algo))
    return on_env_runners(algo, lambda runner: (runner.engine_parameters(names), runner.engine_adapter()))


@pytest.fixture(scope="module")
def lora_run(ray_session, tiny_model_path):
    """Three steps with the engine in the driver (the adapter reaches actors' engines in the async run below)."""
    algo = tiny_config(tiny_model_path, **LORA).env_runners(num_env_runners=0).build_algo()
    initial = learner_adapters(algo)
    results = [algo.train() for _ in range(3)]
    yield dict(algo=algo, initial=initial, results=results)
    algo.stop()


def test_only_the_adapters_train(lora_run):
    learner = lora_run["algo"].learner_group._learner
    module = learner.module["default_policy"]
    (optimizer,) = learner._named_optimizers.values()
    optimized = {id(p) for group in optimizer.param_groups for p in group["params"]}
    adapters = {id(p) for p in adapter_tensors(module.model).values()}
    assert optimized == adapters and 0 < len(adapters)
    trainable = sum(p.numel() for p in module.model.parameters() if p.requires_grad)
    assert trainable < 0.1 * sum(p.numel() for p in module.model.parameters())
    # They moved: B started at zero.
    moved = {
        name: np.abs(value - lora_run["initial"][name]).max()
        for name, value in learner_adapters(lora_run["algo"]).items()
    }
    assert min(moved[name] for name in moved if "lora_B" in name) > 1e-4


def test_the_engine_samples_from_the_learners_policy_after_every_sync(lora_run):
    for result in lora_run["results"]:
        learner = result["learners"]["default_policy"]
        # float32 noise: the engine holds the adapter of the last update, not an older one
        assert learner[Metrics.ROLLOUT_LOGP_ABS_DIFF] < 1e-5, learner[Metrics.ROLLOUT_LOGP_ABS_DIFF]


def test_the_engine_holds_the_newest_adapter_only(lora_run):
    algo = lora_run["algo"]
    learner = learner_adapters(algo)
    ((engine, (name, held)),) = engine_adapters(algo)
    # A version per sync (one per training step), and only that one in the engine.
    assert name == "policy-v3" and held == {3}
    assert sorted(engine) == sorted(learner)
    for key, value in learner.items():
        np.testing.assert_array_equal(engine[key], value, err_msg=key)


def test_async_runs_with_two_env_runners_sync_the_adapter(ray_session, tiny_model_path):
    config = tiny_config(tiny_model_path, **LORA, async_rollout=True, rollout_correction="tis")
    algo = config.env_runners(num_env_runners=2, num_cpus_per_env_runner=0.5).build_algo()
    try:
        first, second = algo.train(), algo.train()
        # One update of staleness, as in full fine-tuning (test_rollout_side): the adapters do reach
        # the engines, one step after the learner.
        stale = second["learners"]["default_policy"][Metrics.ROLLOUT_LOGP_ABS_DIFF]
        assert stale > 10 * first["learners"]["default_policy"][Metrics.ROLLOUT_LOGP_ABS_DIFF]
        learner = learner_adapters(algo)
        for engine, (_, held) in engine_adapters(algo):
            assert len(held) == 1
            for key, value in learner.items():
                np.testing.assert_array_equal(engine[key], value, err_msg=key)
    finally:
        algo.stop()


@pytest.fixture(scope="module")
def untied_model_path(tiny_model_path, tmp_path_factory):
    """The tiny model with an output layer of its own (a copy of the embedding, untied), which an
    adapter can change alone: vLLM serves no adapter there."""
    from transformers import AutoTokenizer

    from dapo_rllib.models.rl_module import load_causal_lm

    model = load_causal_lm(tiny_model_path)
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())
    path = tmp_path_factory.mktemp("untied") / "model"
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(path)
    return str(path)


def test_merged_weights_are_peft_merge(tiny_model_path):
    from dapo_rllib.models.lora import LoraSettings, MergedWeights, apply_lora
    from dapo_rllib.models.rl_module import load_causal_lm

    settings = LoraSettings(rank=4, alpha=8)
    model = apply_lora(load_causal_lm(tiny_model_path), settings)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:  # zero at the start: give the adapters something to merge
                param.normal_()
    merged = MergedWeights(model)
    reference = dict(copy.deepcopy(model).merge_and_unload().named_parameters())
    assert sorted(merged) == sorted(reference)  # the base model's names, the tied head once
    for name, value in reference.items():
        torch.testing.assert_close(merged[name], value, atol=0, rtol=0, msg=name)
    assert not torch.equal(
        merged["model.layers.0.mlp.up_proj.weight"], load_causal_lm(tiny_model_path).model.layers[0].mlp.up_proj.weight
    )


def test_adapters_vllm_cannot_serve_travel_merged(ray_session, untied_model_path):
    from dapo_rllib.models.lora import MergedWeights
    from dapo_rllib.models.rl_module import load_causal_lm

    targets = ["q_proj", "v_proj", "lm_head"]
    settings = LORA | {"lora_sync": "auto", "lora_target_modules": targets}
    config = tiny_config(untied_model_path, **settings).env_runners(num_env_runners=0)
    # lora_sync="auto": vLLM serves no adapter on lm_head, so merged even where engines on GPUs would serve one.
    assert lora_sync_path(config.policy_model_path, config.lora_settings, True, "float32") == "merged"
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(3)]
        for result in results:
            assert result["learners"]["default_policy"][Metrics.ROLLOUT_LOGP_ABS_DIFF] < 1e-5
        merged = MergedWeights(algo.learner_group._learner.module["default_policy"].model)
        ((held, adapter),) = on_env_runners(
            algo, lambda runner: (runner.engine_parameters(["lm_head.weight"]), runner.engine_adapter())
        )
        assert adapter == (None, set())  # an engine without LoRA, holding the merged weights
        head = merged["lm_head.weight"].numpy()  # vLLM pads the vocabulary rows
        np.testing.assert_array_equal(held["lm_head.weight"][: len(head)], head)
        base = load_causal_lm(untied_model_path).lm_head.weight.detach().numpy()
        assert np.abs(head - base).max() > 1e-4  # the head's adapter trained, and its update is in the engine
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("shape", "dtype", "on_gpu", "path"),
    [
        ("tiny", "float32", False, "merged"),  # a few MB on CPU engines: vLLM's CPU LoRA kernels cost more
        ("tiny", "float32", True, "adapter"),  # GPU engines serve the adapter at every size
        ("0.5b", "bfloat16", False, "merged"),  # 494M x 2 bytes = 0.99 GB <= 1.5 GB
        ("0.5b", "float32", False, "adapter"),  # 494M x 4 bytes = 1.98 GB > 1.5 GB
    ],
)
def test_auto_sync_sends_merged_weights_of_small_models_to_cpu_engines(
    tiny_model_path, tmp_path, shape, dtype, on_gpu, path
):
    model_path = str(tiny_model_path)
    if shape == "0.5b":  # Qwen2.5-0.5B's config alone: the rule reads the parameter count from a weightless model
        Qwen2Config(**QWEN2_5_0_5B_CONFIG).save_pretrained(tmp_path)
        model_path = str(tmp_path)
    assert lora_sync_path(model_path, LoraSettings(rank=8), on_gpu, dtype) == path


def test_the_sync_rule_counts_a_tied_embedding_once(tmp_path):
    Qwen2Config(**QWEN2_5_0_5B_CONFIG).save_pretrained(tmp_path)
    settings = json.dumps(dataclasses.asdict(LoraSettings(rank=8)), sort_keys=True)
    # Qwen2.5-0.5B's 494,032,768 parameters: a weightless copy holds the tied 151,936 x 896 embedding twice.
    assert _adapter_layout(str(tmp_path), settings)[2] == 494_032_768


@pytest.mark.parametrize(
    ("model", "settings", "error"),
    [
        (
            "untied",
            dict(lora_sync="adapter", lora_target_modules=["q_proj", "lm_head"]),
            r"lora_sync='adapter' with lora_target_modules=\['q_proj', 'lm_head'\]: vLLM serves adapters on the decoder's linear layers only, not on \['lm_head'\]; set lora_sync='merged'",
        ),
        (
            "tied",
            dict(lora_target_modules=["q_proj", "embed_tokens"]),
            r"puts adapters on \['model.embed_tokens'\].*ties its input and output embeddings.*leave \['embed_tokens'\] out of lora_target_modules",
        ),
        ("tied", dict(lora_sync="merged", lora_target_modules=["lm_head"]), r"ties its input and output embeddings"),
    ],
)
def test_adapters_no_sync_path_can_carry(request, tiny_model_path, model, settings, error):
    path = request.getfixturevalue("untied_model_path") if model == "untied" else tiny_model_path
    config = tiny_config(path, lora_rank=8, **settings)
    config.validate()
    with pytest.raises(ValueError, match=error):
        config.lora_sync_path


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        (dict(lora_rank=0), r"lora_rank=0 must be a whole number in 1\.\.512"),
        (dict(lora_rank=1024), r"lora_rank=1024 must be a whole number in 1\.\.512"),
        (dict(lora_rank=8, lora_alpha=-1), r"lora_alpha=-1 must be a positive number"),
        (dict(lora_rank=8, lora_dropout=1.0), r"lora_dropout=1\.0 must be in \[0, 1\)"),
        (
            dict(lora_rank=8, lora_target_modules=[]),
            r"lora_target_modules=\[\] must be 'all-linear' or a non-empty list",
        ),
        (dict(lora_rank=8, lora_sync="full"), r"lora_sync='full'; expected one of \('auto', 'adapter', 'merged'\)"),
    ],
)
def test_bad_lora_settings(tiny_model_path, settings, error):
    with pytest.raises(ValueError, match=error):
        tiny_config(tiny_model_path, **settings).validate()


def test_target_modules_that_match_nothing_name_the_models_linear_layers(tiny_model_path):
    from dapo_rllib.models.lora import LoraSettings, apply_lora
    from dapo_rllib.models.rl_module import load_causal_lm

    model = load_causal_lm(tiny_model_path)
    settings = LoraSettings(rank=8, target_modules=["qkv"])
    with pytest.raises(
        ValueError,
        match=r"lora_target_modules=\['qkv'\] match no layer of the model; its linear layers are \['down_proj', 'gate_proj', 'k_proj', 'lm_head', 'o_proj', 'q_proj', 'up_proj', 'v_proj'\]",
    ):
        apply_lora(model, settings)


# Any few token ids of the tiny vocabulary.
IDS = [[5, 17, 42, 8, 99, 3]]


@pytest.fixture(scope="module")
def lora_checkpoint(lora_run, tmp_path_factory):
    """A checkpoint of the run, and the policy's logits on IDS when it was taken."""
    import torch

    path = tmp_path_factory.mktemp("lora") / "checkpoint"
    lora_run["algo"].save_to_path(str(path))
    with torch.no_grad():
        logits = (
            lora_run["algo"].learner_group._learner.module["default_policy"].model(input_ids=torch.tensor(IDS)).logits
        )
    return path, logits


def test_a_lora_run_resumes_exactly(lora_run, lora_checkpoint):

    resumed, resumed_adapters = resume_once(lora_checkpoint[0], read=learner_adapters)
    continued = lora_run["algo"].train()
    r, c = resumed["learners"]["default_policy"], continued["learners"]["default_policy"]
    for key in ("policy_loss", "grad_norm", Metrics.ROLLOUT_LOGP_ABS_DIFF):
        assert r[key] == pytest.approx(c[key], rel=1e-5, abs=1e-7), key
    for name, value in learner_adapters(lora_run["algo"]).items():
        np.testing.assert_allclose(resumed_adapters[name], value, rtol=1e-5, atol=1e-7, err_msg=name)


def test_export_merges_the_adapters_into_a_plain_model(lora_checkpoint, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from dapo_rllib.algorithm.export import export_hf_model_from_checkpoint

    path, logits = lora_checkpoint
    merged = AutoModelForCausalLM.from_pretrained(export_hf_model_from_checkpoint(path, tmp_path / "merged"))
    assert not any("lora" in name for name, _ in merged.named_parameters())
    with torch.no_grad():
        torch.testing.assert_close(merged(torch.tensor(IDS)).logits, logits, atol=1e-5, rtol=1e-5)


def test_a_checkpoint_holds_the_adapters_not_a_copy_of_the_base(lora_checkpoint, tiny_model_path):
    from ray.rllib.core.rl_module.rl_module import RLModule, RLModuleSpec

    from dapo_rllib.algorithm.checkpoints import policy_module_path
    from dapo_rllib.models.rl_module import CausalLMRLModule, is_adapter_key

    saved = RLModule.from_checkpoint(policy_module_path(lora_checkpoint[0]))
    state = saved.get_state()
    assert state and all(is_adapter_key(key) for key in state)
    # The other kind of policy refuses it, and the reverse, instead of loading nothing without a word.
    space = saved.observation_space
    full = RLModuleSpec(
        module_class=CausalLMRLModule,
        observation_space=space,
        action_space=saved.action_space,
        model_config=dict(saved.model_config, lora=None),
    ).build()
    with pytest.raises(
        ValueError, match=r"holds LoRA adapters, but this policy trains every weight \(lora_rank=None\)"
    ):
        full.set_state(state)
    with pytest.raises(
        ValueError,
        match=r"holds every weight of a full fine-tuning run, but this policy trains LoRA adapters \(lora_rank=8\)",
    ):
        saved.set_state(full.get_state())


def test_export_writes_a_peft_adapter_that_evaluate_takes(lora_checkpoint, tmp_path):
    import torch
    from peft import PeftModel

    from dapo_rllib.algorithm.export import export_hf_model_from_checkpoint
    from dapo_rllib.cli.evaluate import evaluate
    from dapo_rllib.models.rl_module import load_causal_lm
    from dapo_rllib.tasks.data import generate_arithmetic_problems, problem_to_row, write_jsonl

    path, logits = lora_checkpoint
    adapter = export_hf_model_from_checkpoint(path, tmp_path / "adapter", merge=False)
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in adapter.iterdir()}
    config = json.loads((adapter / "adapter_config.json").read_text())
    policy = PeftModel.from_pretrained(load_causal_lm(config["base_model_name_or_path"]), str(adapter))
    with torch.no_grad():
        torch.testing.assert_close(policy(input_ids=torch.tensor(IDS)).logits, logits, atol=1e-5, rtol=1e-5)
    data = tmp_path / "arithmetic-2.jsonl"
    write_jsonl(map(problem_to_row, generate_arithmetic_problems("test", 2)), data)
    report = evaluate(adapter, data=str(data), num_samples=2, max_response_length=16, out=tmp_path / "eval.json")
    assert report["settings"]["model"] == str(adapter) and report["metrics"]["arithmetic"]["num_samples"] == 4
