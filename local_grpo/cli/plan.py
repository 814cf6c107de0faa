"""`local-grpo plan`: estimate peak GPU memory before anything loads; with --vram, settings that fit."""

from __future__ import annotations

import argparse
import json

from .. import config as config_mod
from ..errors import UserError
from ..plan import as_flags, estimate, gpu_defaults, prompt_check
from .common import add_config_flags, config_from_args

PLAN_FLAGS = ("model", "load-in-4bit", "max-seq-length", "num-generations", "max-completion-length",
              "per-device-train-batch-size", "gradient-accumulation-steps", "lora-r", "beta",
              "gradient-checkpointing", "optim")


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add `plan` to an argparse subparsers object; sets func=run_cli."""
    p = subparsers.add_parser("plan", help="Estimate peak GPU memory for a config; with --vram, settings that fit.",
                              description="Estimate peak GPU memory (GiB) of a GRPO run before anything loads.")
    p.add_argument("--config", metavar="FILE", help="YAML config (flags below override it)")
    p.add_argument("--preset", help="Preset under the config: cpu, 6gb, 8gb, 12gb, 16gb, 24gb")
    add_config_flags(p, only=PLAN_FLAGS)
    p.add_argument("--backend", choices=("auto", "unsloth", "hf"), default=None,
                   help="Backend the plan assumes (auto: unsloth when installed)")
    p.add_argument("--vram", type=float, metavar="GB", help="GPU memory in GiB: say whether it fits, suggest settings")
    p.add_argument("--json", action="store_true", help="Print one JSON object")
    p.set_defaults(func=run_cli)
    return p


def plan_config(args) -> tuple[config_mod.Config, dict | None]:
    """The Config `plan` plans (file, preset, then flags) and the GPU defaults it assumed, if any.

    Without --config or --preset, a GPU question (see plan.gpu_defaults) gets GPU defaults for the
    flags not given instead of the CPU defaults of a bare Config.
    """
    config = config_from_args(args)
    assumed = None
    if not args.config and not args.preset:
        given = {flag for flag in PLAN_FLAGS if getattr(args, "cfg__" + flag.replace("-", "_")) is not None}
        assumed = gpu_defaults(config, given, args.vram)
        if assumed:
            config_mod.apply_overrides(config, assumed["values"])
    return config_mod.validate(config), assumed


def run_cli(args) -> int:
    config, assumed = plan_config(args)
    if args.vram is not None and args.vram <= 0:
        raise UserError(f"--vram: must be a positive number of GB, got {args.vram}")
    prompts = prompt_check(config)  # a prompt over the budget: the same one line as train's, exit 2
    plan = estimate(config, vram_gb=args.vram)
    plan["assumed_defaults"] = assumed
    plan["prompts"] = prompts
    if args.json:
        print(json.dumps(plan))
    else:
        print(format_table(plan))
    return 0


def format_table(plan: dict) -> str:
    b = plan["breakdown"]
    a = b["assumptions"]
    lines = [
        f"Memory plan for {a['model']} ({a['params'] / 1e9:.2f}B params, backend {a['backend']}) — GiB",
        f"  micro-batch {a['micro_batch']} x ({a['prompt_tokens']} prompt + {a['completion_tokens']} completion tokens), "
        f"generation batch {a['generation_batch']}, checkpointing {'on' if a['gradient_checkpointing'] else 'off'}",
        "",
    ]
    rows = [("weights", a["weights"]), ("lora", f"{a['lora_params'] / 1e6:.1f}M params, {a['lora']}"),
            ("optimizer", a["optimizer"]), ("activations", "policy forward/backward"), ("logits", a["logits"]),
            ("kv_cache", f"generation ({a['generation_sequences']} sequences at once)"),
            ("generation_working", "prefill + sampling"), ("reference", a["reference"]), ("vllm", a["vllm"]),
            ("overhead", "CUDA context, allocator, 4-bit dequant buffer")]
    assumed = plan.get("assumed_defaults")
    if assumed:
        lines.insert(2, f"  assumed: {as_flags(assumed['values'])} ({assumed['reason']})")
    prompts = plan.get("prompts")
    if prompts:
        found = (f"longest {prompts['longest']} of {prompts['prompts']} prompts" if prompts["measured"]
                 else f"not measured ({prompts['reason']})")
        lines.insert(-1, f"  prompt budget {prompts['budget']} tokens = max_seq_length - max_completion_length; {found}")
    for key, note in rows:
        lines.append(f"  {key:<20} {b[key + '_gb']:>8.2f}   {note}")
    lines.append(f"  {'total (peak)':<20} {plan['total_gb']:>8.2f}   = static + overhead + peak phase ({b['peak_phase']})")
    if plan["vram_gb"] is not None:
        lines.append("")
        lines.append(f"  {'fits' if plan['fits'] else 'does NOT fit'} in {plan['vram_gb']:g} GB")
    s = plan.get("suggestion")
    if s:
        if s["fits"]:
            lines.append(f"  suggestion (~{s['total_gb']:.2f} GB): {as_flags(s['changes'])}")
        else:
            lines.append(f"  no setting of this model fits {plan['vram_gb']:g} GB (smallest ~{s['total_gb']:.2f} GB): use a smaller model")
    return "\n".join(lines)
