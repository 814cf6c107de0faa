"""The studio: four tabs (Design rewards, Train, Watch, Export), one module each under apps/tabs/.

`build_app(runs_root)` returns the gr.Blocks. Every event has an `api_name`, so gradio_client can
call it (see docs/app.md). Handlers turn a UserError into gr.Error (one clear message); user
reward code is scored in child processes (apps.designer), runs train in their own process
(apps.launcher) and the rewards check samples the base model in its own (apps.checks); the app
itself only reads run-directory files (through local_grpo.rundir) and the check's sample cache, and
writes control.json.

Each tab's `layout(studio)` returns its record (a frozen dataclass of the components its events use);
the wiring below hands a tab's `wire` the other tabs' records it needs, by parameter.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import gradio as gr

from apps.tabs import design, export, train, watch
from apps.tabs.common import Studio


@dataclass(frozen=True)
class StudioUI:
    """The built app and every tab's record."""

    app: gr.Blocks
    tabs: gr.Tabs
    design: design.DesignTab
    train: train.TrainTab
    watch: watch.WatchTab
    export: export.ExportTab


def build_studio(runs_root: str) -> StudioUI:
    """The studio for the run directories under runs_root (created when missing), with its tabs' records."""
    studio = Studio(os.path.realpath(runs_root))
    os.makedirs(studio.runs_root, exist_ok=True)
    with gr.Blocks(title="local-grpo studio") as app:
        gr.Markdown(f"## local-grpo studio\nRuns folder: `{studio.runs_root}`")
        with gr.Tabs() as tabs:
            with gr.Tab(design.TITLE, id=design.TAB_ID):
                design_tab = design.layout(studio)
            with gr.Tab(train.TITLE, id=train.TAB_ID):
                train_tab = train.layout(studio)
            with gr.Tab(watch.TITLE, id=watch.TAB_ID):
                watch_tab = watch.layout(studio)
            with gr.Tab(export.TITLE, id=export.TAB_ID):
                export_tab = export.layout(studio)
        design.wire(studio, design_tab, train=train_tab, tabs=tabs)
        train.wire(studio, train_tab, watch=watch_tab, export=export_tab)
        watch.wire(studio, watch_tab)
        export.wire(studio, export_tab)
    return StudioUI(app=app, tabs=tabs, design=design_tab, train=train_tab, watch=watch_tab, export=export_tab)


def build_app(runs_root: str) -> gr.Blocks:
    """The studio for the run directories under runs_root (created when missing)."""
    return build_studio(runs_root).app
