"""Pre-flight memory plan: estimate peak GPU memory of a GRPO run before anything loads.

`estimate(config)` turns a config (model shape + LoRA + GRPO settings) into a peak-memory
estimate with a breakdown; `suggest(config, vram_gb)` finds the largest settings that fit a card;
`preflight(config, force)` is what `train` runs first; `prompt_check(config)` holds the run's prompts
to the prompt budget the estimate assumes (data.check_prompt_lengths, when the tokenizer is on this
machine); the `plan` command is local_grpo/cli/plan.py.


This module must stay instant to import: no torch, transformers or trl at module level (only
`preflight` imports torch, to read the GPU's memory, and `prompt_check` transformers, for the
tokenizer). Model shapes come from a local folder's config.json, the embedded model's converted
folder, or the table of common hub models below.

Units: "GB" in this module, its JSON and its table means GiB (2**30 bytes), the unit torch and
nvidia-smi report, and the unit the 6gb/8gb/... presets are named in.

The model, in one paragraph (each term is a named function below, and `assumptions` in the
output repeats the numbers used): peak = static + overhead + max(generation, reference, training).
static = base weights (nf4 4-bit with double-quantised scales for the decoder's linear layers,
embeddings / lm_head kept 16-bit; or all 16-bit) + LoRA (fp32 weights + fp32 grads) + optimizer
(AdamW: two fp32 states per LoRA param; 8-bit optimizers: two bytes). generation = KV cache of
the whole generation batch (per_device_train_batch_size x gradient_accumulation_steps sequences
of prompt + completion tokens; TRL generates the batch in one `generate` call) + the prefill's
working set. reference = a no-grad forward of one micro-batch (with LoRA, TRL disables the
adapter to get the reference: no second copy of the weights). training = saved activations of
the policy forward/backward at micro-batch x (prompt + completion) tokens (all layers, or only the
layer inputs + one recomputed layer with gradient checkpointing) + the log-prob workspace (TRL
1.15's fused, chunked LM head on GPU; full logits on CPU). overhead = CUDA context + allocator
fragmentation + the dequantised weight buffer of 4-bit matmuls.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from .errors import UserError

GIB = 1024**3

# --- numbers the estimate uses (named, with where they come from) ----------------------------
NF4_BYTES_PER_PARAM = 0.5  # 4 bits per weight
NF4_BLOCKSIZE = 64  # bitsandbytes nf4: one absmax scale per 64 weights
DOUBLE_QUANT_SCALE_BYTES = 1.0  # double quant stores each absmax as 8 bits ...
DOUBLE_QUANT_BLOCK = 256  # ... plus one fp32 second-level scale per 256 absmax values
LORA_PARAM_BYTES = 4  # PEFT (autocast_adapter_dtype=True) and Unsloth keep LoRA weights in fp32
LORA_GRAD_BYTES = 4  # gradients of fp32 params are fp32
ADAMW_STATE_BYTES = 8  # two fp32 moments per trainable param
ADAMW_8BIT_STATE_BYTES = 2  # two 8-bit moments (blockwise scales are negligible)
CUDA_CONTEXT_GB = 0.5  # CUDA context + cuBLAS/cuDNN handles: outside torch's allocator counters
FRAGMENTATION = 0.05  # caching-allocator slack on top of live tensors
TRL_VOCAB_CHUNK = 32768  # trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE (TRL 1.15)
TRL_TOKEN_CHUNK = 4096  # trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE (TRL 1.15)
FULL_LOGIT_BYTES = {"cuda": 14, "cpu": 20}  # full-logits path, per logit at the backward peak: logits, log-softmax, exp (kept) + two grads
EIGHT_BIT_OPTIMIZERS = ("adamw_8bit", "paged_adamw_8bit", "adamw_bnb_8bit", "lion_8bit", "paged_lion_8bit")
STATELESS_OPTIMIZERS = ("sgd",)
REFUSE_MARGIN = 1.15  # preflight refuses only beyond the estimate's +-15 % band: "clearly does not fit"

# LoRA target name -> (in_features, out_features) as a function of the shape.
_LORA_DIMS = {
    "q_proj": lambda s: (s.hidden_size, s.q_dim),
    "k_proj": lambda s: (s.hidden_size, s.kv_dim),
    "v_proj": lambda s: (s.hidden_size, s.kv_dim),
    "o_proj": lambda s: (s.q_dim, s.hidden_size),
    "gate_proj": lambda s: (s.hidden_size, s.intermediate_size),
    "up_proj": lambda s: (s.hidden_size, s.intermediate_size),
    "down_proj": lambda s: (s.intermediate_size, s.hidden_size),
    "qkv_proj": lambda s: (s.hidden_size, s.q_dim + 2 * s.kv_dim),  # Phi-3/4 fused
    "gate_up_proj": lambda s: (s.hidden_size, 2 * s.intermediate_size),  # Phi-3/4 fused
}

# What lora.target_modules all-linear reaches in the planner's shapes (Llama, Qwen, Gemma blocks); Phi-3's
# fused qkv_proj / gate_up_proj hold the same weights, and their adapters r x hidden fewer per fused pair.
_BLOCK_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_target_names(targets) -> list[str]:
    """The projections LoRA adapts, as the estimate counts them: lora.target_modules, all-linear as a block's seven."""
    from .config import LORA_ALL_LINEAR

    return [t for t in (_BLOCK_LINEARS if LORA_ALL_LINEAR in targets else targets) if t in _LORA_DIMS]


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

# Reference models for the preset table: one per size class.
SIZE_CLASSES = {
    "0.5B": "Qwen/Qwen2.5-0.5B-Instruct",
    "1.5B": "Qwen/Qwen2.5-1.5B-Instruct",
    "3-4B": "Qwen/Qwen3-4B",
    "7-8B": "meta-llama/Llama-3.1-8B-Instruct",
}


def _table_key(name: str) -> str:
    """Normalise a hub id for table lookup: no owner, lower case, no -instruct/-it/-bnb-4bit tails."""
    base = name.strip().rstrip("/").split("/")[-1].lower()
    for tail in ("-unsloth-bnb-4bit", "-bnb-4bit", "-instruct", "-it", "-base"):
        if base.endswith(tail):
            base = base[: -len(tail)]
    return base


_TABLE_BY_KEY = {_table_key(k): v for k, v in MODEL_TABLE.items()}


# --- shapes ----------------------------------------------------------------------------------

class UnknownShape(UserError):
    """No shape for this model: not a folder, not in the Hugging Face cache, not in the table."""


def model_shape(name_or_path: str, flag: str = "--model") -> Shape:
    """The shape of a model: a local folder's config.json, the embedded model, the Hugging Face
    cache's config.json of a hub id (no network), or the table of common hub models."""
    from . import models

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
    from . import models

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


# --- settings --------------------------------------------------------------------------------

@dataclass
class Settings:
    """The config values the estimate depends on (one flat record)."""

    load_in_4bit: bool
    weight_bytes: int  # 2 (bf16/fp16) or 4 (fp32) for unquantised tensors
    prompt_tokens: int
    completion_tokens: int
    micro_batch: int  # completions per forward/backward (per_device_train_batch_size)
    generation_batch: int  # completions generated at once (micro_batch x gradient_accumulation_steps)
    num_generations: int
    lora_r: int
    lora_targets: tuple
    gradient_checkpointing: bool
    optim: str
    beta: float
    backend: str  # "hf" or "unsloth"
    device: str  # "cuda" (what the plan is for) or "cpu" (used to validate the model on this machine)
    vllm: str = "none"  # "none", "unsloth" (fast_inference, shares the weights), "colocate" (TRL: own copy), "server"
    vllm_gpu_memory_utilization: float = 0.0  # share of the card vLLM reserves (colocate / unsloth)
    p_ref_samples: int = 0  # p_ref's completions per prompt (generated together, at least this many at once)

    @property
    def generation_sequences(self) -> int:
        """Sequences one `generate` call holds: the training generation batch; p_ref and eval are capped to it
        (`sampling_batch_limit`), except that one prompt's p_ref samples are always generated together."""
        return max(self.generation_batch, self.p_ref_samples)


def _config_from(config_or_fields: Any):
    """A Config from a Config, a config dict ({model: {...}, grpo: {...}}) or {flag-name: value}."""
    from . import config as cfg

    if isinstance(config_or_fields, cfg.Config):
        return config_or_fields
    if config_or_fields is None:
        return cfg.Config()
    if not isinstance(config_or_fields, dict):
        raise TypeError("estimate() takes a Config, a config dict or a {flag-name: value} dict")
    if set(config_or_fields) & (set(cfg.SECTIONS) | {"preset", "backend"}):
        data = dict(config_or_fields)
        if data.get("preset"):
            from .presets import apply_preset

            data = apply_preset(data["preset"], data)
        return cfg.from_dict(data, source="plan")
    table = cfg.override_fields()
    unknown = sorted(set(config_or_fields) - set(table))
    if unknown:
        raise UserError(f"--{unknown[0]}: not a config field (valid: {', '.join(sorted(table))})")
    return cfg.apply_overrides(cfg.Config(), dict(config_or_fields))


def _resolve_backend(config) -> str:
    """The backend the plan assumes: auto means Unsloth when it is installed (the GPU case), else hf;
    kl mirror/both train on hf (backends.resolve_backend)."""
    requested = config.backend
    if requested == "auto":
        import importlib.util

        if config.kl_mode in ("mirror", "both"):
            return "hf"
        return "unsloth" if importlib.util.find_spec("unsloth") is not None else "hf"
    return requested


def vllm_kind(config, backend: str) -> str:
    """How generation uses vLLM: none, unsloth (fast_inference), colocate (TRL, same GPU) or server (other GPUs)."""
    g = config.grpo
    if not g.use_vllm:
        return "none"
    if g.vllm_mode == "server":
        return "server"
    return "unsloth" if backend == "unsloth" else "colocate"


def sampling_batch_limit(config) -> int:
    """Most sequences p_ref and eval sample in one `generate` on a GPU: the training generation batch,
    which the plan sizes (per_device_train_batch_size x gradient_accumulation_steps)."""
    g = config.grpo
    return g.per_device_train_batch_size * g.gradient_accumulation_steps


def prompts_per_generate(limit: int, samples: int, requested: int | None = None) -> int:
    """Prompts per `generate` call so that prompts x samples stays within `limit` (at least one prompt)."""
    fit = max(1, limit // max(samples, 1))
    return fit if requested is None else max(1, min(requested, fit))


def settings_of(config, device: str = "cuda") -> Settings:
    from . import data

    m, g = config.model, config.grpo
    weight_bytes = 4 if (m.dtype == "float32" or (m.dtype == "auto" and device == "cpu")) else 2
    backend = _resolve_backend(config)
    return Settings(
        load_in_4bit=m.load_in_4bit,
        weight_bytes=weight_bytes,
        prompt_tokens=max(data.prompt_budget(config), 1),  # the budget train holds every prompt to
        completion_tokens=g.max_completion_length,
        micro_batch=g.per_device_train_batch_size,
        generation_batch=g.per_device_train_batch_size * g.gradient_accumulation_steps,
        num_generations=g.num_generations,
        lora_r=config.lora.r,
        lora_targets=tuple(config.lora.target_modules),
        gradient_checkpointing=g.gradient_checkpointing,
        optim=g.optim,
        beta=g.beta if config.kl_mode in ("ref", "both") else 0.0,  # mirror: no reference forward
        backend=backend,
        device=device,
        vllm=vllm_kind(config, backend),
        vllm_gpu_memory_utilization=g.vllm_gpu_memory_utilization,
        p_ref_samples=g.p_ref_samples if g.p_ref_prompts > 0 else 0,
    )


# --- the terms -------------------------------------------------------------------------------

def weights_bytes(shape: Shape, s: Settings) -> float:
    """Base model weights. 4-bit: nf4 linears + 8-bit absmax + fp32 2nd-level scales; the rest 16-bit.

    Both backends keep the non-quantised tensors (embeddings, lm_head, norms) in the compute dtype
    (our HF backend does not call peft's prepare_model_for_kbit_training, which upcasts them).
    """
    if not s.load_in_4bit:
        return shape.params * s.weight_bytes
    per_param = NF4_BYTES_PER_PARAM + DOUBLE_QUANT_SCALE_BYTES / NF4_BLOCKSIZE + 4 / (NF4_BLOCKSIZE * DOUBLE_QUANT_BLOCK)
    kept_bytes = 4 if s.weight_bytes == 4 else 2
    return shape.linear_params * per_param + (shape.embedding_params + shape.norm_params) * kept_bytes


def lora_params(shape: Shape, r: int, targets) -> int:
    """Trainable LoRA parameters: r x (in + out) for each targeted linear in each layer."""
    per_layer = sum(r * sum(_LORA_DIMS[t](shape)) for t in lora_target_names(targets))
    return shape.num_layers * per_layer


def optimizer_bytes_per_param(optim: str) -> float:
    name = optim.lower()
    if name in STATELESS_OPTIMIZERS:
        return 0
    if name in EIGHT_BIT_OPTIMIZERS or "8bit" in name:
        return ADAMW_8BIT_STATE_BYTES
    return ADAMW_STATE_BYTES


def _act_bytes(s: Settings) -> int:
    """Bytes per activation element: the compute dtype (bf16 on GPU, fp32 on CPU)."""
    return 4 if s.device == "cpu" or s.weight_bytes == 4 else 2


def layer_activation_bytes_per_token(shape: Shape, s: Settings) -> float:
    """Bytes one decoder layer keeps for backward, per token (no checkpointing).

    Counted for a Llama/Qwen block with LoRA on its linears, SDPA attention (no s x s matrix):
    RMSNorm keeps an fp32 copy of its input (x2 norms); the normed input feeds q/k/v and gate/up;
    q/k before and after RoPE, v, the attention output and its reshaped copy; gate, up, silu(gate),
    their product (down's input); LoRA's rank-r intermediates. With a 16-bit compute dtype and fp32
    adapters, PEFT casts each LoRA input to fp32 and autocast back to 16-bit: one extra copy per
    adapted linear's input.
    """
    a = _act_bytes(s)
    h, q, kv, i = shape.hidden_size, shape.q_dim, shape.kv_dim, shape.intermediate_size
    fp32_norm_copies = 2 * h * 4 if a == 2 else 0  # in fp32 the norm's input is the residual itself
    attention = a * (h + 3 * q + 3 * kv + 2 * q) + shape.num_heads * 4  # + softmax log-sum-exp
    mlp = a * (h + 4 * i)
    targets = lora_target_names(s.lora_targets)
    lora_intermediates = a * s.lora_r * len(targets)
    lora_input_casts = 0
    if a == 2:
        lora_input_casts = a * sum(_LORA_DIMS[t](shape)[0] for t in targets)
    return fp32_norm_copies + attention + mlp + lora_intermediates + lora_input_casts


def backward_transient_bytes_per_token(shape: Shape, s: Settings) -> float:
    """Gradients in flight while one layer runs backward (grad of the residual, of the MLP's inner tensors)."""
    a = _act_bytes(s)
    return a * (2 * shape.hidden_size + 2 * shape.intermediate_size)


def activations_bytes(shape: Shape, s: Settings) -> float:
    """Policy forward/backward at micro_batch x (prompt + completion) tokens."""
    tokens = s.micro_batch * (s.prompt_tokens + s.completion_tokens)
    per_layer = layer_activation_bytes_per_token(shape, s)
    transient = backward_transient_bytes_per_token(shape, s)
    embeddings_out = _act_bytes(s) * shape.hidden_size
    if not s.gradient_checkpointing:
        return tokens * (shape.num_layers * per_layer + transient + embeddings_out)
    if s.backend == "unsloth" and s.device == "cuda":
        kept_layer_inputs = 2 * _act_bytes(s) * shape.hidden_size  # Unsloth offloads layer inputs to CPU RAM
    else:
        kept_layer_inputs = shape.num_layers * _act_bytes(s) * shape.hidden_size
    return tokens * (kept_layer_inputs + per_layer + transient + embeddings_out)


def logits_bytes(shape: Shape, s: Settings) -> float:
    """Log-prob workspace for the completion tokens of one micro-batch.

    GPU (TRL 1.15 fused head): one [4096 tokens x 32768 vocab] 16-bit tile, the gathered hidden
    states (16-bit) and their fp32 gradient, a few fp32 per-token vectors, and a 16-bit copy of a
    vocab chunk of the lm_head when it is fp32. CPU (our torch fallback): the full logits.
    """
    tokens = s.micro_batch * s.completion_tokens
    h, v = shape.hidden_size, shape.vocab_size
    if s.device == "cpu":
        return tokens * v * FULL_LOGIT_BYTES["cpu"] + tokens * h * 8
    a = _act_bytes(s)
    tile = min(tokens, TRL_TOKEN_CHUNK) * min(v, TRL_VOCAB_CHUNK) * a
    hidden = tokens * h * (a + 4)
    per_token_vectors = tokens * 8 * 4
    head_chunk = min(v, TRL_VOCAB_CHUNK) * h * a
    return tile + hidden + per_token_vectors + head_chunk


def kv_cache_bytes(shape: Shape, s: Settings, sequences: int | None = None) -> float:
    """K and V for every layer, for the whole generation batch at prompt + completion tokens."""
    sequences = s.generation_sequences if sequences is None else sequences
    tokens = sequences * (s.prompt_tokens + s.completion_tokens)
    return tokens * shape.num_layers * 2 * shape.kv_dim * _act_bytes(s)


def inference_working_bytes(shape: Shape, s: Settings, tokens: int) -> float:
    """One layer's no-grad working set (inputs, q/k/v, MLP intermediates) for `tokens` tokens."""
    a = _act_bytes(s)
    return tokens * a * (3 * shape.hidden_size + 2 * shape.q_dim + 2 * shape.kv_dim + 3 * shape.intermediate_size)


def generation_working_bytes(shape: Shape, s: Settings) -> float:
    """Prefill of the whole generation batch + next-token logits (fp32, softmax + sampling copies)."""
    prefill = inference_working_bytes(shape, s, s.generation_sequences * s.prompt_tokens)
    next_token_logits = s.generation_sequences * shape.vocab_size * 4 * 3
    cache_growth = kv_cache_bytes(shape, s) / shape.num_layers  # DynamicCache cat(): one layer copied at a time
    return prefill + next_token_logits + cache_growth


def reference_bytes(shape: Shape, s: Settings) -> float:
    """beta > 0: with LoRA, TRL disables the adapter for the reference, so only a no-grad forward costs memory."""
    if s.beta <= 0:
        return 0.0
    tokens = s.micro_batch * (s.prompt_tokens + s.completion_tokens)
    no_grad_logits = logits_bytes(shape, s) / 2  # forward half of the log-prob workspace: no gradient buffers
    return inference_working_bytes(shape, s, tokens) + tokens * shape.hidden_size * _act_bytes(s) + no_grad_logits


def dequant_buffer_bytes(shape: Shape, s: Settings) -> float:
    """4-bit matmuls dequantise the weight to 16-bit first: the biggest linear, forward and backward."""
    if not s.load_in_4bit:
        return 0.0
    biggest = max(shape.hidden_size * shape.intermediate_size, shape.hidden_size * shape.q_dim)
    return 2 * biggest * 2


def vllm_bytes(shape: Shape, s: Settings, vram_gb: float) -> float:
    """vLLM's pool on the training GPU: vllm_gpu_memory_utilization x the card (its weights + KV cache).

    TRL colocate loads a second copy of the weights inside the pool; Unsloth's fast_inference shares
    the training weights with vLLM, so only the part of the pool beyond them is extra. Server mode
    generates on other GPUs: nothing here.
    """
    if s.vllm not in ("unsloth", "colocate"):
        return 0.0
    pool = s.vllm_gpu_memory_utilization * vram_gb * GIB
    if s.vllm == "unsloth":
        return max(0.0, pool - weights_bytes(shape, s))
    return pool


# --- the estimate ----------------------------------------------------------------------------

def _gb(x: float) -> float:
    return round(x / GIB, 3)


def estimate_shape(shape: Shape, s: Settings, vram_gb: float | None = None) -> dict:
    """The plan for a shape and settings (see the module docstring for the model)."""
    n_lora = lora_params(shape, s.lora_r, s.lora_targets)
    parts = {
        "weights": weights_bytes(shape, s),
        "lora": n_lora * (LORA_PARAM_BYTES + LORA_GRAD_BYTES),
        "optimizer": n_lora * optimizer_bytes_per_param(s.optim),
        "activations": activations_bytes(shape, s),
        "logits": logits_bytes(shape, s),
        "kv_cache": kv_cache_bytes(shape, s),
        "generation_working": generation_working_bytes(shape, s),
        "reference": reference_bytes(shape, s),
        "vllm": vllm_bytes(shape, s, vram_gb if vram_gb is not None else _default_vram()),
    }
    static = parts["weights"] + parts["lora"] + parts["optimizer"] + parts["vllm"]
    phases = {
        "training": parts["activations"] + parts["logits"],
        "generation": parts["kv_cache"] + parts["generation_working"],
        "reference": parts["reference"],
    }
    peak_phase = max(phases, key=phases.get)
    live = static + phases[peak_phase] + dequant_buffer_bytes(shape, s)
    context = CUDA_CONTEXT_GB * GIB if s.device == "cuda" else 0.0
    overhead = context + FRAGMENTATION * live + dequant_buffer_bytes(shape, s)
    total = static + phases[peak_phase] + overhead
    breakdown = {f"{k}_gb": _gb(v) for k, v in parts.items()}
    breakdown["overhead_gb"] = _gb(overhead)
    breakdown["peak_phase"] = peak_phase
    breakdown["assumptions"] = {
        "model": shape.name,
        "params": shape.params,
        "lora_params": n_lora,
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "micro_batch": s.micro_batch,
        "generation_batch": s.generation_batch,
        "weights": f"4-bit nf4 + double quant; embeddings/lm_head/norms {8 * min(s.weight_bytes, 4)}-bit"
        if s.load_in_4bit else f"{8 * s.weight_bytes}-bit",
        "lora": "fp32 weights + fp32 grads",
        "optimizer": f"{s.optim}: {optimizer_bytes_per_param(s.optim):g} bytes per LoRA param",
        "logits": "TRL fused chunked log-prob" if s.device == "cuda" else "full logits (CPU fallback)",
        "reference": "adapter disabled: no extra weights, one no-grad forward" if s.beta > 0 else "beta = 0: none",
        "backend": s.backend,
        "gradient_checkpointing": s.gradient_checkpointing,
        "generation_sequences": s.generation_sequences,
        "vllm": _vllm_note(s, vram_gb),
        "total": "weights + lora + optimizer + vllm + overhead + max(training, generation, reference)",
        "units": "GiB",
    }
    fits = None if vram_gb is None else total / GIB <= vram_gb
    return {
        "fits": bool(fits) if fits is not None else total / GIB <= _default_vram(),
        "total_gb": _gb(total),
        "vram_gb": vram_gb,
        "breakdown": breakdown,
        "suggestion": None,
    }


def _vllm_note(s: Settings, vram_gb: float | None) -> str:
    if s.vllm == "none":
        return "off (generation through transformers)"
    if s.vllm == "server":
        return "server mode: vLLM on other GPUs, nothing on this one"
    card = f"{vram_gb:g} GB card" if vram_gb is not None else f"{_default_vram():g} GB card assumed (no --vram)"
    share = f"gpu_memory_utilization {s.vllm_gpu_memory_utilization:g} of a {card}"
    return share + ("; Unsloth shares the training weights with it" if s.vllm == "unsloth"
                    else "; TRL colocate: its own copy of the weights inside")


def _default_vram() -> float:
    """With no --vram, 'fits' answers for the largest preset card (24 GB)."""
    return 24.0


def estimate(config_or_fields: Any = None, vram_gb: float | None = None, *, device: str = "cuda",
             suggest_settings: bool = True, shape: Shape | None = None) -> dict:
    """Peak-memory plan for a config; with `vram_gb`, also the largest settings that fit (if it does not)."""
    config = _config_from(config_or_fields)
    if vram_gb is not None and (not isinstance(vram_gb, (int, float)) or vram_gb <= 0):
        raise UserError(f"--vram: must be a positive number of GB, got {vram_gb!r}")
    shape = shape or model_shape(config.model.name)
    plan = estimate_shape(shape, settings_of(config, device), vram_gb)
    if vram_gb is not None and suggest_settings and not plan["fits"]:
        plan["suggestion"] = suggest(config, vram_gb, shape=shape, device=device)
    return plan


def check_config(config) -> dict:
    """The plan for a Config (what the trainer logs); no suggestion without a VRAM figure."""
    return estimate(config)


# --- suggestion ------------------------------------------------------------------------------

SEARCH_ORDER = (
    "1. gradient checkpointing on; 2. 8-bit AdamW; 3. 4-bit base weights; "
    "4. halve the micro-batch (per_device_train_batch_size), doubling gradient_accumulation_steps so the "
    "generation batch stays; 5. halve the generation batch (gradient_accumulation_steps) down to one group; "
    "6. lower LoRA rank to 8; 7. largest max_completion_length that fits (multiples of 64, prompt budget kept); "
    "8. halve num_generations down to 2 (then retry the completion length)"
)
MIN_COMPLETION = 64


def suggest(config_or_fields: Any, vram_gb: float, *, shape: Shape | None = None, device: str = "cuda") -> dict:
    """The largest settings no bigger than the config's that fit `vram_gb`, found in SEARCH_ORDER.

    Returns {"fits", "total_gb", "changes": {flag: value}, "overrides": {...all sized flags}, "search_order"}.
    """
    from . import data

    config = _config_from(config_or_fields)
    shape = shape or model_shape(config.model.name)
    c = _Candidate.from_config(config)
    prompt = max(data.prompt_budget(config), 1)

    def total(cand: _Candidate) -> float:
        return estimate_shape(shape, settings_of(cand.apply(config, prompt), device), vram_gb)["total_gb"]

    def fits(cand: _Candidate) -> bool:
        return total(cand) <= vram_gb

    steps = [
        lambda x: dataclasses.replace(x, gradient_checkpointing=True),
        lambda x: dataclasses.replace(x, optim="adamw_8bit") if optimizer_bytes_per_param(x.optim) > ADAMW_8BIT_STATE_BYTES else x,
        lambda x: dataclasses.replace(x, load_in_4bit=True),
    ]
    for step in steps:
        if fits(c):
            break
        c = step(c)
    while not fits(c) and c.micro_batch > 1 and c.micro_batch % 2 == 0:
        c = dataclasses.replace(c, micro_batch=c.micro_batch // 2, grad_accum=c.grad_accum * 2)
    while not fits(c) and c.generation_batch > c.num_generations and c.grad_accum % 2 == 0 \
            and (c.generation_batch // 2) % c.num_generations == 0:
        c = dataclasses.replace(c, grad_accum=c.grad_accum // 2)
    if not fits(c) and c.lora_r > 8:
        c = dataclasses.replace(c, lora_r=8)
    c = _largest_completion(c, fits)
    while not fits(c) and c.num_generations > 2:
        g = max(2, c.num_generations // 2)
        mb = min(c.micro_batch, g)
        c = dataclasses.replace(c, num_generations=g, micro_batch=mb, grad_accum=max(1, g // mb))
        c = _largest_completion(dataclasses.replace(c, completion=_Candidate.from_config(config).completion), fits)
    original = _Candidate.from_config(config).overrides(prompt)
    overrides = c.overrides(prompt)
    return {
        "fits": fits(c),
        "total_gb": total(c),
        "changes": {k: v for k, v in overrides.items() if original.get(k) != v},
        "overrides": overrides,
        "search_order": SEARCH_ORDER,
    }


def _largest_completion(c: "_Candidate", fits) -> "_Candidate":
    if fits(c):
        return c
    lo, hi = MIN_COMPLETION // 64, c.completion // 64  # in units of 64 tokens
    if lo > hi or not fits(dataclasses.replace(c, completion=lo * 64)):
        return dataclasses.replace(c, completion=min(c.completion, lo * 64))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(dataclasses.replace(c, completion=mid * 64)):
            lo = mid
        else:
            hi = mid - 1
    return dataclasses.replace(c, completion=lo * 64)


@dataclass(frozen=True)
class _Candidate:
    """The settings the suggestion search moves."""

    gradient_checkpointing: bool
    optim: str
    load_in_4bit: bool
    micro_batch: int
    grad_accum: int
    num_generations: int
    completion: int
    lora_r: int

    @property
    def generation_batch(self) -> int:
        return self.micro_batch * self.grad_accum

    @classmethod
    def from_config(cls, config) -> "_Candidate":
        g = config.grpo
        return cls(g.gradient_checkpointing, g.optim, config.model.load_in_4bit, g.per_device_train_batch_size,
                   g.gradient_accumulation_steps, g.num_generations, g.max_completion_length, config.lora.r)

    def overrides(self, prompt_tokens: int) -> dict:
        """As {flag-name: value}: the same names `train` and `plan` take."""
        return {
            "load-in-4bit": self.load_in_4bit,
            "gradient-checkpointing": self.gradient_checkpointing,
            "optim": self.optim,
            "num-generations": self.num_generations,
            "per-device-train-batch-size": self.micro_batch,
            "gradient-accumulation-steps": self.grad_accum,
            "max-completion-length": self.completion,
            "max-seq-length": prompt_tokens + self.completion,
            "lora-r": self.lora_r,
        }

    def apply(self, config, prompt_tokens: int):
        from . import config as cfg

        copy = cfg.from_dict(cfg.to_dict(config))
        return cfg.apply_overrides(copy, self.overrides(prompt_tokens))


# --- presets ---------------------------------------------------------------------------------

PROMPT_BUDGET = 256  # prompt tokens the presets reserve (max_seq_length = this + max_completion_length)
PRESET_HEADROOM = 0.85  # presets size for 85 % of the card: the estimate's -15 % band, display/other processes
# preset -> (card GiB, size classes it must fit, longest completion it offers)
PRESET_TARGETS = {
    "6gb": (6, ("0.5B", "1.5B"), 1024),
    "8gb": (8, ("0.5B", "1.5B", "3-4B"), 1024),
    "12gb": (12, ("0.5B", "1.5B", "3-4B"), 2048),
    "16gb": (16, ("0.5B", "1.5B", "3-4B", "7-8B"), 2048),
    "24gb": (24, ("0.5B", "1.5B", "3-4B", "7-8B"), 2048),
}


def derive_preset(name: str, backend: str = "hf") -> dict:
    """The preset's values: the settings `suggest` finds for the largest model it must fit.

    Starts from 4-bit, checkpointing, 8-bit AdamW, 8 generations, micro-batch 8, LoRA r 16 and the
    preset's longest completion; sizes for PRESET_HEADROOM x the card with the (more memory-hungry)
    HF backend, so the preset also fits under Unsloth. Returns a presets.py-style dict.
    """
    from .config import Config

    vram, classes, completion = PRESET_TARGETS[name]
    chosen = None
    for size in classes:
        config = Config()
        config.model.name, config.backend, config.model.load_in_4bit = SIZE_CLASSES[size], backend, True
        config.model.max_seq_length = PROMPT_BUDGET + (chosen or {}).get("max-completion-length", completion)
        g = config.grpo
        g.max_completion_length = (chosen or {}).get("max-completion-length", completion)
        g.num_generations = (chosen or {}).get("num-generations", 8)
        g.per_device_train_batch_size = (chosen or {}).get("per-device-train-batch-size", 8)
        g.gradient_accumulation_steps = g.num_generations // min(g.per_device_train_batch_size, g.num_generations) \
            if g.per_device_train_batch_size < g.num_generations else 1
        g.gradient_checkpointing, g.optim, config.lora.r = True, "adamw_8bit", (chosen or {}).get("lora-r", 16)
        s = suggest(config, vram * PRESET_HEADROOM)
        if not s["fits"]:
            raise ValueError(f"preset {name}: {size} does not fit")
        chosen = s["overrides"]
    return {
        "model": {"load_in_4bit": True, "max_seq_length": chosen["max-seq-length"]},
        "lora": {"r": chosen["lora-r"], "alpha": 2 * chosen["lora-r"]},
        "grpo": {"num_generations": chosen["num-generations"],
                 "per_device_train_batch_size": chosen["per-device-train-batch-size"],
                 "gradient_accumulation_steps": chosen["gradient-accumulation-steps"],
                 "max_completion_length": chosen["max-completion-length"],
                 "gradient_checkpointing": True, "optim": "adamw_8bit"},
    }


# --- prompts: the budget model.max_seq_length leaves them ------------------------------------

def local_tokenizer_folder(name: str, gguf_file: str | None = None) -> str | None:
    """Where a model's tokenizer is on this machine with nothing converted or downloaded, or None:
    a local folder, the embedded model once converted, a hub id's Hugging Face cache snapshot."""
    from . import models

    if gguf_file or name.endswith(".gguf"):
        return None  # converted to a folder by the first train
    kind = models.check_name_kind_quietly(name)
    if kind == "embedded":
        return converted_embedded_folder()
    if kind == "folder":
        return name
    cached = models.hub_cache_file(name, "tokenizer_config.json") if kind == "hub" else None
    return os.path.dirname(cached) if cached else None


def prompt_check(config) -> dict:
    """The run's chat-templated prompts against the prompt budget, measured as train measures them
    (data.check_prompt_lengths), when the tokenizer and the data are on this machine: a prompt over
    the budget is the same one-line UserError as train's.

    Returns {"measured", "budget"} plus {"prompts", "longest"} when measured, else {"reason"}.
    """
    from . import backends, data

    budget = data.prompt_budget(config)
    folder = local_tokenizer_folder(config.model.name, config.model.gguf_file)
    if folder is None:
        return {"measured": False, "budget": budget,
                "reason": f"no local tokenizer for {config.model.name} yet; train measures them"}
    try:
        hub = data.hub_source(config)
        if hub:
            return {"measured": False, "budget": budget, "reason": f"the data is the hub dataset {hub}; train measures them"}
        train_rows, held_out = data.load_examples(config)
        tokenizer = backends.load_tokenizer(folder, local_files_only=True)
    except UserError as exc:  # e.g. a dataset file that is not on this machine: plan the memory all the same
        return {"measured": False, "budget": budget, "reason": str(exc)}
    return {"measured": True, **data.check_prompt_lengths(config, tokenizer, train_rows, held_out)}


# --- train's pre-flight ------------------------------------------------------------------------

def detect_vram_gb() -> float | None:
    """Total memory of CUDA device 0 in GiB, or None without a GPU (imports torch)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / GIB


def preflight(config, force: bool = False, vram_gb: float | None = None) -> dict | None:
    """Plan a run before loading; raise UserError when it clearly does not fit the GPU (unless force).

    "Clearly" = the estimate exceeds the card by more than the estimate's +-15 % band. On CPU nothing
    is refused: the plan comes back with note "no GPU: plan only". A model whose shape cannot be read
    (no config.json here or in the Hugging Face cache, not in the table) is not planned: one warning
    line on stderr, and None.
    """
    try:
        shape = model_shape(config.model.name)
    except UserError as exc:
        print(f"local-grpo: warning: memory plan skipped, training without it ({exc})", file=sys.stderr)
        return None
    vram = vram_gb if vram_gb is not None else detect_vram_gb()
    if vram is None:
        plan = estimate(config, shape=shape)
        plan["note"] = "no GPU: plan only"
        return plan
    plan = estimate(config, vram_gb=round(vram, 2), shape=shape)
    if plan["total_gb"] > vram * REFUSE_MARGIN and not force:
        raise UserError(f"--force: {summary_line(plan)} (run `local-grpo plan` for the table, or pass --force)")
    return plan


def summary_line(plan: dict) -> str:
    """One line: total vs card, the largest terms, and the suggested flags."""
    b = plan["breakdown"]
    terms = sorted(((k[:-3], v) for k, v in b.items() if k.endswith("_gb")), key=lambda kv: -kv[1])[:3]
    parts = ", ".join(f"{k} {v:.1f}" for k, v in terms)
    line = f"estimated peak {plan['total_gb']:.1f} GB > {plan['vram_gb']:.1f} GB GPU ({parts} GB; peak in {b['peak_phase']})"
    s = plan.get("suggestion")
    if s and s.get("fits"):
        flags = " ".join(_flag(k, v) for k, v in s["changes"].items())
        line += f"; try: {flags} (~{s['total_gb']:.1f} GB)"
    elif s:
        line += "; no setting of this model fits: use a smaller model"
    return line


def _flag(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return f"--{name}" if value else f"--no-{name}"
    return f"--{name} {value}"


# --- GPU defaults for a question asked without a preset ---------------------------------------

CPU_DEFAULTS_MAX_PARAMS = 1.0e9  # the bare Config's defaults (micro-batch 16, no checkpointing) are sized for the embedded 135M


def matching_preset(vram_gb: float | None) -> str:
    """The VRAM preset for the card a plan answers for: the largest preset card not above `vram_gb`
    (the smallest preset below all of them); without a card, the 24 GB one `fits` is judged against."""
    card = _default_vram() if vram_gb is None else vram_gb
    sized = [name for name, (gb, _, _) in PRESET_TARGETS.items() if gb <= card]
    return sized[-1] if sized else next(iter(PRESET_TARGETS))


def gpu_defaults(config, given: set, vram_gb: float | None = None) -> dict | None:
    """GPU defaults for the flags not in `given`, when the question is a GPU one; else None.

    A GPU question: the model has more than CPU_DEFAULTS_MAX_PARAMS parameters, or 4-bit loading
    is asked (4-bit is for GPUs). The defaults: gradient checkpointing on, max_seq_length =
    PROMPT_BUDGET + max_completion_length, and the micro-batch of the preset for the planned card
    (`matching_preset`), with the gradient accumulation that makes the generation batch whole groups.
    """
    import math

    from .presets import PRESETS

    shape = model_shape(config.model.name)
    if shape.params <= CPU_DEFAULTS_MAX_PARAMS and not config.model.load_in_4bit:
        return None
    preset = matching_preset(vram_gb)
    g = config.grpo
    micro = g.per_device_train_batch_size if "per-device-train-batch-size" in given \
        else PRESETS[preset]["grpo"]["per_device_train_batch_size"]
    candidates = {
        "gradient-checkpointing": True,
        "max-seq-length": PROMPT_BUDGET + g.max_completion_length,
        "per-device-train-batch-size": micro,
        "gradient-accumulation-steps": math.lcm(micro, g.num_generations) // micro,
    }
    values = {flag: value for flag, value in candidates.items() if flag not in given}
    if not values:
        return None
    why = "4-bit asked" if shape.params <= CPU_DEFAULTS_MAX_PARAMS else f"{shape.params / 1e9:.1f}B params"
    return {"reason": f"no --config/--preset and a GPU question, {why}: GPU defaults, micro-batch as preset {preset}",
            "preset": preset, "values": values}
