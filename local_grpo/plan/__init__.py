"""The memory planner: peak GPU memory of a GRPO run before anything loads, one job a module.

    shapes.py         the model-shape table, and a model's shape from its config.json (`model_shape`)
    memory.py         the memory model: a config's `Settings`, the terms, `estimate_shape`
    search.py         `estimate(config, vram_gb)`, and the largest settings that fit a card (`suggest`)
    preset_sizing.py  the VRAM presets derived from the plan (`derive_preset`), and `gpu_defaults`
    before_train.py   what `train` runs first: `preflight` (refuse a clear misfit) and `prompt_check`

Each imports only the ones above it in this list (an import-linter contract). The `plan` command is
local_grpo/cli/plan.py. The package must stay instant to import: no torch, transformers or trl at
module level. Units: "GB" in the plan, its JSON and its table means GiB (2**30 bytes), the unit torch
and nvidia-smi report, and the unit the 6gb/8gb/... presets are named in.
"""

from __future__ import annotations

from .before_train import detect_vram_gb, preflight, prompt_check
from .memory import Settings, prompts_per_generate, sampling_batch_limit, settings_of
from .preset_sizing import PRESET_HEADROOM, PRESET_TARGETS, SIZE_CLASSES, derive_preset, gpu_defaults
from .search import as_flags, estimate, suggest
from .shapes import MODEL_TABLE, Shape, UnknownShape, model_shape

__all__ = [
    "MODEL_TABLE", "PRESET_HEADROOM", "PRESET_TARGETS", "SIZE_CLASSES", "Settings", "Shape", "UnknownShape",
    "as_flags", "derive_preset", "detect_vram_gb", "estimate", "gpu_defaults", "model_shape", "preflight",
    "prompt_check", "prompts_per_generate", "sampling_batch_limit", "settings_of", "suggest",
]
