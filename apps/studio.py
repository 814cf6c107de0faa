"""The studio's layout: four tabs (Design rewards, Train, Watch, Export) wired to apps.* functions.

`build_app(runs_root)` returns the gr.Blocks. Every event has an `api_name`, so gradio_client can
call it (see docs/app.md). Handlers turn a UserError into gr.Error (one clear message); user
reward code is scored in child processes (apps.designer) and runs train in their own process
(apps.launcher); the app itself only reads run-directory files and writes control.json.
"""

from __future__ import annotations

import dataclasses
import os
import time

import gradio as gr

from local_grpo import config as config_mod
from local_grpo import rundir
from local_grpo.errors import UserError
from local_grpo.presets import PRESETS
from local_grpo.rundir import read_jsonl

from apps import designer, exporting, generate, launcher, runs

REWARDS_FOLDER = "reward_files"   # saved reward files live in RUNS/reward_files/
EXPORTS_FOLDER = "exports"
POLL_SECONDS = 2.0
# Config fields shown under "More settings" in the Train form (flag names of config.override_fields()).
TRAIN_FIELDS = ("num-generations", "per-device-train-batch-size", "max-completion-length", "learning-rate",
                "beta", "temperature", "loss-type", "lora-r", "load-in-4bit")
CURVE_TITLES = {"reward": "Total reward and each reward's mean", "success": "Success rate (and predicted)",
                "length": "Completion length", "kl": "KL", "zero_std": "Fraction of zero-std groups"}


def user_errors(handler):
    """Run a handler; a UserError becomes gr.Error (shown in the UI, raised in gradio_client)."""
    import functools

    @functools.wraps(handler)
    def wrapped(*args):
        try:
            return handler(*args)
        except UserError as error:
            raise gr.Error(str(error), print_exception=False) from None
    return wrapped


def config_field(flag: str) -> tuple[dataclasses.Field, type, str]:
    """(dataclass field, python type, help) of a Train-form flag, from local_grpo.config."""
    section, name, typ, help_text = config_mod.override_fields()[flag]
    dc_field = next(f for f in dataclasses.fields(config_mod.SECTIONS[section]) if f.name == name)
    return dc_field, typ, help_text


def build_app(runs_root: str) -> gr.Blocks:
    """The studio for the run directories under runs_root (created when missing)."""
    runs_root = os.path.realpath(runs_root)
    os.makedirs(runs_root, exist_ok=True)
    rewards_dir = os.path.join(runs_root, REWARDS_FOLDER)

    def run_path(name: str) -> str:
        path = runs.resolve_under(runs_root, name, "run")
        if not os.path.isdir(path) or not runs.is_run_dir(path):
            raise UserError(f"run: {name!r} is not a run directory in {runs_root}")
        return path

    def run_choices() -> list[str]:
        return runs.find_runs(runs_root)

    # --- Design rewards handlers ----------------------------------------------------------
    def code_sources() -> list[str]:
        import rewards

        return ["template", *rewards.names(), *designer.saved_reward_specs(rewards_dir)]

    @user_errors
    def load_code(source: str) -> str:
        import rewards

        if not source or source == "template":
            return designer.TEMPLATE
        if source in rewards.names():
            return designer.builtin_template(source)
        path = runs.resolve_under(rewards_dir, source.rsplit(":", 1)[0], "reward file")
        with open(path, encoding="utf-8") as fh:
            return fh.read()

    @user_errors
    def samples_from_run(run: str, steps: float) -> str:
        return designer.samples_to_text(designer.samples_from_run(run_path(run), steps=int(steps or 2)))

    @user_errors
    def generate_samples(model: str, prompts_text: str, answers_text: str, n: float, max_tokens: float) -> str:
        prompts = [p.strip() for p in (prompts_text or "").splitlines() if p.strip()]
        answers = [a.strip() or None for a in (answers_text or "").splitlines()]
        samples = generate.generate_samples({"model": model or "embedded", "prompts": prompts, "answers": answers,
                                             "n": int(n or 4), "max_new_tokens": int(max_tokens or 64)})
        return designer.samples_to_text(samples)

    def score(code: str, samples_text: str, timeout_s: float, chat: bool):
        try:
            samples = designer.parse_samples(samples_text)
        except UserError as error:
            result = designer.ScoreResult(problem=str(error))
        else:
            result = designer.score_code(code, samples, timeout_s=float(timeout_s or designer.DEFAULT_TIMEOUT_S),
                                         chat=bool(chat))
        return designer.summary_markdown(result), designer.results_table(result), designer.histogram_frame(result)

    def probe_rewards(code: str, samples_text: str):
        """The hack battery (rewards.probe) on the edited functions, with the samples' prompts and gold answers."""
        from rewards.probe import EXAMPLE_ROWS, format_table, probe_source

        try:
            names = designer.reward_functions(code)
            samples = designer.parse_samples(samples_text) if (samples_text or "").strip() else []
        except (designer.CodeProblem, UserError) as error:
            return f"**Cannot probe:** {error}"
        rows = {s["prompt"]: s["answer"] for s in samples if s.get("prompt") and s.get("answer") not in (None, "")}
        rows = dict(list(rows.items())[:20]) or EXAMPLE_ROWS
        report = probe_source(code, names, list(rows), list(rows.values()))
        return "```\n" + format_table(report) + "\n```"

    @user_errors
    def save_rewards(code: str, file_name: str):
        path, specs = designer.save_reward_file(code, rewards_dir, file_name)
        listed = "\n".join(f"- `{spec}`" for spec in specs)
        message = (f"Saved **{path}**. Use it in training as:\n{listed}\n\n"
                   f"e.g. `local-grpo train --rewards {specs[0]}:1.0`")
        return message, gr.update(choices=code_sources())

    # --- Train handlers -------------------------------------------------------------------
    @user_errors
    def start_training(run_name, model, task, dataset, rewards_text, preset, max_steps, *extra):
        request = launcher.TrainRequest(
            run_name=(run_name or "").strip(), model=model, task=task, dataset=(dataset or ""),
            rewards=parse_weights(rewards_text, "rewards"), preset=preset or "", max_steps=int(max_steps or 40),
            overrides=form_overrides(extra))
        run_dir, pid = launcher.start_run(request, runs_root)
        return (f"Started **{request.run_name}** (pid {pid}) → `{run_dir}`. Open it in **Watch**.",
                request.run_name, gr.update(choices=run_choices()))

    @user_errors
    def stop_training(run_name: str) -> str:
        name = (run_name or "").strip()
        runs.resolve_under(runs_root, name, "run")
        return launcher.stop_run(runs_root, name)

    def training_log(run_name: str) -> str:
        name = (run_name or "").strip()
        if not launcher.RUN_NAME.fullmatch(name):
            return ""
        state = "running" if launcher.running_pid(runs_root, name) else "not running"
        return f"[{name}: {state}]\n" + launcher.log_tail(runs_root, name)

    # --- Watch handlers -------------------------------------------------------------------
    def list_runs():
        table = runs.runs_table(runs_root)
        return table, gr.update(choices=list(table["run"]))

    def run_signature(path: str, view: str) -> str:
        stamps = []
        for name in (rundir.METRICS, rundir.COMPLETIONS, rundir.EVENTS, rundir.SUMMARY, rundir.EVAL_COMPARE):
            try:
                info = os.stat(os.path.join(path, name))
                stamps.append(f"{info.st_mtime_ns}:{info.st_size}")
            except OSError:
                stamps.append("-")
        return f"{path}|{view}|" + ",".join(stamps)

    def run_views(path: str, view: str):
        metrics = read_jsonl(os.path.join(path, rundir.METRICS))
        events = read_jsonl(os.path.join(path, rundir.EVENTS))
        frames = runs.curve_frames(metrics)
        completions = read_jsonl(os.path.join(path, rundir.COMPLETIONS))
        return (runs.run_overview(path, metrics, events), *[frames[p] for p in runs.PANELS],
                runs.completions_table(completions, view or "latest"), runs.alerts_table(events),
                runs.eval_compare_table(path))

    @user_errors
    def load_run(run: str, view: str):
        path = run_path(run)
        return (*run_views(path, view), weights_text(path), run_signature(path, view))

    def weights_text(path: str) -> str:
        return "\n".join(f"{k}: {v:g}" for k, v in runs.configured_weights(path).items())

    def refresh_run(run: str, view: str, last_signature: str):
        """The Timer's poll: new views only when a run file changed (else nothing is sent).

        The weights box is filled only when the run itself changed, so a user's edit is not overwritten.
        """
        count = 1 + len(runs.PANELS) + 3 + 2
        if not run:
            return (gr.skip(),) * count
        try:
            path = run_path(run)
        except UserError:
            return (gr.skip(),) * count
        signature = run_signature(path, view)
        if signature == last_signature:
            return (gr.skip(),) * count
        same_run = (last_signature or "").split("|", 1)[0] == path
        return (*run_views(path, view), gr.skip() if same_run else weights_text(path), signature)

    @user_errors
    def set_weights(run: str, weights_text: str) -> str:
        path = run_path(run)
        control = launcher.write_weights(path, parse_weights(weights_text, "weights"))
        status = runs.run_status(path)
        note = "the trainer applies them at its next step and records a weights_changed event" if status == "running" \
            else f"the run is {status}; they apply if it is resumed"
        return f"Wrote `{os.path.join(path, rundir.CONTROL)}` = `{control}` — {note}."

    # --- Export handler -------------------------------------------------------------------
    @user_errors
    def export_run(run: str, fmt: str, out_folder: str) -> str:
        path = run_path(run)
        out_dir = runs.resolve_under(runs_root, out_folder or f"{EXPORTS_FOLDER}/{os.path.basename(path)}-{fmt}",
                                     "export folder")
        return exporting.export(path, fmt, out_dir)

    # --- layout ---------------------------------------------------------------------------
    with gr.Blocks(title="local-grpo studio") as app:
        gr.Markdown(f"## local-grpo studio\nRuns folder: `{runs_root}`")
        with gr.Tabs():
            with gr.Tab("Design rewards", id="design"):
                with gr.Row():
                    with gr.Column(scale=3):
                        with gr.Row():
                            source = gr.Dropdown(code_sources(), value="template", label="Start from",
                                                 info="the template, a built-in reward's source, or a saved file",
                                                 allow_custom_value=True, scale=3)
                            load_code_btn = gr.Button("Load into editor", scale=1)
                        code = gr.Code(designer.TEMPLATE, language="python", lines=24, max_lines=40,
                                       label="Reward functions (each public function is one reward)",
                                       elem_id="reward-code")
                        with gr.Row():
                            file_name = gr.Textbox("my_rewards", label="Save as (file name)", scale=2)
                            save_btn = gr.Button("Save reward file", scale=1)
                        save_message = gr.Markdown()
                    with gr.Column(scale=2):
                        with gr.Row():
                            sample_run = gr.Dropdown(run_choices(), label="Samples from a run", allow_custom_value=True,
                                                     scale=3)
                            sample_steps = gr.Number(2, label="last steps", precision=0, scale=1)
                        samples_from_run_btn = gr.Button("Load completions from run")
                        with gr.Accordion("Generate samples with a model", open=False):
                            gen_model = gr.Textbox("embedded", label="Model", info="embedded, a local folder, or a hub id")
                            gen_prompts = gr.Textbox(label="Prompts (one per line)", lines=3)
                            gen_answers = gr.Textbox(label="Gold answers (one per line, optional)", lines=2)
                            with gr.Row():
                                gen_n = gr.Number(4, label="completions per prompt", precision=0)
                                gen_tokens = gr.Number(64, label="max new tokens", precision=0)
                            generate_btn = gr.Button("Generate")
                        samples = gr.Textbox(label="Samples (JSONL: completion, prompt, answer, group — or paste "
                                             "completions separated by lines of ---)", lines=10, max_lines=16,
                                             elem_id="samples")
                        with gr.Row():
                            timeout = gr.Slider(0.5, 30, value=designer.DEFAULT_TIMEOUT_S, step=0.5,
                                                label="time limit per reward (s)")
                            chat = gr.Checkbox(True, label="completions as chat messages (as in training)")
                        score_btn = gr.Button("Score", variant="primary", elem_id="score")
                        probe_btn = gr.Button("Probe for reward hacks", elem_id="probe")
                score_summary = gr.Markdown(elem_id="score-summary")
                score_table = gr.Dataframe(label="Scores: completion × reward", wrap=True, max_height=420,
                                           elem_id="score-table")
                histogram = gr.BarPlot(None, x="bin", y="count", color="reward", title="Score histogram",
                                       height=260, elem_id="histogram")
                probe_report = gr.Markdown(elem_id="probe-report")

            with gr.Tab("Train", id="train"):
                with gr.Row():
                    run_name = gr.Textbox(time.strftime("run-%Y%m%d-%H%M%S"), label="Run name (folder in the runs folder)")
                    model = gr.Dropdown(["embedded"], value="embedded", allow_custom_value=True, label="Model",
                                        info=config_mod.ModelConfig.__dataclass_fields__["name"].metadata["help"])
                    preset = gr.Dropdown(["", *PRESETS], value="cpu", label="Preset",
                                         info=config_mod.Config.__dataclass_fields__["preset"].metadata["help"])
                with gr.Row():
                    task = gr.Dropdown(list(config_mod.TASKS), value="arithmetic", label="Task",
                                       info=config_mod.DataConfig.__dataclass_fields__["task"].metadata["help"])
                    dataset = gr.Textbox(label="Dataset (instead of a task)",
                                         info=config_mod.DataConfig.__dataclass_fields__["dataset"].metadata["help"])
                    max_steps = gr.Number(40, precision=0, label="Max steps",
                                          info=config_mod.GRPOSettings.__dataclass_fields__["max_steps"].metadata["help"])
                train_rewards = gr.Textbox(label="Rewards (one per line: name: weight; empty = the task's defaults)",
                                           info="built-ins: see Design rewards → Start from; saved files as path.py:function",
                                           lines=3, placeholder="format_soft: 0.5\ncorrect_numeric: 1.0")
                with gr.Accordion("More settings (empty = preset / default)", open=False):
                    extra_inputs = []
                    with gr.Row():
                        for flag in TRAIN_FIELDS:
                            if flag not in config_mod.override_fields():
                                continue
                            dc_field, typ, help_text = config_field(flag)
                            label = f"{flag} (default {dc_field.default})"
                            if typ is bool:
                                box = gr.Dropdown(["", "true", "false"], value="", label=label, info=help_text)
                            elif typ is str:
                                box = gr.Textbox("", label=label, info=help_text)
                            else:
                                box = gr.Number(None, label=label, info=help_text, precision=0 if typ is int else None)
                            extra_inputs.append(box)
                with gr.Row():
                    start_btn = gr.Button("Start training", variant="primary")
                    stop_btn = gr.Button("Stop", variant="stop")
                train_message = gr.Markdown()
                train_log = gr.Textbox(label="Console (last lines)", lines=10, max_lines=14, interactive=False)

            with gr.Tab("Watch", id="watch"):
                with gr.Row():
                    watch_run = gr.Dropdown(run_choices(), label="Run", allow_custom_value=True, scale=3,
                                            elem_id="watch-run")
                    refresh_btn = gr.Button("Refresh run list", scale=1)
                runs_list = gr.Dataframe(runs.runs_table(runs_root), label="Runs", max_height=200, interactive=False)
                overview = gr.Markdown(elem_id="run-overview")
                plots = {}
                panel_names = list(runs.PANELS)
                for row_panels in (panel_names[:3], panel_names[3:]):
                    with gr.Row():
                        for panel in row_panels:
                            plots[panel] = gr.LinePlot(None, x="step",
                                                       y="value", color="series", title=CURVE_TITLES[panel],
                                                       height=240, elem_id=f"curve-{panel}")
                view = gr.Radio(list(runs.COMPLETION_VIEWS), value="latest", label="Completions")
                completions_df = gr.Dataframe(label="Completions (prompt, answer, per-reward scores, total)",
                                              wrap=True, max_height=420, interactive=False, elem_id="completions")
                with gr.Row():
                    with gr.Column(scale=3):
                        alerts_df = gr.Dataframe(label="Alerts and events (events.jsonl)", wrap=True,
                                                 max_height=260, interactive=False)
                    with gr.Column(scale=2):
                        eval_df = gr.Dataframe(label="Base vs trained (eval_compare.json)", interactive=False)
                        weights = gr.Textbox(label="Reward weights (live: applied at the next step)", lines=3)
                        weights_btn = gr.Button("Apply weights")
                        weights_message = gr.Markdown()
                signature = gr.State("")
                timer = gr.Timer(POLL_SECONDS)

            with gr.Tab("Export", id="export"):
                with gr.Row():
                    export_run_name = gr.Dropdown(run_choices(), label="Run", allow_custom_value=True)
                    export_format = gr.Radio(list(exporting.FORMATS), value="lora", label="Format")
                    export_out = gr.Textbox(label="Output folder (inside the runs folder; empty = exports/<run>-<format>)")
                export_btn = gr.Button("Export", variant="primary")
                export_message = gr.Markdown()

        # --- events (every one named for gradio_client) -------------------------------------
        load_code_btn.click(load_code, source, code, api_name="load_code")
        samples_from_run_btn.click(samples_from_run, [sample_run, sample_steps], samples, api_name="samples_from_run")
        generate_btn.click(generate_samples, [gen_model, gen_prompts, gen_answers, gen_n, gen_tokens], samples,
                           api_name="generate_samples")
        score_btn.click(score, [code, samples, timeout, chat], [score_summary, score_table, histogram],
                        api_name="score_rewards")
        probe_btn.click(probe_rewards, [code, samples], [probe_report], api_name="probe_rewards")
        save_btn.click(save_rewards, [code, file_name], [save_message, source], api_name="save_rewards")

        start_btn.click(start_training, [run_name, model, task, dataset, train_rewards, preset, max_steps, *extra_inputs],
                        [train_message, watch_run, export_run_name], api_name="start_training")
        stop_btn.click(stop_training, run_name, train_message, api_name="stop_training")
        timer.tick(training_log, run_name, train_log, api_name="training_log", show_progress="hidden")

        view_outputs = [overview, *[plots[p] for p in runs.PANELS], completions_df, alerts_df, eval_df]
        refresh_btn.click(list_runs, None, [runs_list, watch_run], api_name="list_runs")
        watch_run.change(load_run, [watch_run, view], [*view_outputs, weights, signature], api_name="load_run")
        view.change(load_run, [watch_run, view], [*view_outputs, weights, signature], api_name="load_run_view")
        timer.tick(refresh_run, [watch_run, view, signature], [*view_outputs, weights, signature], api_name="refresh_run",
                   show_progress="hidden")
        weights_btn.click(set_weights, [watch_run, weights], weights_message, api_name="set_weights")
        export_btn.click(export_run, [export_run_name, export_format, export_out], export_message, api_name="export_run")
    return app


def parse_weights(text: str, field: str) -> dict[str, float]:
    """Lines `name: weight` (or just `name`, weight 1) → {name: weight}; `path.py:function` keeps its colon."""
    weights: dict[str, float] = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        head, _, tail = line.rpartition(":")
        try:
            name, weight = head.strip(), float(tail)
        except ValueError:
            name, weight = line, 1.0
        if not name:
            raise UserError(f"{field}: {line!r} needs a reward name before the weight")
        weights[name] = weight
    return weights


def form_overrides(values) -> dict:
    """The Train form's extra fields as {flag: value}, skipping the empty ones (preset/default applies)."""
    flags = [flag for flag in TRAIN_FIELDS if flag in config_mod.override_fields()]
    overrides = {}
    for flag, value in zip(flags, values):
        if value is None or value == "":
            continue
        _field, typ, _help = config_field(flag)
        if typ is bool:
            overrides[flag] = value == "true"
        elif typ is int:
            overrides[flag] = int(value)
        elif typ is float:
            overrides[flag] = float(value)
        else:
            overrides[flag] = str(value)
    return overrides
