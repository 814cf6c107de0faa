"""Train: a form over the config's fields that starts and stops `local-grpo train` in its own process."""

from __future__ import annotations

import dataclasses
import time
from types import SimpleNamespace

import gradio as gr

from local_grpo import config as config_mod
from local_grpo import tasks
from local_grpo.errors import UserError
from local_grpo.presets import PRESETS

from apps import launcher, runs
from apps.tabs.common import Studio, user_errors

# Config fields shown under "More settings" in the Train form (flag names of config.override_fields()).
TRAIN_FIELDS = ("num-generations", "per-device-train-batch-size", "max-completion-length", "learning-rate",
                "beta", "temperature", "loss-type", "lora-r", "load-in-4bit")


def config_field(flag: str) -> tuple[dataclasses.Field, type, str]:
    """(dataclass field, python type, help) of a Train-form flag, from local_grpo.config."""
    section, name, typ, help_text = config_mod.override_fields()[flag]
    dc_field = next(f for f in dataclasses.fields(config_mod.SECTIONS[section]) if f.name == name)
    return dc_field, typ, help_text


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


def _help(section, name: str) -> str:
    return section.__dataclass_fields__[name].metadata["help"]


def _extra_box(flag: str):
    dc_field, typ, help_text = config_field(flag)
    label = f"{flag} (default {dc_field.default})"
    if typ is bool:
        return gr.Dropdown(["", "true", "false"], value="", label=label, info=help_text)
    if typ is str:
        return gr.Textbox("", label=label, info=help_text)
    return gr.Number(None, label=label, info=help_text, precision=0 if typ is int else None)


def layout(studio: Studio) -> SimpleNamespace:
    with gr.Row():
        run_name = gr.Textbox(time.strftime("run-%Y%m%d-%H%M%S"), label="Run name (folder in the runs folder)")
        model = gr.Dropdown(["embedded"], value="embedded", allow_custom_value=True, label="Model",
                            info=_help(config_mod.ModelConfig, "name"))
        preset = gr.Dropdown(["", *PRESETS], value="cpu", label="Preset", info=_help(config_mod.Config, "preset"))
    with gr.Row():
        task = gr.Dropdown(tasks.builtin_names(), value="arithmetic", label="Task",
                           info=_help(config_mod.DataConfig, "task"))
        dataset = gr.Textbox(label="Dataset (instead of a task)", info=_help(config_mod.DataConfig, "dataset"))
        max_steps = gr.Number(40, precision=0, label="Max steps", info=_help(config_mod.GRPOSettings, "max_steps"))
    train_rewards = gr.Textbox(label="Rewards (one per line: name: weight; empty = the task's defaults)",
                               info="built-ins: see Design rewards → Start from; saved files as path.py:function",
                               lines=3, placeholder="format_soft: 0.5\ncorrect_numeric: 1.0")
    with gr.Accordion("More settings (empty = preset / default)", open=False):
        with gr.Row():
            extra_inputs = [_extra_box(flag) for flag in TRAIN_FIELDS if flag in config_mod.override_fields()]
    with gr.Row():
        start_btn = gr.Button("Start training", variant="primary")
        stop_btn = gr.Button("Stop", variant="stop")
    train_message = gr.Markdown()
    train_log = gr.Textbox(label="Console (last lines)", lines=10, max_lines=14, interactive=False)
    return SimpleNamespace(**{k: v for k, v in locals().items() if k != "studio"})


def wire(studio: Studio, ui: SimpleNamespace) -> None:
    t = ui.train

    @user_errors
    def start_training(run_name, model, task, dataset, rewards_text, preset, max_steps, *extra):
        request = launcher.TrainRequest(
            run_name=(run_name or "").strip(), model=model, task=task, dataset=(dataset or ""),
            rewards=parse_weights(rewards_text, "rewards"), preset=preset or "", max_steps=int(max_steps or 40),
            overrides=form_overrides(extra))
        run_dir, pid = launcher.start_run(request, studio.runs_root)
        return (f"Started **{request.run_name}** (pid {pid}) → `{run_dir}`. Open it in **Watch**.",
                request.run_name, gr.update(choices=studio.run_choices()))

    @user_errors
    def stop_training(run_name: str) -> str:
        name = (run_name or "").strip()
        runs.resolve_under(studio.runs_root, name, "run")
        return launcher.stop_run(studio.runs_root, name)

    def training_log(run_name: str) -> str:
        name = (run_name or "").strip()
        if not launcher.RUN_NAME.fullmatch(name):
            return ""
        state = "running" if launcher.running_pid(studio.runs_root, name) else "not running"
        return f"[{name}: {state}]\n" + launcher.log_tail(studio.runs_root, name)

    inputs = [t.run_name, t.model, t.task, t.dataset, t.train_rewards, t.preset, t.max_steps, *t.extra_inputs]
    t.start_btn.click(start_training, inputs, [t.train_message, ui.watch.watch_run, ui.export.export_run_name],
                      api_name="start_training")
    t.stop_btn.click(stop_training, t.run_name, t.train_message, api_name="stop_training")
    ui.watch.timer.tick(training_log, t.run_name, t.train_log, api_name="training_log", show_progress="hidden")
