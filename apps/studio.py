"""The studio: four tabs (Design rewards, Train, Watch, Export), one module each under apps/tabs/.

`build_app(runs_root)` returns the gr.Blocks. Every event has an `api_name`, so gradio_client can
call it (see docs/app.md). Handlers turn a UserError into gr.Error (one clear message); user
reward code is scored in child processes (apps.designer), runs train in their own process
(apps.launcher) and the rewards check samples the base model in its own (apps.checks); the app
itself only reads run-directory files (through local_grpo.rundir) and the check's sample cache, and
writes control.json.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import gradio as gr

from apps.tabs import design, export, train, watch
from apps.tabs.common import Studio

TABS = (("Design rewards", "design", design), ("Train", "train", train), ("Watch", "watch", watch),
        ("Export", "export", export))


def build_app(runs_root: str) -> gr.Blocks:
    """The studio for the run directories under runs_root (created when missing)."""
    studio = Studio(os.path.realpath(runs_root))
    os.makedirs(studio.runs_root, exist_ok=True)
    ui = SimpleNamespace()
    with gr.Blocks(title="local-grpo studio") as app:
        gr.Markdown(f"## local-grpo studio\nRuns folder: `{studio.runs_root}`")
        with gr.Tabs() as ui.tabs:
            for title, tab_id, module in TABS:
                with gr.Tab(title, id=tab_id):
                    setattr(ui, tab_id, module.layout(studio))
        for _title, _tab_id, module in TABS:  # events (every one named for gradio_client)
            module.wire(studio, ui)
    return app
