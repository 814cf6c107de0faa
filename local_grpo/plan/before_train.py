"""What `train` checks with the plan before anything loads: the memory preflight and the prompt check.

`preflight(config, force)` refuses a run that clearly does not fit the GPU (unless forced);
`prompt_check(config)` holds the run's prompts to the prompt budget the estimate assumes
(data.check_prompt_lengths), when the tokenizer and the data are on this machine. Only `detect_vram_gb`
imports torch (to read the GPU's memory), and `prompt_check` transformers (for the tokenizer).
"""

from __future__ import annotations

import os
import sys

from ..errors import UserError
from .memory import GIB
from .search import as_flags, estimate
from .shapes import converted_embedded_folder, model_shape

REFUSE_MARGIN = 1.15  # preflight refuses only beyond the estimate's +-15 % band: "clearly does not fit"


# --- prompts: the budget model.max_seq_length leaves them ------------------------------------

def local_tokenizer_folder(name: str, gguf_file: str | None = None) -> str | None:
    """Where a model's tokenizer is on this machine with nothing converted or downloaded, or None:
    a local folder, the embedded model once converted, a hub id's Hugging Face cache snapshot."""
    from .. import models

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
    from .. import backends, data

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
        tokenizer = backends.load_tokenizer(folder, config, local_files_only=True)
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
        line += f"; try: {as_flags(s['changes'])} (~{s['total_gb']:.1f} GB)"
    elif s:
        line += "; no setting of this model fits: use a smaller model"
    return line
