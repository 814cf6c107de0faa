"""Export: a finished run as a LoRA adapter, a merged 16-bit model or a GGUF (local_grpo.export, verified)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import gradio as gr

from local_grpo.export import FORMATS, export_run

from apps import runs
from apps.tabs.common import EXPORTS_FOLDER, Studio, user_errors


def export(run_dir: str, fmt: str, out_dir: str) -> str:
    """Export run_dir to out_dir in format fmt (verified by reloading); a message of what was written."""
    result = export_run(run_dir, fmt, out_dir)
    details = ", ".join(f"{k}: {v}" for k, v in (result or {}).items()) if isinstance(result, dict) else str(result)
    return f"Exported {os.path.basename(run_dir)} as {fmt} to {out_dir}. {details}".strip()


def layout(studio: Studio) -> SimpleNamespace:
    with gr.Row():
        export_run_name = gr.Dropdown(studio.run_choices(), label="Run", allow_custom_value=True)
        export_format = gr.Radio(list(FORMATS), value="lora", label="Format")
        export_out = gr.Textbox(label="Output folder (inside the runs folder; empty = exports/<run>-<format>)")
    export_btn = gr.Button("Export", variant="primary")
    export_message = gr.Markdown()
    return SimpleNamespace(**{k: v for k, v in locals().items() if k != "studio"})


def wire(studio: Studio, ui: SimpleNamespace) -> None:
    e = ui.export

    @user_errors
    def export_run(run: str, fmt: str, out_folder: str) -> str:
        path = studio.run_path(run)
        out_dir = runs.resolve_under(studio.runs_root, out_folder or f"{EXPORTS_FOLDER}/{os.path.basename(path)}-{fmt}",
                                     "export folder")
        return export(path, fmt, out_dir)

    e.export_btn.click(export_run, [e.export_run_name, e.export_format, e.export_out], e.export_message,
                       api_name="export_run")
