"""DAPOConfig: reference defaults, validation messages, and the tuned examples' configs."""

import json

import pytest

import dapo_rllib  # noqa: F401
from dapo_rllib.algorithm.dapo import DAPO, DAPOConfig
from dapo_rllib.cli.train import load_config_file, search_space_keys
from tests.support.model_shapes import QWEN2_5_0_5B_CONFIG
from tests.support.paths import ROOT


@pytest.fixture
def model_dir(tmp_path):
    """A directory that looks like a Hugging Face model to validate() (config.json only)."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    return str(tmp_path)


def test_defaults_are_the_reference_recipe():
    c = DAPOConfig()
    assert (c.clip_eps_low, c.clip_eps_high, c.clip_ratio_c) == (0.2, 0.28, 10.0)
    assert (c.group_size, c.train_batch_size_prompts, c.gen_batch_size_prompts, c.max_num_gen_batches) == (
        16,
        512,
        1536,
        10,
    )
    assert (c.max_prompt_length, c.max_response_length, c.overlong_penalty_factor) == (2048, 20480, 1.0)
    # The paper's L_cache, 4096 of its 20,480-token responses: the default buffer follows the response limit.
    assert c.overlong_buffer_len is None and c.overlong_settings.buffer_tokens(c.max_response_length) == 4096
    assert (c.loss_agg_mode, c.kl_coef, c.lr, c.weight_decay, c.grad_clip, c.minibatch_size_prompts) == (
        "token-mean",
        0.0,
        1e-6,
        0.1,
        1.0,
        32,
    )
    assert (c.dynamic_sampling, c.filter_metric, c.overlong_filtering) == (True, "acc", False)
    assert (c.temperature, c.top_p, c.eval_temperature, c.eval_top_p) == (1.0, 1.0, 1.0, 0.7)
    assert c.algo_class is DAPO


def test_training_sets_dapo_and_rllib_settings(model_dir):
    c = DAPOConfig().training(model_path=model_dir, clip_eps_high=0.35, lr=3e-4)
    assert (c.clip_eps_high, c.lr, c.clip_eps_low) == (0.35, 3e-4, 0.2)


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"loss_agg_mode": "token-sum"}, "loss_agg_mode='token-sum'"),
        ({"clip_ratio_c": 1.0}, "clip_ratio_c=1.0"),
        ({"group_size": 1}, "group_size=1"),
        ({"train_batch_size_prompts": 10, "minibatch_size_prompts": 4}, "minibatch_size_prompts=4"),
        ({"filter_metric": "mean"}, "filter_metric='mean'"),
        ({"overlong_buffer_len": 50000}, "overlong_buffer_len=50000"),
        ({"top_p": 0.0}, "top_p=0.0"),
        ({"kl_penalty": "k9"}, "kl_penalty='k9'"),
        ({"policy_loss": "ppo"}, "policy_loss='ppo': unknown policy_loss 'ppo'; valid policy losses: ppo_clip"),
        ({"adv_estimator": "no_such_module:f"}, "adv_estimator='no_such_module:f': No module named 'no_such_module'"),
        ({"max_num_gen_batches": 0}, "max_num_gen_batches=0"),
        ({"adv_estimator": "rae", "rae_decay": 1.0}, "rae_decay=1.0 must be in "),
        (
            {"attn_implementation": "flash"},
            "attn_implementation='flash'; expected None [(]the device's default[)] or one of",
        ),
        ({"max_turns": 0}, "max_turns=0 must be a positive integer"),
        ({"max_tool_response_tokens": 0}, "max_tool_response_tokens=0 must be a positive integer"),
        ({"tool_call_format": "json"}, "tool_call_format='json': tool_call_format must be one of [[]'hermes'[]]"),
        (
            {"max_tokens_per_micro_batch": 1000},
            "max_tokens_per_micro_batch=1000 must hold the longest possible sequence: at least max_prompt_length [+] max_response_length = 22528",
        ),
    ],
)
def test_validate_names_the_bad_setting(model_dir, setting, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DAPOConfig().training(model_path=model_dir, **setting).validate()


def test_the_overlong_buffer_follows_the_response_limit_unless_set(model_dir):
    """A short response limit is not refused over a buffer the user never set (4096 > 192)."""
    short = DAPOConfig().training(model_path=model_dir, max_response_length=192)
    short.validate()
    assert short.overlong_settings.buffer_tokens(short.max_response_length) == 38  # round(0.2 * 192)
    # Set, it is kept as it is, and checked against the limit.
    assert DAPOConfig().training(overlong_buffer_len=100).overlong_settings.buffer_tokens(192) == 100
    assert DAPOConfig().training(overlong_buffer_len=0).overlong_settings.buffer_tokens(192) == 0
    with pytest.raises(ValueError, match=r"overlong_buffer_len=4096 must be in \[0, max_response_length=192\]"):
        DAPOConfig().training(model_path=model_dir, max_response_length=192, overlong_buffer_len=4096).validate()


def test_more_learners_than_groups_per_optimizer_step_is_a_clear_error(model_dir):
    config = (
        DAPOConfig()
        .training(model_path=model_dir, train_batch_size_prompts=8, minibatch_size_prompts=2)
        .learners(num_learners=4)
    )
    with pytest.raises(
        ValueError, match="num_learners=4: every learner takes whole groups, so minibatch_size_prompts=2"
    ):
        config.validate()
    config.training(minibatch_size_prompts=4).validate()


ZERO3 = {"zero_optimization": {"stage": 3}}


@pytest.mark.parametrize(
    "deepspeed_config, message",
    [
        (ZERO3 | {"gradient_clipping": 1.0}, "'gradient_clipping' is DAPO's to set, not DeepSpeed's: use grad_clip"),
        (
            ZERO3 | {"optimizer": {"type": "Adam"}},
            "'optimizer' is DAPO's to set, not DeepSpeed's: use lr and weight_decay",
        ),
        (
            ZERO3 | {"train_micro_batch_size_per_gpu": 4},
            "'train_micro_batch_size_per_gpu' is DAPO's to set, not DeepSpeed's: use max_tokens_per_micro_batch",
        ),
        (ZERO3 | {"bf16": {"enabled": True}}, "bf16.enabled=True contradicts model_dtype='float32'"),
        ({"zero_optimization": {"stage": 1}}, "zero_optimization.stage=1; expected 2 or 3"),
        (
            {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}},
            "offload_optimizer needs zero_optimization.stage=3",
        ),
        ("/no/such/ds_config.json", "No such file or directory"),
        (["stage", 3], "expected a dict or the path of a JSON file, got list"),
    ],
)
def test_a_deepspeed_config_that_conflicts_with_dapo_is_a_clear_error(model_dir, deepspeed_config, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DAPOConfig().training(model_path=model_dir, deepspeed_config=deepspeed_config).validate()


def test_a_deepspeed_config_file_is_read(model_dir, tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}))
    DAPOConfig().training(model_path=model_dir, deepspeed_config=str(path)).validate()
    with pytest.raises(
        ValueError, match="grad_clip_by='value': under DeepSpeed gradients are clipped by their global norm only"
    ):
        DAPOConfig().training(model_path=model_dir, deepspeed_config=str(path), grad_clip_by="value").validate()


def test_micro_batch_budget_default_depends_on_the_learners_device(model_dir):
    short = dict(max_prompt_length=64, max_response_length=32)
    # CPU learners: 2,048 tokens, or one longest sequence (2048 + 20480 at the reference lengths).
    assert DAPOConfig().micro_batch_token_budget == 2048 + 20480
    assert DAPOConfig().training(**short).micro_batch_token_budget == 2048
    # GPU learners: 16,384 tokens, or two longest sequences.
    on_gpus = DAPOConfig().learners(num_gpus_per_learner=1)
    assert on_gpus.micro_batch_token_budget == 2 * (2048 + 20480)
    assert on_gpus.copy().training(**short).micro_batch_token_budget == 16384
    # A budget set is the budget, on either device.
    assert DAPOConfig().training(max_tokens_per_micro_batch=30000).micro_batch_token_budget == 30000
    assert on_gpus.copy().training(max_tokens_per_micro_batch=3000).micro_batch_token_budget == 3000


def test_attention_kernel_default_depends_on_the_learners_device_dtype_and_sequence_length():
    # CPU learners in bfloat16: eager attention up to 640 tokens (64 + 576), SDPA beyond (2048 + 20480).
    bf16 = dict(model_dtype="bfloat16", max_prompt_length=64)
    assert DAPOConfig().training(**bf16, max_response_length=576).learner_attn_implementation == "eager"
    assert DAPOConfig().training(**bf16, max_response_length=577).learner_attn_implementation == "sdpa"
    assert DAPOConfig().training(model_dtype="bfloat16").learner_attn_implementation == "sdpa"
    # Float32 and GPU learners: SDPA at any length; a kernel set is the kernel.
    assert DAPOConfig().training(max_prompt_length=64, max_response_length=64).learner_attn_implementation == "sdpa"
    on_gpus = DAPOConfig().learners(num_gpus_per_learner=1).training(**bf16, max_response_length=64)
    assert on_gpus.learner_attn_implementation == "sdpa"
    assert DAPOConfig().training(attn_implementation="eager").learner_attn_implementation == "eager"
    module_config = DAPOConfig().training(**bf16, max_response_length=64).get_default_rl_module_spec().model_config
    assert module_config["attn_implementation"] == "eager"


def test_old_log_probs_are_recomputed_only_when_a_batch_gets_several_optimizer_steps():
    assert DAPOConfig().recomputes_old_logp  # 512 prompts in mini-batches of 32
    assert not DAPOConfig().training(minibatch_size_prompts=512).recomputes_old_logp
    assert DAPOConfig().training(minibatch_size_prompts=512, num_epochs=2).recomputes_old_logp


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="is not a Hugging Face model directory"):
        DAPOConfig().training(model_path=str(tmp_path / "nope")).validate()


def load_example(name):
    config_file = load_config_file(ROOT / "tuned_examples" / "dapo" / name)
    return config_file.config, config_file.stop


def test_reference_32b_example_builds_and_validates(model_dir, monkeypatch):
    monkeypatch.setenv("DAPO_MODEL_PATH", model_dir)
    config, stop = load_example("qwen2_5_32b_dapo_math.py")
    config.validate()
    assert stop == {"training_iteration": 300}
    assert (config.group_size, config.train_batch_size_prompts, config.max_response_length, config.model_dtype) == (
        16,
        512,
        20480,
        "bfloat16",
    )
    assert config.num_gpus_per_env_runner == 1
    assert (config.num_learners, config.gradient_checkpointing, config.max_tokens_per_micro_batch) == (16, True, 22528)
    assert config.deepspeed_config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"


def test_7b_example_is_the_32b_recipe_on_one_node_with_zero3(model_dir, monkeypatch):
    monkeypatch.setenv("DAPO_MODEL_PATH", model_dir)
    reference, _ = load_example("qwen2_5_32b_dapo_math.py")
    config, stop = load_example("qwen2_5_7b_dapo_math.py")
    reference.validate()
    config.validate()
    changed = sorted(k for k, v in reference.to_dict().items() if config.to_dict()[k] != v)
    assert changed == [
        "deepspeed_config",
        "gen_batch_size_prompts",
        "num_env_runners",
        "num_learners",
        "train_batch_size_prompts",
    ]
    assert config.deepspeed_config["zero_optimization"]["stage"] == 3 and config.gradient_checkpointing
    assert config.minibatch_size_prompts % config.num_learners == 0 and stop == {"training_iteration": 300}


def test_0_5b_lora_example_trains_adapters_synced_as_adapters(tmp_path, monkeypatch):
    from transformers import Qwen2Config

    # Qwen2.5-0.5B-Instruct's config (the weights are not needed to resolve the sync path).
    Qwen2Config(**QWEN2_5_0_5B_CONFIG).save_pretrained(tmp_path)
    monkeypatch.setenv("DAPO_MODEL_PATH", str(tmp_path))
    monkeypatch.setenv("DAPO_EVAL_DATA", "../shared/data/aime-2024.parquet")  # any file of problems
    config, stop = load_example("qwen2_5_0_5b_instruct_lora_math.py")
    config.validate()
    assert (config.lora_rank, config.lora_alpha, config.lr, config.model_dtype) == (32, 64, 1e-5, "bfloat16")
    assert config.lora_sync_path == "adapter" and stop == {"training_iteration": 100}


def test_tiny_example_config_validates(tiny_model_path):
    config, stop = load_example("tiny_arithmetic_dapo.py")
    config.validate()
    # validate() changes nothing: None stays None and means the built-in tiny model.
    assert config.model_path is None and config.policy_model_path == tiny_model_path
    assert stop == {"training_iteration": 40}


def test_sweep_example_grid_searches_clip_high_and_group_size(tiny_model_path):
    config, stop = load_example("tiny_arithmetic_sweep.py")
    assert sorted(search_space_keys(config)) == ["clip_eps_high", "group_size"]
    assert config.clip_eps_high == {"grid_search": [0.2, 0.28, 0.35]}
    assert config.group_size == {"grid_search": [4, 8]}
    # One trial at a time on 2 CPUs: the driver + learner and one env runner, 1 CPU each.
    assert (config.num_cpus_for_main_process, config.num_env_runners, config.num_cpus_per_env_runner) == (1, 1, 1)
    assert stop == {"training_iteration": 12}


def test_code_example_is_the_math_example_with_the_environment_and_model_switched(
    tiny_model_path, tiny_code_model_path
):
    math_config, math_stop = load_example("tiny_arithmetic_dapo.py")
    code_config, code_stop = load_example("tiny_code_dapo.py")
    math_settings, code_settings = math_config.to_dict(), code_config.to_dict()
    changed = sorted(k for k in math_settings if math_settings[k] != code_settings[k])
    assert changed == ["env", "env_config", "eval_dataset", "max_response_length", "model_path"]
    assert (code_config.env, code_config.policy_model_path, code_stop) == ("dapo_code", tiny_code_model_path, math_stop)
    code_config.validate()


def test_the_lora_example_is_the_main_job_with_adapters():
    main, main_stop = load_example("tiny_arithmetic_dapo.py")
    lora, stop = load_example("tiny_arithmetic_lora_dapo.py")
    assert stop == main_stop and (lora.lora_rank, lora.lr) == (8, 1e-3) and main.lora_rank is None
    changed = {key for key, value in lora.to_dict().items() if value != main.to_dict()[key]}
    assert changed == {"lora_rank", "lr"}


def test_the_real_model_examples_validate_and_the_study_is_three_arms_by_three_seeds():
    from dapo_rllib.experiments.real_model import STUDY_KEY, all_arms

    config, stop = load_example("smollm2_reasoning_gym_dapo.py")
    config.validate()
    assert (config.model_path, stop) == ("smollm2-135m-instruct", {"training_iteration": 6})
    study, _ = load_example("smollm2_reasoning_gym_study.py")
    assert getattr(study, STUDY_KEY) == {"grid_search": ["DAPO", "DAPO + LoRA", "GRPO"]}
    assert study.seed == {"grid_search": [0, 1, 2]}
    # The arms differ only where their algorithm or LoRA does: GRPO's clip, aggregation, KL and no dynamic
    # sampling; LoRA's rank, rate and sync path.
    dapo, lora, grpo = all_arms().values()
    assert {k for k in dapo if dapo[k] != lora[k]} == {"lora_rank", "lr", "lora_sync"}
    assert {k for k in dapo if dapo[k] != grpo[k]} == {
        "clip_eps_high",
        "clip_ratio_c",
        "loss_agg_mode",
        "kl_coef",
        "dynamic_sampling",
    }
