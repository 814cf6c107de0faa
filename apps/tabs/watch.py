"""Watch: a run's curves, completions, alerts and eval, refreshed while it trains; live reward weights.

A completion record becomes table text in one place, apps.runs.completion_text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import gradio as gr

from local_grpo import forecast, rundir
from local_grpo.errors import UserError

from apps import launcher, runs
from apps.tabs.common import Studio, parse_weights, user_errors

TITLE, TAB_ID = "Watch", "watch"
POLL_SECONDS = 2.0
CURVE_TITLES = {"reward": "Total reward and each reward's mean",
                "success": "Success rate; the forecast's band, and its point where it may be shown",
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


@dataclass(frozen=True)
class WatchTab:
    """The Watch tab's components that events use (Train's start also sets `run`; its console polls on `timer`).

    The `*_outputs` lists fix the order of each event's outputs, which is the order gradio_client returns them in.
    """

    run: gr.Dropdown
    refresh_btn: gr.Button
    runs_list: gr.Dataframe
    overview: gr.Markdown
    curves: dict[str, gr.LinePlot | gr.BarPlot]  # one per runs.PANELS
    kl_note: gr.Markdown
    smoothing: gr.Slider
    view: gr.Radio
    completions: gr.Dataframe
    alerts: gr.Dataframe
    evals: gr.Dataframe
    weights: gr.Textbox
    weights_btn: gr.Button
    weights_message: gr.Markdown
    prompt: gr.Dropdown
    prompt_curve: gr.LinePlot
    prompt_history: gr.Dataframe
    signature: gr.State
    timer: gr.Timer

    @property
    def curve_outputs(self) -> list:
        return [*(self.curves[panel] for panel in runs.PANELS), self.kl_note]

    @property
    def prompt_outputs(self) -> list:
        return [self.prompt, self.prompt_history, self.prompt_curve]

    @property
    def run_outputs(self) -> list:
        """Every view of a run, then the weights box and the poll's signature."""
        return [self.overview, *self.curve_outputs, self.completions, self.alerts, self.evals, *self.prompt_outputs,
                self.weights, self.signature]


def forecast_view(metrics: list[dict], completions: list[dict]):
    """The success forecast's verdict at the last logged step (local_grpo.forecast's rule), None without one."""
    return forecast.judge_logged(metrics, forecast.success_counts(completions))


def curve_views(watch: WatchTab, path: str, metrics: list[dict], smoothing, verdict) -> dict:
    """One plot update per curve panel (smoothed, raw lines faint) and the KL note; the KL plot is hidden
    when the note says why it has nothing to draw. `verdict`: `forecast_view`, which gates the forecast ahead."""
    frames = runs.curve_frames(metrics, smoothing=int(smoothing or 1), forecast=rundir.RunDir(path).forecast(),
                               verdict=verdict)
    views = {}
    for panel in runs.PANELS:
        frame = frames[panel]
        colors = runs.curve_colors(frame)
        legend = [s for s in colors if not s.endswith(runs.RAW_SUFFIX)] or None
        views[watch.curves[panel]] = gr.update(value=frame, color_map=colors or None, colors_in_legend=legend)
    note = runs.kl_note(path, frames["kl"])
    views[watch.curves["kl"]]["visible"] = not note
    views[watch.kl_note] = gr.update(value=note, visible=bool(note))
    return views


def prompt_views(watch: WatchTab, completions: list[dict], prompt: str | None) -> dict:
    """The per-prompt panel: the prompt choices (keeping the chosen one), its completions across steps and its curve."""
    choices = runs.prompt_choices(completions)
    values = [value for _label, value in choices]
    chosen = prompt if prompt in values else (values[0] if values else None)
    return {watch.prompt: gr.update(choices=choices, value=chosen),
            watch.prompt_history: runs.prompt_history(completions, chosen or ""),
            watch.prompt_curve: runs.prompt_curve(completions, chosen or "")}


def run_views(watch: WatchTab, path: str, view: str, smoothing=DEFAULT_SMOOTHING, prompt: str | None = None) -> dict:
    """Overview, curve panels, KL note, completions, alerts, eval and the per-prompt panel of one run (through rundir)."""
    run = rundir.RunDir(path)
    metrics, events, completions = run.metrics(), run.events(), run.completions()
    verdict = forecast_view(metrics, completions)
    return {watch.overview: runs.run_overview(path, metrics, events, verdict),
            **curve_views(watch, path, metrics, smoothing, verdict),
            watch.completions: runs.completions_table(completions, view or "latest"),
            watch.alerts: runs.alerts_table(events), watch.evals: runs.eval_compare_table(path),
            **prompt_views(watch, completions, prompt)}


def weights_text(path: str) -> str:
    return "\n".join(f"{k}: {v:g}" for k, v in runs.configured_weights(path).items())


def layout(studio: Studio) -> WatchTab:
    with gr.Row():
        run = gr.Dropdown(studio.run_choices(), label="Run", allow_custom_value=True, scale=3, elem_id="watch-run")
        refresh_btn = gr.Button("Refresh run list", scale=1)
    runs_list = gr.Dataframe(runs.runs_table(studio.runs_root), label="Runs", max_height=200, interactive=False)
    overview = gr.Markdown(elem_id="run-overview")
    curves = {}
    panel_names = list(runs.PANELS)
    for row_panels in (panel_names[:3], panel_names[3:]):
        with gr.Row():
            for panel in row_panels:
                # a step's four phases stack into one bar (one bin per step)
                plot, extra = (gr.BarPlot, {"x_bin": 1, "y_aggregate": "sum"}) if panel == "step_time" else (gr.LinePlot, {})
                curves[panel] = plot(None, x="step", y="value", color="series", title=CURVE_TITLES[panel],
                                     height=240, elem_id=f"curve-{panel}", **extra)
                if panel == "kl":
                    kl_note = gr.Markdown(visible=False, elem_id="kl-note")
    smoothing = gr.Slider(1, 25, value=DEFAULT_SMOOTHING, step=1, label="Smoothing: moving average over N logged steps "
                          "(1 = off; the raw line stays faint)", elem_id="smoothing")
    view = gr.Radio(list(runs.COMPLETION_VIEWS), value="latest", label="Completions")
    completions = gr.Dataframe(label="Completions (prompt, answer, per-reward scores, total)", wrap=True,
                               max_height=420, interactive=False, elem_id="completions")
    with gr.Row():
        with gr.Column(scale=3):
            alerts = gr.Dataframe(label="Alerts and events (events.jsonl)", wrap=True, max_height=260,
                                  interactive=False)
        with gr.Column(scale=2):
            evals = gr.Dataframe(label="Base vs trained (eval_compare.json)", interactive=False)
            weights = gr.Textbox(label="Reward weights (live: applied at the next step)", lines=3)
            weights_btn = gr.Button("Apply weights")
            weights_message = gr.Markdown()
    with gr.Accordion("One prompt across steps", open=True):
        with gr.Row():
            prompt = gr.Dropdown([], label="Prompt (most often logged first)", allow_custom_value=True, scale=3,
                                 elem_id="watch-prompt")
            prompt_curve = gr.LinePlot(None, x="step", y="value", color="series", title="This prompt per step",
                                       height=200, y_lim=[0, None], scale=2, elem_id="prompt-curve")
        prompt_history = gr.Dataframe(label="Its completions, oldest step first", wrap=True, max_height=420,
                                      interactive=False, elem_id="prompt-history")
    return WatchTab(run=run, refresh_btn=refresh_btn, runs_list=runs_list, overview=overview, curves=curves,
                    kl_note=kl_note, smoothing=smoothing, view=view, completions=completions, alerts=alerts,
                    evals=evals, weights=weights, weights_btn=weights_btn, weights_message=weights_message,
                    prompt=prompt, prompt_curve=prompt_curve, prompt_history=prompt_history,
                    signature=gr.State(""), timer=gr.Timer(POLL_SECONDS))


def wire(studio: Studio, watch: WatchTab) -> None:
    view_inputs = [watch.run, watch.view, watch.smoothing, watch.prompt]

    def list_runs():
        table = runs.runs_table(studio.runs_root)
        return {watch.runs_list: table, watch.run: gr.update(choices=list(table["run"]))}

    @user_errors
    def load_run(run: str, view: str, smoothing, prompt):
        path = studio.run_path(run)
        return {**run_views(watch, path, view, smoothing, prompt), watch.weights: weights_text(path),
                watch.signature: run_signature(path, view, smoothing, prompt)}

    @user_errors
    def smooth_curves(run: str, smoothing):
        run_dir = rundir.RunDir(studio.run_path(run))
        metrics = run_dir.metrics()
        return curve_views(watch, run_dir.path, metrics, smoothing, forecast_view(metrics, run_dir.completions()))

    @user_errors
    def prompt_history(run: str, prompt: str):
        completions = rundir.RunDir(studio.run_path(run)).completions()
        return {watch.prompt_history: runs.prompt_history(completions, prompt or ""),
                watch.prompt_curve: runs.prompt_curve(completions, prompt or "")}

    def refresh_run(run: str, view: str, smoothing, prompt, last_signature: str):
        """The Timer's poll: new views only when a run file changed (else nothing is sent).

        The weights box is filled only when the run itself changed, so a user's edit is not overwritten.
        """
        if not run:
            return gr.skip()
        try:
            path = studio.run_path(run)
        except UserError:
            return gr.skip()
        signature = run_signature(path, view, smoothing, prompt)
        if signature == last_signature:
            return gr.skip()
        same_run = (last_signature or "").split("|", 1)[0] == path
        return {**run_views(watch, path, view, smoothing, prompt),
                watch.weights: gr.skip() if same_run else weights_text(path), watch.signature: signature}

    @user_errors
    def set_weights(run: str, weights_text: str) -> str:
        path = studio.run_path(run)
        control = launcher.write_weights(path, parse_weights(weights_text, "weights"))
        status = runs.run_status(path)
        note = "the trainer applies them at its next step and records a weights_changed event" if status == "running" \
            else f"the run is {status}; they apply if it is resumed"
        return f"Wrote `{os.path.join(path, rundir.CONTROL)}` = `{control}` — {note}."

    watch.refresh_btn.click(list_runs, None, [watch.runs_list, watch.run], api_name="list_runs")
    watch.run.change(load_run, view_inputs, watch.run_outputs, api_name="load_run")
    watch.view.change(load_run, view_inputs, watch.run_outputs, api_name="load_run_view")
    watch.smoothing.release(smooth_curves, [watch.run, watch.smoothing], watch.curve_outputs, api_name="smooth_curves")
    watch.prompt.input(prompt_history, [watch.run, watch.prompt], [watch.prompt_history, watch.prompt_curve],
                       api_name="prompt_history")
    watch.timer.tick(refresh_run, [*view_inputs, watch.signature], watch.run_outputs, api_name="refresh_run",
                     show_progress="hidden")
    watch.weights_btn.click(set_weights, [watch.run, watch.weights], watch.weights_message, api_name="set_weights")
