"""Shared, expensive fixtures: one Ray session and one tiny model for the whole test run."""

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import pytest


@pytest.fixture(scope="session")
def tiny_model_path():
    """The built-in tiny model (built into the cache on first use, ~3 minutes on 2 cores)."""
    from dapo_rllib.tiny_model import ensure_tiny_model

    return str(ensure_tiny_model())


@pytest.fixture(scope="session")
def plain_tokenizer_path(tiny_model_path, tmp_path_factory):
    """The tiny model's tokenizer saved without its chat template, as a base model's would be."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path, local_files_only=True)
    tokenizer.chat_template = None
    path = tmp_path_factory.mktemp("plain_tokenizer")
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def ray_session():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True)
    yield
    ray.shutdown()
