"""Shared fixtures: a tiny local model, built once per test session, and offline settings."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(__file__))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GSM8K_DIR = os.path.join(os.path.dirname(REPO), "shared", "data", "gsm8k")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A tiny random Llama + BPE tokenizer folder (built once per session)."""
    from tiny_model import build_tiny_model

    return build_tiny_model(str(tmp_path_factory.mktemp("tiny-model")))


@pytest.fixture
def tiny_config(tiny_model_dir, tmp_path):
    """A Config that trains the tiny model for 2 fast steps on arithmetic, HF backend, CPU."""
    from local_grpo.config import Config

    config = Config()
    config.model.name = tiny_model_dir
    config.model.max_seq_length = 128
    config.backend = "hf"
    config.lora.r = 4
    config.lora.alpha = 8
    config.data.num_train = 16
    config.data.num_heldout = 4
    g = config.grpo
    g.num_generations = 4
    g.per_device_train_batch_size = 8
    g.max_completion_length = 12
    g.max_steps = 2
    g.save_steps = 1
    g.learning_rate = 1e-2
    config.output_dir = str(tmp_path / "run")
    return config
