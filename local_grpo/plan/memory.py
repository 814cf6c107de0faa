"""The memory model: peak GPU memory of a GRPO run from a model's shape and the config's settings.

`settings_of(config)` reads the values the estimate depends on into one flat `Settings`;
`estimate_shape(shape, settings)` adds up the terms below into a plan with a breakdown.

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

from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from .shapes import Shape

GIB = 1024**3  # "GB" in the plan, its JSON and its table means GiB

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
DEFAULT_VRAM_GB = 24.0  # the card "fits" answers for without --vram: the largest preset's

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
    from ..config import LORA_ALL_LINEAR

    return [t for t in (_BLOCK_LINEARS if LORA_ALL_LINEAR in targets else targets) if t in _LORA_DIMS]


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


def config_from(config_or_fields: Any):
    """A Config from a Config, a config dict ({model: {...}, grpo: {...}}) or {flag-name: value}."""
    from .. import config as cfg

    if isinstance(config_or_fields, cfg.Config):
        return config_or_fields
    if config_or_fields is None:
        return cfg.Config()
    if not isinstance(config_or_fields, dict):
        raise TypeError("estimate() takes a Config, a config dict or a {flag-name: value} dict")
    if set(config_or_fields) & (set(cfg.SECTIONS) | {"preset", "backend"}):
        data = dict(config_or_fields)
        if data.get("preset"):
            from ..presets import apply_preset

            data = apply_preset(data["preset"], data)
        return cfg.from_dict(data, source="plan")
    table = cfg.override_fields()
    unknown = sorted(set(config_or_fields) - set(table))
    if unknown:
        raise UserError(f"--{unknown[0]}: not a config field (valid: {', '.join(sorted(table))})")
    return cfg.apply_overrides(cfg.Config(), dict(config_or_fields))


def planned_backend(config, device: str = "cuda") -> str:
    """The backend the plan assumes: the one the run resolved (config.resolved_backend, set by train's check);
    without a run, `backends.choose_backend` for the machine planned for: a GPU (`device` cuda), Unsloth
    where the config asks for it or it is installed here."""
    if config.resolved_backend:
        return config.resolved_backend
    from .. import backends

    machine = backends.Machine(gpu=device == "cuda", unsloth=config.backend == "unsloth" or backends.unsloth_installed(),
                               processes=backends.world_size())
    return backends.choose_backend(config, machine).backend


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
    """The Settings of a config: for a GPU run (`device` "cuda"), or "cpu" to check the model on this machine."""
    from .. import data

    m, g = config.model, config.grpo
    weight_bytes = 4 if (m.dtype == "float32" or (m.dtype == "auto" and device == "cpu")) else 2
    backend = planned_backend(config, device)
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
        "vllm": vllm_bytes(shape, s, vram_gb if vram_gb is not None else DEFAULT_VRAM_GB),
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
        "fits": bool(fits) if fits is not None else total / GIB <= DEFAULT_VRAM_GB,
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
    card = f"{vram_gb:g} GB card" if vram_gb is not None else f"{DEFAULT_VRAM_GB:g} GB card assumed (no --vram)"
    share = f"gpu_memory_utilization {s.vllm_gpu_memory_utilization:g} of a {card}"
    return share + ("; Unsloth shares the training weights with it" if s.vllm == "unsloth"
                    else "; TRL colocate: its own copy of the weights inside")
