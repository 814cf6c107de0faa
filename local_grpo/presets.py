"""Presets: named partial configs for a machine class, applied under a user's own values.

`cpu` is the embedded quickstart on a laptop CPU. The VRAM presets assume a 4-bit base with
LoRA and gradient checkpointing on a single consumer GPU, sized for models up to ~1.5B
parameters; `local-grpo plan --vram GB` checks (and sizes) a config for a bigger model.
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
            "optim": "adamw_torch",
        },
    },
    "6gb": {
        "model": {"load_in_4bit": True, "max_seq_length": 768},
        "grpo": {"num_generations": 4, "per_device_train_batch_size": 4, "max_completion_length": 512,
                 "gradient_checkpointing": True, "optim": "adamw_8bit"},
    },
    "8gb": {
        "model": {"load_in_4bit": True, "max_seq_length": 1024},
        "grpo": {"num_generations": 6, "per_device_train_batch_size": 6, "max_completion_length": 768,
                 "gradient_checkpointing": True, "optim": "adamw_8bit"},
    },
    "12gb": {
        "model": {"load_in_4bit": True, "max_seq_length": 1280},
        "grpo": {"num_generations": 8, "per_device_train_batch_size": 8, "max_completion_length": 1024,
                 "gradient_checkpointing": True, "optim": "adamw_8bit"},
    },
    "16gb": {
        "model": {"load_in_4bit": True, "max_seq_length": 1792},
        "grpo": {"num_generations": 8, "per_device_train_batch_size": 8, "max_completion_length": 1536,
                 "gradient_checkpointing": True, "optim": "adamw_8bit"},
    },
    "24gb": {
        "model": {"load_in_4bit": True, "max_seq_length": 2304},
        "grpo": {"num_generations": 8, "per_device_train_batch_size": 16, "max_completion_length": 2048,
                 "gradient_checkpointing": True, "optim": "adamw_8bit"},
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
