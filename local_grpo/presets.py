"""Presets: named partial configs for a machine class, applied under a user's own values.

`cpu` is the embedded quickstart on a laptop CPU. The VRAM presets assume a 4-bit base with
LoRA, gradient checkpointing and 8-bit AdamW on a single consumer GPU; their values come from the
memory planner (`local_grpo.plan.derive_preset`), and the comment on each says which model sizes it
fits. `local-grpo plan --vram GB` checks (and sizes) any other config.
"""

from __future__ import annotations

import copy

from .errors import UserError

PRESETS: dict[str, dict] = {
    "cpu": {
        "model": {"load_in_4bit": False, "dtype": "float32", "max_seq_length": 256},
        "grpo": {
            "num_generations": 8,
            "per_device_train_batch_size": 16,
            "max_completion_length": 64,
            "gradient_checkpointing": False,
            "optim": "adamw_torch_fused",
        },
    },
    # Derived by `local_grpo.plan.derive_preset(name)` (HF backend, 85 % of the card, 256-token prompts);
    # tests/test_plan.py checks each still fits its documented model sizes. Fits (4-bit, LoRA):
    "6gb": {  # models up to ~1.5B
        "model": {"load_in_4bit": True, "max_seq_length": 1280},
        "lora": {"r": 16, "alpha": 32},
        "grpo": {"num_generations": 8, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
                 "max_completion_length": 1024, "gradient_checkpointing": True, "optim": "adamw_8bit"},
    },
    "8gb": {  # models up to ~4B (Qwen3-4B, Llama-3.2-3B, Phi-4-mini)
        "model": {"load_in_4bit": True, "max_seq_length": 1280},
        "lora": {"r": 16, "alpha": 32},
        "grpo": {"num_generations": 8, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
                 "max_completion_length": 1024, "gradient_checkpointing": True, "optim": "adamw_8bit"},
    },
    "12gb": {  # models up to ~4B with 2048-token completions
        "model": {"load_in_4bit": True, "max_seq_length": 2304},
        "lora": {"r": 16, "alpha": 32},
        "grpo": {"num_generations": 8, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
                 "max_completion_length": 2048, "gradient_checkpointing": True, "optim": "adamw_8bit"},
    },
    "16gb": {  # models up to ~8B (Llama-3.1-8B, Qwen3-8B, Qwen2.5-7B)
        "model": {"load_in_4bit": True, "max_seq_length": 2304},
        "lora": {"r": 16, "alpha": 32},
        "grpo": {"num_generations": 8, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
                 "max_completion_length": 2048, "gradient_checkpointing": True, "optim": "adamw_8bit"},
    },
    "24gb": {  # models up to ~8B with a micro-batch of 8
        "model": {"load_in_4bit": True, "max_seq_length": 2304},
        "lora": {"r": 16, "alpha": 32},
        "grpo": {"num_generations": 8, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
                 "max_completion_length": 2048, "gradient_checkpointing": True, "optim": "adamw_8bit"},
    },
}


def apply_preset(name: str, data: dict | None = None, source: str = "--preset") -> dict:
    """Return `data` (a config dict) laid over preset `name`; `data` wins where both set a key."""
    if name not in PRESETS:
        raise UserError(f"{source}: preset {name!r} is not one of {', '.join(PRESETS)}")
    merged = copy.deepcopy(PRESETS[name])
    for key, value in (data or {}).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    merged["preset"] = name
    return merged
