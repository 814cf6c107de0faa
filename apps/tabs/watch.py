"""Watch: a run's curves, completions, alerts and eval, refreshed while it trains; live reward weights."""

from __future__ import annotations

import os
from types import SimpleNamespace

import gradio as gr

from local_grpo import rundir
from local_grpo.errors import UserError

from apps import launcher, runs
from apps.tabs.common import Studio, user_errors
from apps.tabs.train import parse_weights

POLL_SECONDS = 2.0
CURVE_TITLES = {"reward": "Total reward and each reward's mean", "success": "Success rate (and predicted)",
                "length": "Completion length", "kl": "KL", "zero_std": "Fraction of zero-std groups"}
WATCHED_FILES = (rundir.METRICS, rundir.COMPLETIONS, rundir.EVENTS, rundir.SUMMARY, rundir.EVAL_COMPARE)


def run_signature(path: str, view: str) -> str:
    """Changes whenever a file the views show changes (the poll sends nothing otherwise)."""
    stamps = []
    for name in WATCHED_FILES:
        try:
            info = os.stat(os.path.join(path, name))
            stamps.append(f"{info.st_mtime_ns}:{info.st_size}")
        except OSError:
            stamps.append("-")
    return f"{path}|{view}|" + ",".join(stamps)


def run_views(path: str, view: str):
    """Overview, one frame per curve panel, completions, alerts and eval of one run, read through rundir."""
    run = rundir.RunDir(path)
    metrics, events = run.metrics(), run.events()
    frames = runs.curve_frames(metrics)
    return (runs.run_overview(path, metrics, events), *[frames[p] for p in runs.PANELS],
            runs.completions_table(run.completions(), view or "latest"), runs.alerts_table(events),
            runs.eval_compare_table(path))


def weights_text(path: str) -> str:
    return "\n".join(f"{k}: {v:g}" for k, v in runs.configured_weights(path).items())


def layout(studio: Studio) -> SimpleNamespace:
    with gr.Row():
        watch_run = gr.Dropdown(studio.run_choices(), label="Run", allow_custom_value=True, scale=3, elem_id="watch-run")
        refresh_btn = gr.Button("Refresh run list", scale=1)
    runs_list = gr.Dataframe(runs.runs_table(studio.runs_root), label="Runs", max_height=200, interactive=False)
    overview = gr.Markdown(elem_id="run-overview")
    plots = {}
    panel_names = list(runs.PANELS)
    for row_panels in (panel_names[:3], panel_names[3:]):
        with gr.Row():
            for panel in row_panels:
                plots[panel] = gr.LinePlot(None, x="step", y="value", color="series", title=CURVE_TITLES[panel],
                                           height=240, elem_id=f"curve-{panel}")
    view = gr.Radio(list(runs.COMPLETION_VIEWS), value="latest", label="Completions")
    completions_df = gr.Dataframe(label="Completions (prompt, answer, per-reward scores, total)", wrap=True,
                                  max_height=420, interactive=False, elem_id="completions")
    with gr.Row():
        with gr.Column(scale=3):
            alerts_df = gr.Dataframe(label="Alerts and events (events.jsonl)", wrap=True, max_height=260,
                                     interactive=False)
        with gr.Column(scale=2):
            eval_df = gr.Dataframe(label="Base vs trained (eval_compare.json)", interactive=False)
            weights = gr.Textbox(label="Reward weights (live: applied at the next step)", lines=3)
            weights_btn = gr.Button("Apply weights")
            weights_message = gr.Markdown()
    signature = gr.State("")
    timer = gr.Timer(POLL_SECONDS)
    return SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("studio", "row_panels", "panel")})


def wire(studio: Studio, ui: SimpleNamespace) -> None:
    w = ui.watch
    view_outputs = [w.overview, *[w.plots[p] for p in runs.PANELS], w.completions_df, w.alerts_df, w.eval_df]

    def list_runs():
        table = runs.runs_table(studio.runs_root)
        return table, gr.update(choices=list(table["run"]))

    @user_errors
    def load_run(run: str, view: str):
        path = studio.run_path(run)
        return (*run_views(path, view), weights_text(path), run_signature(path, view))

    def refresh_run(run: str, view: str, last_signature: str):
        """The Timer's poll: new views only when a run file changed (else nothing is sent).

        The weights box is filled only when the run itself changed, so a user's edit is not overwritten.
        """
        nothing = (gr.skip(),) * (len(view_outputs) + 2)
        if not run:
            return nothing
        try:
            path = studio.run_path(run)
        except UserError:
            return nothing
        signature = run_signature(path, view)
        if signature == last_signature:
            return nothing
        same_run = (last_signature or "").split("|", 1)[0] == path
        return (*run_views(path, view), gr.skip() if same_run else weights_text(path), signature)

    @user_errors
    def set_weights(run: str, weights_text: str) -> str:
        path = studio.run_path(run)
        control = launcher.write_weights(path, parse_weights(weights_text, "weights"))
        status = runs.run_status(path)
        note = "the trainer applies them at its next step and records a weights_changed event" if status == "running" \
            else f"the run is {status}; they apply if it is resumed"
        return f"Wrote `{os.path.join(path, rundir.CONTROL)}` = `{control}` — {note}."

    outputs = [*view_outputs, w.weights, w.signature]
    w.refresh_btn.click(list_runs, None, [w.runs_list, w.watch_run], api_name="list_runs")
    w.watch_run.change(load_run, [w.watch_run, w.view], outputs, api_name="load_run")
    w.view.change(load_run, [w.watch_run, w.view], outputs, api_name="load_run_view")
    w.timer.tick(refresh_run, [w.watch_run, w.view, w.signature], outputs, api_name="refresh_run",
                 show_progress="hidden")
    w.weights_btn.click(set_weights, [w.watch_run, w.weights], w.weights_message, api_name="set_weights")
