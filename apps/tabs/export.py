"""Export: a finished run as a LoRA adapter, a merged 16-bit model or a GGUF (local_grpo.export, verified)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import gradio as gr

from local_grpo.export import FORMATS, export_run

from apps import runs
from apps.tabs.common import EXPORTS_FOLDER, Studio, user_errors

TITLE, TAB_ID = "Export", "export"


def export(run_dir: str, fmt: str, out_dir: str) -> str:
    """Export run_dir to out_dir in format fmt (verified by reloading); a message of what was written."""
    result = export_run(run_dir, fmt, out_dir)
    details = ", ".join(f"{k}: {v}" for k, v in (result or {}).items()) if isinstance(result, dict) else str(result)
    return f"Exported {os.path.basename(run_dir)} as {fmt} to {out_dir}. {details}".strip()


@dataclass(frozen=True)
class ExportTab:
    """The Export tab's components that events use (Train's start also fills `run`'s choices)."""

    run: gr.Dropdown
    format: gr.Radio
    out: gr.Textbox
    button: gr.Button
    message: gr.Markdown


def layout(studio: Studio) -> ExportTab:
    with gr.Row():
        run = gr.Dropdown(studio.run_choices(), label="Run", allow_custom_value=True)
        fmt = gr.Radio(list(FORMATS), value="lora", label="Format")
        out = gr.Textbox(label="Output folder (inside the runs folder; empty = exports/<run>-<format>)")
    button = gr.Button("Export", variant="primary")
    message = gr.Markdown()
    return ExportTab(run=run, format=fmt, out=out, button=button, message=message)


def wire(studio: Studio, export_tab: ExportTab) -> None:
    @user_errors
    def export_run(run: str, fmt: str, out_folder: str) -> str:
        path = studio.run_path(run)
        out_dir = runs.resolve_under(studio.runs_root, out_folder or f"{EXPORTS_FOLDER}/{os.path.basename(path)}-{fmt}",
                                     "export folder")
        return export(path, fmt, out_dir)

    export_tab.button.click(export_run, [export_tab.run, export_tab.format, export_tab.out], export_tab.message,
                            api_name="export_run")
