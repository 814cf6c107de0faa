"""The plan of a config, and the search for the largest settings that fit a card.

`estimate(config, vram_gb)` is the memory model's plan for a config (a Config, a config dict or
{flag-name: value}), with the suggestion `suggest` finds when it does not fit; `as_flags` spells a
suggestion's changes as the flags `train` and `plan` take.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from .memory import ADAMW_8BIT_STATE_BYTES, config_from, estimate_shape, optimizer_bytes_per_param, settings_of
from .shapes import Shape, model_shape


def estimate(config_or_fields: Any = None, vram_gb: float | None = None, *, device: str = "cuda",
             suggest_settings: bool = True, shape: Shape | None = None) -> dict:
    """Peak-memory plan for a config; with `vram_gb`, also the largest settings that fit (if it does not)."""
    config = config_from(config_or_fields)
    if vram_gb is not None and (not isinstance(vram_gb, (int, float)) or vram_gb <= 0):
        raise UserError(f"--vram: must be a positive number of GB, got {vram_gb!r}")
    shape = shape or model_shape(config.model.name)
    plan = estimate_shape(shape, settings_of(config, device), vram_gb)
    if vram_gb is not None and suggest_settings and not plan["fits"]:
        plan["suggestion"] = suggest(config, vram_gb, shape=shape, device=device)
    return plan


# --- the search ------------------------------------------------------------------------------

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
    from .. import data

    config = config_from(config_or_fields)
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
        """A copy of `config` with these settings (and the backend the run resolved, if it did)."""
        from .. import config as cfg

        return cfg.apply_overrides(copy.deepcopy(config), self.overrides(prompt_tokens))


def as_flags(values: dict) -> str:
    """{flag-name: value} as command-line flags: --name value, and --name / --no-name for booleans."""
    return " ".join(_flag(name, value) for name, value in values.items())


def _flag(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return f"--{name}" if value else f"--no-{name}"
    return f"--{name} {value}"
