"""Shared fixtures: a tiny local model, built once per test session, and offline settings."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(__file__))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A tiny random Llama + BPE tokenizer folder (built once per session)."""
    from tiny_model import build_tiny_model

    return build_tiny_model(str(tmp_path_factory.mktemp("tiny-model")))


def make_tiny_config(model_dir: str, output_dir: str, steps: int = 2, save_steps: int = 1,
                     max_completion_length: int = 12):
    """A Config that trains the tiny model for a few fast steps on arithmetic, HF backend, CPU."""
    from local_grpo.config import Config

    config = Config()
    config.model.name = model_dir
    config.model.max_seq_length = 128
    config.backend = "hf"
    config.lora.r, config.lora.alpha = 4, 8
    config.data.num_train, config.data.num_heldout = 16, 4
    g = config.grpo
    g.num_generations, g.per_device_train_batch_size, g.max_completion_length = 4, 8, max_completion_length
    g.max_steps, g.save_steps, g.learning_rate = steps, save_steps, 1e-2
    config.output_dir = output_dir
    return config


@pytest.fixture
def tiny_config(tiny_model_dir, tmp_path):
    """A Config that trains the tiny model for 2 fast steps into tmp_path/run."""
    return make_tiny_config(tiny_model_dir, str(tmp_path / "run"))


@pytest.fixture(scope="session")
def trained_tiny_run(tiny_model_dir, tmp_path_factory) -> str:
    """A finished 2-step run of the tiny model, trained once per session. Copy it before changing it."""
    from local_grpo import train

    config = make_tiny_config(tiny_model_dir, str(tmp_path_factory.mktemp("trained") / "run"), save_steps=2,
                              max_completion_length=8)
    train.train(config, progress=False)
    return config.output_dir


@pytest.fixture(scope="session")
def smollm2_tokenizer_dir(tmp_path_factory) -> str:
    """The embedded SmolLM2's real tokenizer alone in a folder, once per session (the first use on a machine
    converts the embedded model into the model cache, ~60 s)."""
    from tiny_model import save_smollm2_tokenizer

    return save_smollm2_tokenizer(str(tmp_path_factory.mktemp("smollm2-tokenizer")))


@pytest.fixture(scope="session")
def tiny_architecture(smollm2_tokenizer_dir, tmp_path_factory, pytestconfig):
    """`tiny_architecture(name)`: the folder of a tiny random model of architecture `name` (a key of
    tiny_model.ARCHITECTURES: smollm2, llama3, qwen2, qwen3, gemma3, phi3) with SmolLM2's tokenizer (Qwen2:
    Qwen2.5's own where llama.cpp's tree is installed, tiny_model.llama_cpp_vocab), built on first use and
    kept for the session."""
    from tiny_model import build_architecture, llama_cpp_vocab, save_gguf_tokenizer

    built: dict[str, str] = {}

    def tokenizer_dir(name: str) -> str:
        vocab = llama_cpp_vocab(name)
        if vocab is None:
            return smollm2_tokenizer_dir
        # transformers reads a 151k-token GGUF vocabulary in ~20 s: kept in pytest's cache between sessions
        key = f"{name}-tokenizer-{os.path.getsize(vocab)}"
        cache = getattr(pytestconfig, "cache", None)
        if cache is None:
            return save_gguf_tokenizer(vocab, str(tmp_path_factory.mktemp(key)))
        folder = os.path.join(cache.mkdir("tokenizers"), key)
        if not os.path.isdir(folder):  # written beside it, then renamed: never half a folder
            os.replace(save_gguf_tokenizer(vocab, tempfile.mkdtemp(dir=os.path.dirname(folder))), folder)
        return folder

    def folder(name: str) -> str:
        if name not in built:
            built[name] = build_architecture(name, str(tmp_path_factory.mktemp(f"tiny-{name}")), tokenizer_dir(name))
        return built[name]

    return folder


@pytest.fixture(scope="module")
def one_torch_thread():
    """The tiny model runs ~10x faster on one thread on a busy 2-core machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
