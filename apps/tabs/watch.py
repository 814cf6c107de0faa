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
CURVE_TITLES = {"reward": "Total reward and each reward's mean", "success": "Success rate (and predicted, with the forecast band)",
                "length": "Completion length", "kl": "KL", "zero_std": "Fraction of zero-std groups",
                "step_time": "Seconds per step: generation, rewards, train, other (stacked)"}
WATCHED_FILES = (rundir.METRICS, rundir.COMPLETIONS, rundir.EVENTS, rundir.SUMMARY, rundir.EVAL_COMPARE, rundir.FORECAST)


def run_signature(path: str, view: str, *choices) -> str:
    """Changes whenever a file the views show changes (the poll sends nothing otherwise)."""
    stamps = []
    for name in WATCHED_FILES:
        try:
            info = os.stat(os.path.join(path, name))
            stamps.append(f"{info.st_mtime_ns}:{info.st_size}")
        except OSError:
            stamps.append("-")
    return f"{path}|{view}|{'|'.join(map(str, choices))}|" + ",".join(stamps)


DEFAULT_SMOOTHING = 5


def curve_views(path: str, metrics: list[dict], smoothing) -> tuple:
    """One plot update per curve panel (smoothed, raw lines faint) and the KL note; the KL plot is hidden
    when the note says why it has nothing to draw."""
    frames = runs.curve_frames(metrics, smoothing=int(smoothing or 1), forecast=rundir.RunDir(path).forecast())
    plots = []
    for panel in runs.PANELS:
        frame = frames[panel]
        colors = runs.curve_colors(frame)
        legend = [s for s in colors if not s.endswith(runs.RAW_SUFFIX)] or None
        plots.append(gr.update(value=frame, color_map=colors or None, colors_in_legend=legend))
    note = runs.kl_note(path, frames["kl"])
    plots[list(runs.PANELS).index("kl")]["visible"] = not note
    return (*plots, gr.update(value=note, visible=bool(note)))


def prompt_views(completions: list[dict], prompt: str | None) -> tuple:
    """The per-prompt panel: the prompt choices (keeping the chosen one), its completions across steps and its curve."""
    choices = runs.prompt_choices(completions)
    values = [value for _label, value in choices]
    chosen = prompt if prompt in values else (values[0] if values else None)
    return (gr.update(choices=choices, value=chosen), runs.prompt_history(completions, chosen or ""),
            runs.prompt_curve(completions, chosen or ""))


def run_views(path: str, view: str, smoothing=DEFAULT_SMOOTHING, prompt: str | None = None):
    """Overview, curve panels, KL note, completions, alerts, eval and the per-prompt panel of one run (through rundir)."""
    run = rundir.RunDir(path)
    metrics, events, completions = run.metrics(), run.events(), run.completions()
    return (runs.run_overview(path, metrics, events), *curve_views(path, metrics, smoothing),
            runs.completions_table(completions, view or "latest"), runs.alerts_table(events),
            runs.eval_compare_table(path), *prompt_views(completions, prompt))


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
                # a step's four phases stack into one bar (one bin per step)
                plot, extra = (gr.BarPlot, {"x_bin": 1, "y_aggregate": "sum"}) if panel == "step_time" else (gr.LinePlot, {})
                plots[panel] = plot(None, x="step", y="value", color="series", title=CURVE_TITLES[panel],
                                    height=240, elem_id=f"curve-{panel}", **extra)
                if panel == "kl":
                    kl_note = gr.Markdown(visible=False, elem_id="kl-note")
    smoothing = gr.Slider(1, 25, value=DEFAULT_SMOOTHING, step=1, label="Smoothing: moving average over N logged steps "
                          "(1 = off; the raw line stays faint)", elem_id="smoothing")
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
    with gr.Accordion("One prompt across steps", open=True):
        with gr.Row():
            prompt = gr.Dropdown([], label="Prompt (most often logged first)", allow_custom_value=True, scale=3,
                                 elem_id="watch-prompt")
            prompt_plot = gr.LinePlot(None, x="step", y="value", color="series", title="This prompt per step",
                                      height=200, y_lim=[0, None], scale=2, elem_id="prompt-curve")
        prompt_df = gr.Dataframe(label="Its completions, oldest step first", wrap=True, max_height=420,
                                 interactive=False, elem_id="prompt-history")
    signature = gr.State("")
    timer = gr.Timer(POLL_SECONDS)
    return SimpleNamespace(**{k: v for k, v in locals().items() if k not in ("studio", "row_panels", "panel")})


def wire(studio: Studio, ui: SimpleNamespace) -> None:
    w = ui.watch
    curve_outputs = [*[w.plots[p] for p in runs.PANELS], w.kl_note]
    prompt_outputs = [w.prompt, w.prompt_df, w.prompt_plot]
    view_outputs = [w.overview, *curve_outputs, w.completions_df, w.alerts_df, w.eval_df, *prompt_outputs]
    view_inputs = [w.watch_run, w.view, w.smoothing, w.prompt]

    def list_runs():
        table = runs.runs_table(studio.runs_root)
        return table, gr.update(choices=list(table["run"]))

    @user_errors
    def load_run(run: str, view: str, smoothing, prompt):
        path = studio.run_path(run)
        return (*run_views(path, view, smoothing, prompt), weights_text(path),
                run_signature(path, view, smoothing, prompt))

    @user_errors
    def smooth_curves(run: str, smoothing):
        path = studio.run_path(run)
        return curve_views(path, rundir.RunDir(path).metrics(), smoothing)

    @user_errors
    def prompt_history(run: str, prompt: str):
        completions = rundir.RunDir(studio.run_path(run)).completions()
        return runs.prompt_history(completions, prompt or ""), runs.prompt_curve(completions, prompt or "")

    def refresh_run(run: str, view: str, smoothing, prompt, last_signature: str):
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
        signature = run_signature(path, view, smoothing, prompt)
        if signature == last_signature:
            return nothing
        same_run = (last_signature or "").split("|", 1)[0] == path
        return (*run_views(path, view, smoothing, prompt), gr.skip() if same_run else weights_text(path), signature)

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
    w.watch_run.change(load_run, view_inputs, outputs, api_name="load_run")
    w.view.change(load_run, view_inputs, outputs, api_name="load_run_view")
    w.smoothing.release(smooth_curves, [w.watch_run, w.smoothing], curve_outputs, api_name="smooth_curves")
    w.prompt.input(prompt_history, [w.watch_run, w.prompt], [w.prompt_df, w.prompt_plot], api_name="prompt_history")
    w.timer.tick(refresh_run, [*view_inputs, w.signature], outputs, api_name="refresh_run", show_progress="hidden")
    w.weights_btn.click(set_weights, [w.watch_run, w.weights], w.weights_message, api_name="set_weights")
