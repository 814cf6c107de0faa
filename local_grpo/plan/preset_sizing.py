"""The VRAM presets' sizes, derived from the memory plan, and the GPU defaults of a question asked without one.

`derive_preset(name)` finds each preset's values (local_grpo/presets.py holds the result; tests/test_plan.py
checks they still match); `gpu_defaults` is what `local-grpo plan` assumes for a GPU question asked
without --config or --preset.
"""

from __future__ import annotations

import math

from ..presets import PRESETS
from .memory import DEFAULT_VRAM_GB
from .search import suggest
from .shapes import model_shape

PROMPT_BUDGET = 256  # prompt tokens the presets reserve (max_seq_length = this + max_completion_length)
PRESET_HEADROOM = 0.85  # presets size for 85 % of the card: the estimate's -15 % band, display/other processes

# Reference models for the preset table: one per size class.
SIZE_CLASSES = {
    "0.5B": "Qwen/Qwen2.5-0.5B-Instruct",
    "1.5B": "Qwen/Qwen2.5-1.5B-Instruct",
    "3-4B": "Qwen/Qwen3-4B",
    "7-8B": "meta-llama/Llama-3.1-8B-Instruct",
}

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
    from ..config import Config

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


# --- GPU defaults for a question asked without a preset -------------------------------------

CPU_DEFAULTS_MAX_PARAMS = 1.0e9  # the bare Config's defaults (micro-batch 16, no checkpointing) are sized for the embedded 135M


def matching_preset(vram_gb: float | None) -> str:
    """The VRAM preset for the card a plan answers for: the largest preset card not above `vram_gb`
    (the smallest preset below all of them); without a card, the 24 GB one `fits` is judged against."""
    card = DEFAULT_VRAM_GB if vram_gb is None else vram_gb
    sized = [name for name, (gb, _, _) in PRESET_TARGETS.items() if gb <= card]
    return sized[-1] if sized else next(iter(PRESET_TARGETS))


def gpu_defaults(config, given: set, vram_gb: float | None = None) -> dict | None:
    """GPU defaults for the flags not in `given`, when the question is a GPU one; else None.

    A GPU question: the model has more than CPU_DEFAULTS_MAX_PARAMS parameters, or 4-bit loading
    is asked (4-bit is for GPUs). The defaults: gradient checkpointing on, max_seq_length =
    PROMPT_BUDGET + max_completion_length, and the micro-batch of the preset for the planned card
    (`matching_preset`), with the gradient accumulation that makes the generation batch whole groups.
    """
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
