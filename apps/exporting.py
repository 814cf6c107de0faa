"""Export a finished run: the export module's `export_run` when installed, else a copy of the adapter.

Both paths are resolved under the app's runs folder by the caller (apps.runs.resolve_under).
"""

from __future__ import annotations

import importlib
import os
import shutil

from local_grpo import rundir
from local_grpo.errors import UserError

FORMATS = ("lora", "merged16", "gguf")


def export(run_dir: str, fmt: str, out_dir: str) -> str:
    """Export run_dir to out_dir in format fmt; returns a one-paragraph message of what was written."""
    if fmt not in FORMATS:
        raise UserError(f"format: {fmt!r} is not one of {', '.join(FORMATS)}")
    adapter = os.path.join(run_dir, rundir.ADAPTER)
    if not os.path.isdir(adapter):
        raise UserError(f"run: {os.path.basename(run_dir)} has no adapter/ yet (is it finished?)")
    try:
        export_module = importlib.import_module("local_grpo.export")
    except ImportError:
        export_module = None
    if export_module is not None and hasattr(export_module, "export_run"):
        result = export_module.export_run(run_dir, fmt, out_dir)
        details = ", ".join(f"{k}: {v}" for k, v in (result or {}).items()) if isinstance(result, dict) else str(result)
        return f"Exported {os.path.basename(run_dir)} as {fmt} to {out_dir}. {details}".strip()
    if fmt != "lora":
        raise UserError(f"format: {fmt} needs local_grpo.export, which is not installed yet; use lora")
    if os.path.exists(out_dir) and os.listdir(out_dir):
        raise UserError(f"export folder: {out_dir} exists and is not empty; choose another")
    shutil.copytree(adapter, out_dir, dirs_exist_ok=True)
    files = sorted(os.listdir(out_dir))
    return f"Copied the LoRA adapter of {os.path.basename(run_dir)} to {out_dir} ({', '.join(files)})."
