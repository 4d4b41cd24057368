"""`rllib doctor`: the learner's module and a vLLM engine agree on the real model, before and after a weight
sync; a planted stale engine and a template that is not prefix-preserving are caught."""

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from transformers import AutoConfig, AutoTokenizer, GenerationConfig

from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.doctor.data_checks import DataProbe, RunSampling, data_checks
from dapo_rllib.doctor.report import FAIL, NOTE, PASS
from dapo_rllib.doctor.run import DoctorSettings, run_doctor
from dapo_rllib.doctor.template_checks import context_check, end_of_turn_check, prefix_check
from dapo_rllib.rollout import vllm_engine
from dapo_rllib.tasks.data import generate_arithmetic_problems, problem_to_row
from tests.support.rllib_command import RLLIB

SHORT = DoctorSettings(samples=2, max_tokens=48)


def doctor_config(model):
    """A run of `model` with sequences of 256 + 256 tokens, as the doctor checks it."""
    return DAPOConfig().training(model_path=str(model), max_prompt_length=256, max_response_length=256)


# A template that marks the last assistant turn: the conversation's ids change once another message follows.
LAST_TURN_MARKED = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "{% if loop.last and m['role'] == 'assistant' %} (latest){% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def by_name(checks):
    return {check.name: check for check in checks}


@pytest.fixture(scope="module")
def real_model_checks(smollm2_path):
    return by_name(run_doctor(doctor_config("smollm2-135m-instruct"), SHORT))


def test_the_real_model_passes_every_check(real_model_checks):
    statuses = {name: check.status for name, check in real_model_checks.items()}
    assert statuses == {
        "log-prob parity": PASS,
        "weights after one sync": PASS,
        "prefix-preserving template": PASS,
        "tools in the template": NOTE,  # SmolLM2's ChatML template has no tools section
        "end of turn": PASS,
        "template round trip": PASS,
        "context length": PASS,
    }
    parity, synced = real_model_checks["log-prob parity"], real_model_checks["weights after one sync"]
    assert parity.values["mean"] < 1e-4 and parity.values["tokens"] > 50
    # The check has the power to see a stale engine: the old weights are far further off than float noise.
    assert synced.values["moved_mean"] > 100 * synced.values["mean"]
    assert real_model_checks["end of turn"].values == {
        "tokenizer_eos": 2,  # <|im_end|>
        "generation_config_eos": [2],
        "template_ends_turns_with_eos": True,
    }
    assert real_model_checks["context length"].values["max_position_embeddings"] == 8192


def test_an_engine_that_keeps_its_tied_head_stale_fails_the_sync_check(tiny_model_path, monkeypatch):
    # The fault this project once had: vLLM's CPU reload repacks the embedding but not the output head tied
    # to it, so the engine goes on computing logits with the old head.
    monkeypatch.setattr(vllm_engine, "_retie_layers", lambda model: None)
    checks = by_name(run_doctor(doctor_config(tiny_model_path), SHORT))
    assert checks["log-prob parity"].status == PASS
    stale = checks["weights after one sync"]
    assert stale.status == FAIL
    assert stale.values["mean"] > 1e-3


@pytest.fixture(scope="module")
def marked_template_model(tiny_model_path, tmp_path_factory):
    """The tiny model with a template that is not prefix-preserving."""
    model = Path(shutil.copytree(tiny_model_path, tmp_path_factory.mktemp("doctor") / "marked-template"))
    (model / "chat_template.jinja").write_text(LAST_TURN_MARKED)
    return model


def test_a_template_that_rewrites_earlier_turns_fails_the_command(marked_template_model, tmp_path):
    model = marked_template_model
    out = subprocess.run(
        [
            *RLLIB,
            "doctor",
            str(model),
            "--max-prompt-length",
            "256",
            "--max-response-length",
            "256",
            "--out",
            str(tmp_path / "doctor.json"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    rows = {line.split()[0] + " " + line.split()[1]: line for line in out.stdout.splitlines() if line.startswith("  ")}
    assert (
        "FAIL" in rows["prefix-preserving template"]
        and "multi-turn episodes are refused" in rows["prefix-preserving template"]
    )
    assert "1 of 7 checks failed: prefix-preserving template" in out.stdout
    assert (tmp_path / "doctor.json").is_file()


def test_a_run_that_asks_for_the_doctor_does_not_start_past_a_failed_check(marked_template_model, ray_session):
    config = DAPOConfig().training(
        model_path=str(marked_template_model),
        doctor_at_start=True,
        max_prompt_length=256,
        max_response_length=256,
        overlong_buffer_len=0,
    )
    with pytest.raises(
        ValueError, match=r"doctor_at_start: 1 check\(s\) of .*marked-template failed: prefix-preserving"
    ):
        config.build_algo()


def test_eos_disagreement_and_a_short_context_fail(tiny_model_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    other_eos = GenerationConfig(eos_token_id=[tokenizer.eos_token_id + 1])
    eos = end_of_turn_check(tokenizer, other_eos)
    assert eos.status == FAIL and f"not at the tokenizer's EOS {tokenizer.eos_token_id}" in eos.detail
    positions = AutoConfig.from_pretrained(tiny_model_path).max_position_embeddings
    short = context_check(AutoConfig.from_pretrained(tiny_model_path), positions + 1)
    assert short.status == FAIL and f"> the model's {positions} positions" in short.detail
    assert prefix_check(tokenizer).status == PASS


@pytest.fixture(scope="module")
def arithmetic_parquet(tmp_path_factory):
    """Six held-out arithmetic problems as a DAPO-format parquet file, as `rllib data convert` writes them."""
    path = tmp_path_factory.mktemp("doctor_data") / "test.parquet"
    pd.DataFrame(map(problem_to_row, generate_arithmetic_problems("test", 6))).to_parquet(path)
    return path


def test_the_data_check_measures_what_dynamic_sampling_needs(tiny_model_path, arithmetic_parquet):
    """The tiny model on its own task: the scorer reads its answers, some groups vary; a scorer that reads none
    fails both rows, naming the fix."""
    config = DAPOConfig().training(
        model_path=tiny_model_path, group_size=4, max_prompt_length=128, max_response_length=32
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    llm = vllm_engine.build_vllm_engine(vllm_engine.EngineSettings.from_config(config), seed=0)
    probe = DataProbe(str(arithmetic_parquet), problems=6)
    checks = by_name(data_checks(llm, tokenizer, RunSampling.from_config(config), probe))
    parsed, reward, varying = checks["answers parsed"], checks["reward mean"], checks["groups with variation"]
    assert parsed.status == PASS and parsed.values["share"] >= 0.5 and parsed.values["samples"] == 6 * 4
    # math_dapo's reward is +1 right, -1 wrong: its mean is 2 * accuracy - 1.
    assert reward.values["mean"] == pytest.approx(2 * reward.values["accuracy"] - 1)
    assert 0 <= varying.values["share"] <= 1 and varying.values["groups"] == 6

    config.environment(env_config={"scorer": "tests.support.naive_scorers:never_reads"})
    blind = by_name(data_checks(llm, tokenizer, RunSampling.from_config(config), probe))
    assert blind["answers parsed"].status == FAIL and blind["answers parsed"].values["share"] == 0
    assert "try another scorer (--scorer math_verify" in blind["answers parsed"].detail
    assert "a prompt template that asks for the format it reads" in blind["answers parsed"].detail
    assert blind["reward mean"].values == {"mean": -1.0, "accuracy": 0.0}
    assert blind["groups with variation"].status == FAIL and blind["groups with variation"].values["share"] == 0
    assert "fix the scorer or the template first" in blind["groups with variation"].detail


def test_doctor_with_data_prints_the_data_rows(tiny_model_path, arithmetic_parquet, tmp_path):
    """`rllib doctor MODEL --data FILE`, as the README's walk-through runs it before training."""
    out = subprocess.run(
        [
            *RLLIB, "doctor", tiny_model_path, "--data", str(arithmetic_parquet), "--problems", "3",
            "--group-size", "2", "--max-prompt-length", "128", "--max-response-length", "32",
            "--out", str(tmp_path / "doctor.json"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    rows = [line.split("  ")[1].strip() for line in out.stdout.splitlines() if line.startswith("  ")]
    assert rows[-3:] == ["answers parsed", "reward mean", "groups with variation"], out.stdout + out.stderr
    record = json.loads((tmp_path / "doctor.json").read_text())
    assert record["settings"]["data"]["problems"] == 3 and record["settings"]["group_size"] == 2
    assert record["checks"][-3]["values"]["samples"] == 6
