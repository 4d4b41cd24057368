"""The tiny model's build record: the fingerprint of the weights, the shipped reference builds and the comparison
with them that a failing test reports, the seed of default builds and the pinned kernels (nothing is built here but
a two-step model)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from dapo_rllib.models.model_cache import build_lock
from dapo_rllib.models.tiny import (
    BUILD_RECORD,
    RECIPE_SET_ENV,
    RECIPES,
    SEED_ENV,
    SHIPPED_DIR,
    TEST_RECIPES,
    build_environment,
    cached_tiny_model_path,
    default_tiny_model_path,
    describe_build,
    is_reference_build,
    read_build_record,
    recipe_for,
    shipped,
    shipped_model_path,
    shipped_versions,
    weights_fingerprint,
)
from dapo_rllib.models.tiny import build as tiny_build
from dapo_rllib.models.tiny.__main__ import main
from dapo_rllib.models.tiny.recipes import RECIPE_SETS

# What a shipped model's directory holds: save_pretrained's model and tokenizer, and the build record.
SHIPPED_FILES = (
    "build_record.json",
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)


def model_dir(path, tensors, record=None):
    path.mkdir()
    save_file(tensors, str(path / "model.safetensors"))
    if record is not None:
        (path / BUILD_RECORD).write_text(json.dumps(record))
    return path


def record(version, fingerprint, seed=0):
    return {
        "fingerprint": fingerprint,
        "version": version,
        "seed": seed,
        "held_out": {"samples": 4, "avg@4": 0.5, "mixed@4": 0.75},
        "built_with": {"torch": "2.13.0+cpu", "threads": 2, "cpu_capability": "AVX2", "cpu": "a test CPU"},
    }


def test_the_fingerprint_is_of_the_weights_bits(tmp_path):
    weights = {"x": torch.arange(6, dtype=torch.float32).reshape(2, 3), "y": torch.ones(2)}
    fingerprint = weights_fingerprint(model_dir(tmp_path / "a", weights))
    assert len(fingerprint) == 64  # sha256, in hex
    # The same tensors stored in the other order: the same fingerprint.
    assert weights_fingerprint(model_dir(tmp_path / "b", dict(reversed(weights.items())))) == fingerprint
    # One bit of one weight, or the same bits in another shape: another fingerprint.
    flipped = weights["x"].clone()
    flipped.view(torch.int32)[0, 1] ^= 1
    assert weights_fingerprint(model_dir(tmp_path / "c", weights | {"x": flipped})) != fingerprint
    assert weights_fingerprint(model_dir(tmp_path / "d", weights | {"x": weights["x"].reshape(3, 2)})) != fingerprint


def test_a_build_is_described_against_the_reference_build_of_its_version(tmp_path, monkeypatch):
    monkeypatch.setattr(shipped, "SHIPPED_DIR", tmp_path / "shipped")
    weights = {"w": torch.zeros(2)}
    reference = record("tiny-test-v1", "a" * 64) | {"held_out": {"samples": 4, "avg@4": 0.25, "mixed@4": 0.5}}
    model_dir((tmp_path / "shipped").mkdir() or tmp_path / "shipped" / "tiny-test-v1", weights, reference)
    (tmp_path / "shipped" / "tiny-test-v1" / "config.json").write_text("{}")
    same = model_dir(tmp_path / "same", weights, record("tiny-test-v1", "a" * 64))
    other = model_dir(tmp_path / "other", weights, record("tiny-test-v1", "b" * 64, seed=1))
    no_reference = model_dir(tmp_path / "no_reference", weights, record("tiny-test-v9", "c" * 64))
    no_record = model_dir(tmp_path / "no_record", weights)

    assert [is_reference_build(p) for p in (same, other, no_reference, no_record)] == [True, False, None, None]
    assert describe_build(same).endswith("; the shipped build (the model the tests were checked with)")
    assert f"{other}: tiny-test-v1 seed 1, fingerprint bbbbbbbbbbbbbbbb, held-out avg@4 0.500, mixed@4 0.750" in (
        describe_build(other)
    )
    assert describe_build(other).endswith(
        "; NOT the shipped build (fingerprint aaaaaaaaaaaaaaaa, held-out avg@4 0.250, mixed@4 0.500) "
        "the tests were checked with"
    )
    assert describe_build(no_reference).endswith("; no shipped build of this version to compare with")
    assert describe_build(no_record) == (
        f"{no_record}: fingerprint {weights_fingerprint(no_record)[:16]}, no {BUILD_RECORD} "
        "(not built by dapo_rllib.models.tiny)"
    )


def test_another_seed_builds_into_a_directory_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("DAPO_RLLIB_CACHE", str(tmp_path))
    monkeypatch.delenv(SEED_ENV, raising=False)
    arithmetic = recipe_for("arithmetic").version
    assert cached_tiny_model_path() == tmp_path / arithmetic
    assert default_tiny_model_path() == SHIPPED_DIR / arithmetic  # seed 0: the shipped build
    monkeypatch.setenv(SEED_ENV, "1")
    assert default_tiny_model_path() == cached_tiny_model_path() == tmp_path / f"{arithmetic}-seed1"
    assert cached_tiny_model_path("code", seed=0) == tmp_path / recipe_for("code").version
    monkeypatch.setenv(SEED_ENV, "one")
    with pytest.raises(ValueError, match=r"\$DAPO_RLLIB_TINY_SEED='one' is not an integer seed"):
        default_tiny_model_path()


def test_the_test_recipes_are_shorter_warm_starts_of_their_own_versions(tmp_path, monkeypatch):
    monkeypatch.setenv("DAPO_RLLIB_CACHE", str(tmp_path))
    monkeypatch.delenv(SEED_ENV, raising=False)
    monkeypatch.delenv(RECIPE_SET_ENV, raising=False)  # unset: the full recipes, the tuned examples' models
    assert {task: recipe_for(task) for task in RECIPES} == RECIPES
    assert cached_tiny_model_path("code") == tmp_path / "tiny-qwen2-code-v2"
    monkeypatch.setenv(RECIPE_SET_ENV, "test")
    assert cached_tiny_model_path("code") == tmp_path / "tiny-qwen2-code-test-v1"
    assert recipe_for("arithmetic") is RECIPES["arithmetic"]  # a task without a test recipe: its full one
    for task, test in TEST_RECIPES.items():
        full = RECIPES[task]
        assert recipe_for(task) is test and test.version != full.version and "-test-" in test.version
        assert test.sft_steps * test.batch_size < full.sft_steps * full.batch_size
        assert len(test.test_problems()) == 32 < len(full.test_problems())
        same = ("train_problems", "answer", "styles", "correct", "max_new_tokens", "chat_template", "tools")
        assert [getattr(test, name) for name in same] == [getattr(full, name) for name in same]
    monkeypatch.setenv(RECIPE_SET_ENV, "small")
    with pytest.raises(ValueError, match=r"\$DAPO_RLLIB_TINY_RECIPES='small' is not a set of tiny-model recipes"):
        recipe_for("arithmetic")


def test_the_build_pins_its_threads_and_where_the_cpu_has_avx2_its_kernels(monkeypatch):
    monkeypatch.setattr(tiny_build, "_cpu_flags", lambda: {"sse4_2", "avx", "avx2", "fma", "avx512f"})
    env = build_environment()
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == str(tiny_build.BUILD_THREADS)
    assert (env["ATEN_CPU_CAPABILITY"], env["MKL_CBWR"], env["ONEDNN_MAX_CPU_ISA"]) == ("avx2", "AVX2", "AVX2")
    # Without AVX2 (an old x86, ARM): the CPU's own kernels, the same threads.
    monkeypatch.setattr(tiny_build, "_cpu_flags", lambda: {"sse4_2", "avx"})
    env = build_environment()
    assert not {"ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA"} & set(env)
    assert env["OMP_NUM_THREADS"] == str(tiny_build.BUILD_THREADS)


def test_every_recipe_ships_its_reference_build():
    versions = {recipe.version for recipes in RECIPE_SETS.values() for recipe in recipes.values()}
    assert sorted(versions) == shipped_versions()


@pytest.mark.parametrize("version", shipped_versions())
def test_a_shipped_models_fingerprint_is_of_its_weights(version):
    path = shipped_model_path(version)
    built = read_build_record(path)
    assert weights_fingerprint(path) == built["fingerprint"]
    assert (built["version"], built["seed"]) == (version, 0)
    assert sorted(p.name for p in path.iterdir()) == sorted(SHIPPED_FILES)
    held_out = built["held_out"]
    assert 0.0 <= held_out["mixed@4"] <= 1.0 and 0.0 <= held_out["avg@4"] <= 1.0


def test_the_default_models_are_the_shipped_ones(tiny_model_path, tiny_code_model_path, tiny_tool_model_path):
    for path, task in (
        (tiny_model_path, "arithmetic"),
        (tiny_code_model_path, "code"),
        (tiny_tool_model_path, "tool_arithmetic"),
    ):
        assert Path(path) == SHIPPED_DIR / recipe_for(task).version
    held_out = read_build_record(tiny_model_path)["held_out"]
    assert (held_out["problems"], held_out["samples"]) == (193, 4)  # the whole arithmetic test split


@pytest.mark.engine  # builds a model
def test_processes_that_need_the_same_model_at_once_build_it_once(tmp_path):
    """Two processes ask for the same missing model while its build lock is held (as by `make test`'s builder):
    both wait; then one builds it and the other finds it built."""
    path, logs = tmp_path / "code", [tmp_path / "first.log", tmp_path / "second.log"]
    code = "import sys; from dapo_rllib.models.tiny import ensure_tiny_model; ensure_tiny_model(sys.argv[1], task='code', sft_steps=2, batch_size=2)"
    env = os.environ | {RECIPE_SET_ENV: "test"}  # held-out accuracy on the test recipe's 32 problems
    with build_lock(path, "tiny model"):
        processes = [
            subprocess.Popen(
                [sys.executable, "-c", code, str(path)], stdout=log.open("w"), stderr=subprocess.STDOUT, env=env
            )
            for log in logs
        ]
        waiting = f"[tiny model] waiting for another process to build {path}"
        deadline = time.monotonic() + 120
        while not all(waiting in log.read_text() for log in logs):
            assert time.monotonic() < deadline and all(p.poll() is None for p in processes), [
                log.read_text() for log in logs
            ]
            time.sleep(0.2)
    assert [p.wait(timeout=300) for p in processes] == [0, 0], [log.read_text() for log in logs]
    outputs = [log.read_text() for log in logs]
    assert sum(output.count("[tiny model] building a") for output in outputs) == 1, outputs
    assert read_build_record(path)["sft_steps"] == 2


def test_the_command_lists_each_tasks_shipped_model_and_refuses_an_unknown_task(capsys):
    main(["arithmetic", "code"])  # the suite's recipe set (conftest): both ship, nothing is built
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"[tiny model] 1/2 arithmetic: {SHIPPED_DIR / recipe_for('arithmetic').version} (shipped)",
        f"[tiny model] 2/2 code: {SHIPPED_DIR / recipe_for('code').version} (shipped)",
    ]
    with pytest.raises(SystemExit) as refused:
        main(["--verify", "arithmetc"])  # refused before anything is built
    assert refused.value.code == 2 and "arithmetc" in capsys.readouterr().err


def test_shipping_a_build_replaces_the_shipped_model_in_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(shipped, "SHIPPED_DIR", tmp_path / "shipped")
    (tmp_path / "shipped" / "tiny-v1").mkdir(parents=True)
    (tmp_path / "shipped" / "tiny-v1" / "stale.bin").write_bytes(b"old")
    (tmp_path / "built").mkdir()
    (tmp_path / "built" / "config.json").write_text("{}")
    target = shipped.ship_model(tmp_path / "built", "tiny-v1")
    assert target == tmp_path / "shipped" / "tiny-v1"
    assert [p.name for p in target.iterdir()] == ["config.json"]  # the old build's files are gone with it
    assert [p.name for p in (tmp_path / "shipped").iterdir()] == ["tiny-v1"]  # no staging directory left
    assert shipped.shipped_model_path("tiny-v1") == target
