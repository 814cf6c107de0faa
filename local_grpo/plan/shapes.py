"""Model shapes for the memory plan: the table of common hub models, and reading a model's config.json.

`model_shape(name)` answers from a local folder's config.json, the embedded model's converted folder,
the Hugging Face cache's config.json of a hub id (no network), or `MODEL_TABLE`, in that order.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from dataclasses import dataclass

from ..errors import UserError


@dataclass(frozen=True)
class Shape:
    """What the memory plan needs to know about a decoder-only transformer."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_embeddings: bool
    extra_params: int = 0  # parameters outside the decoder stack (e.g. a vision tower), quantised like linears
    source: str = "table"

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def linear_params(self) -> int:
        """Parameters of the decoder's linear layers (what 4-bit quantises)."""
        h, i = self.hidden_size, self.intermediate_size
        per_layer = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h + 3 * h * i
        return self.num_layers * per_layer + self.extra_params

    @property
    def embedding_params(self) -> int:
        """Input embeddings + lm_head (once when tied): kept in 16-bit by 4-bit loading."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_embeddings else 2)

    @property
    def norm_params(self) -> int:
        return (2 * self.num_layers + 1) * self.hidden_size

    @property
    def params(self) -> int:
        return self.linear_params + self.embedding_params + self.norm_params

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "params": self.params}


def _s(name, h, layers, heads, kv, head_dim, inter, vocab, tied, extra=0) -> Shape:
    return Shape(name, h, layers, heads, kv, head_dim, inter, vocab, tied, extra)


# Published config.json values (hidden, layers, heads, kv heads, head dim, intermediate, vocab, tied).
MODEL_TABLE: dict[str, Shape] = {s.name: s for s in (
    _s("Qwen/Qwen2.5-0.5B-Instruct", 896, 24, 14, 2, 64, 4864, 151936, True),
    _s("Qwen/Qwen2.5-1.5B-Instruct", 1536, 28, 12, 2, 128, 8960, 151936, True),
    _s("Qwen/Qwen2.5-3B-Instruct", 2048, 36, 16, 2, 128, 11008, 151936, True),
    _s("Qwen/Qwen2.5-7B-Instruct", 3584, 28, 28, 4, 128, 18944, 152064, False),
    _s("Qwen/Qwen3-0.6B", 1024, 28, 16, 8, 128, 3072, 151936, True),
    _s("Qwen/Qwen3-1.7B", 2048, 28, 16, 8, 128, 6144, 151936, True),
    _s("Qwen/Qwen3-4B", 2560, 36, 32, 8, 128, 9728, 151936, True),
    _s("Qwen/Qwen3-8B", 4096, 36, 32, 8, 128, 12288, 151936, False),
    _s("meta-llama/Llama-3.2-1B-Instruct", 2048, 16, 32, 8, 64, 8192, 128256, True),
    _s("meta-llama/Llama-3.2-3B-Instruct", 3072, 28, 24, 8, 128, 8192, 128256, True),
    _s("meta-llama/Llama-3.1-8B-Instruct", 4096, 32, 32, 8, 128, 14336, 128256, False),
    _s("HuggingFaceTB/SmolLM2-135M-Instruct", 576, 30, 9, 3, 64, 1536, 49152, True),
    _s("HuggingFaceTB/SmolLM2-360M-Instruct", 960, 32, 15, 5, 64, 2560, 49152, True),
    _s("HuggingFaceTB/SmolLM2-1.7B-Instruct", 2048, 24, 32, 32, 64, 8192, 49152, True),
    _s("google/gemma-3-1b-it", 1152, 26, 4, 1, 256, 6912, 262144, True),
    # gemma-3-4b-it is multimodal: the text decoder below + a ~0.42B SigLIP vision tower.
    _s("google/gemma-3-4b-it", 2560, 34, 8, 4, 256, 10240, 262208, True, extra=417_000_000),
    _s("microsoft/Phi-4-mini-instruct", 3072, 32, 24, 8, 128, 8192, 200064, True),
)}
EMBEDDED_SHAPE = MODEL_TABLE["HuggingFaceTB/SmolLM2-135M-Instruct"]


def _table_key(name: str) -> str:
    """Normalise a hub id for table lookup: no owner, lower case, no -instruct/-it/-bnb-4bit tails."""
    base = name.strip().rstrip("/").split("/")[-1].lower()
    for tail in ("-unsloth-bnb-4bit", "-bnb-4bit", "-instruct", "-it", "-base"):
        if base.endswith(tail):
            base = base[: -len(tail)]
    return base


_TABLE_BY_KEY = {_table_key(k): v for k, v in MODEL_TABLE.items()}


# --- reading a model's shape ----------------------------------------------------------------

class UnknownShape(UserError):
    """No shape for this model: not a folder, not in the Hugging Face cache, not in the table."""


def model_shape(name_or_path: str, flag: str = "--model") -> Shape:
    """The shape of a model: a local folder's config.json, the embedded model, the Hugging Face
    cache's config.json of a hub id (no network), or the table of common hub models."""
    from .. import models

    if models.is_embedded(name_or_path):
        converted = converted_embedded_folder()
        if converted:
            return shape_from_config_file(os.path.join(converted, "config.json"), name="embedded")
        return dataclasses.replace(EMBEDDED_SHAPE, name="embedded")
    if os.path.isdir(name_or_path):
        path = os.path.join(name_or_path, "config.json")
        if not os.path.isfile(path):
            raise UnknownShape(f"{flag}: {name_or_path} has no config.json (not a transformers model folder)")
        return shape_from_config_file(path, name=name_or_path)
    if name_or_path.endswith(".gguf"):
        raise UnknownShape(f"{flag}: plan reads shapes from config.json; pass the converted folder, not a .gguf file")
    cached = models.hub_cache_file(name_or_path, "config.json")
    if cached is not None:
        return shape_from_config_file(cached, name=name_or_path)
    shape = _TABLE_BY_KEY.get(_table_key(name_or_path))
    if shape is None:
        known = ", ".join(sorted(MODEL_TABLE))
        raise UnknownShape(f"{flag}: no shape known for {name_or_path!r} (not in the Hugging Face cache); pass a "
                           f"local folder with config.json or one of: {known}")
    return shape


def converted_embedded_folder() -> str | None:
    """The embedded model's converted HF folder in the cache (the first train makes it), or None."""
    from .. import models

    cached = sorted(glob.glob(os.path.join(models.cache_dir(), "models", "SmolLM2-135M-Instruct*", "config.json")))
    return os.path.dirname(cached[-1]) if cached else None


def shape_from_config_file(path: str, name: str | None = None) -> Shape:
    """Read a transformers config.json (also a multimodal one with a text_config)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise UserError(f"--model: cannot read {path}: {exc}") from None
    return shape_from_config_dict(data, name=name or os.path.dirname(path), source=path)


def shape_from_config_dict(data: dict, name: str, source: str = "config") -> Shape:
    """A Shape from a transformers config (its text_config for a multimodal one); missing sizes are one UserError."""
    text = data.get("text_config") or data
    get = lambda *keys, default=None: next((text[k] for k in keys if text.get(k) is not None), default)  # noqa: E731
    hidden = get("hidden_size", "n_embd", "d_model")
    layers = get("num_hidden_layers", "n_layer", "num_layers")
    heads = get("num_attention_heads", "n_head")
    vocab = get("vocab_size") or data.get("vocab_size")
    for key, value in (("hidden_size", hidden), ("num_hidden_layers", layers), ("num_attention_heads", heads), ("vocab_size", vocab)):
        if not isinstance(value, int) or value <= 0:
            raise UserError(f"--model: {source} lacks a positive integer {key}")
    kv = get("num_key_value_heads", default=heads)
    head_dim = get("head_dim", default=hidden // heads)
    inter = get("intermediate_size", "n_inner", "ffn_dim", default=4 * hidden)
    tied = data.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
    return Shape(name, hidden, layers, heads, kv, head_dim, inter, vocab, bool(tied), 0, source)
