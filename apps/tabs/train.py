"""Train: a form over the config's fields that starts and stops `local-grpo train` in its own process."""

from __future__ import annotations

import dataclasses
import time

import gradio as gr

from local_grpo import config as config_mod
from local_grpo.presets import PRESETS

from apps import launcher, runs
from apps.tabs.common import Studio, parse_weights, task_choices, user_errors
from apps.tabs.export import ExportTab
from apps.tabs.watch import WatchTab

TITLE, TAB_ID = "Train", "train"

# Config fields shown under "More settings" in the Train form (flag names of config.override_fields()).
TRAIN_FIELDS = ("num-generations", "per-device-train-batch-size", "max-completion-length", "learning-rate",
                "beta", "temperature", "loss-type", "lora-r", "load-in-4bit")


def config_field(flag: str) -> tuple[dataclasses.Field, type, str]:
    """(dataclass field, python type, help) of a Train-form flag, from local_grpo.config."""
    section, name, typ, help_text = config_mod.override_fields()[flag]
    dc_field = next(f for f in dataclasses.fields(config_mod.SECTIONS[section]) if f.name == name)
    return dc_field, typ, help_text


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


@dataclasses.dataclass(frozen=True)
class TrainTab:
    """The Train tab's components that events use (the Design tab also reads the form and fills `rewards`)."""

    run_name: gr.Textbox
    model: gr.Dropdown
    preset: gr.Dropdown
    task: gr.Dropdown
    dataset: gr.Textbox
    max_steps: gr.Number
    rewards: gr.Textbox
    settings: list[gr.Dropdown | gr.Textbox | gr.Number]  # "More settings", one box per TRAIN_FIELDS flag
    force: gr.Checkbox  # --force: train although the learnability gate or the memory plan would stop it
    start_btn: gr.Button
    stop_btn: gr.Button
    message: gr.Markdown
    log: gr.Textbox


def layout(studio: Studio) -> TrainTab:
    with gr.Row():
        run_name = gr.Textbox(time.strftime("run-%Y%m%d-%H%M%S"), label="Run name (folder in the runs folder)")
        model = gr.Dropdown(["embedded"], value="embedded", allow_custom_value=True, label="Model",
                            info=_help(config_mod.ModelConfig, "name"))
        preset = gr.Dropdown(["", *PRESETS], value="cpu", label="Preset", info=_help(config_mod.Config, "preset"))
    with gr.Row():
        task = gr.Dropdown(task_choices(), value="arithmetic", allow_custom_value=True, label="Task",
                           info=_help(config_mod.DataConfig, "task"))
        dataset = gr.Textbox(label="Dataset (instead of a task)", info=_help(config_mod.DataConfig, "dataset"))
        max_steps = gr.Number(40, precision=0, label="Max steps", info=_help(config_mod.GRPOSettings, "max_steps"))
    rewards = gr.Textbox(label="Rewards (one per line: name: weight; empty = the task's defaults)",
                         info="built-ins: see Design rewards → Start from; saved files as path.py:function",
                         lines=3, placeholder="format_soft: 0.5\ncorrect_numeric: 1.0")
    with gr.Accordion("More settings (empty = preset / default)", open=False):
        with gr.Row():
            settings = [_extra_box(flag) for flag in TRAIN_FIELDS if flag in config_mod.override_fields()]
        force = gr.Checkbox(False, label="Train anyway (--force)",
                            info="train even when the starting model succeeds on none (or all) of the sampled "
                                 "completions, or the memory plan says it will not fit")
    with gr.Row():
        start_btn = gr.Button("Start training", variant="primary")
        stop_btn = gr.Button("Stop", variant="stop")
    message = gr.Markdown()
    log = gr.Textbox(label="Console (last lines)", lines=10, max_lines=14, interactive=False)
    return TrainTab(run_name=run_name, model=model, preset=preset, task=task, dataset=dataset, max_steps=max_steps,
                    rewards=rewards, settings=settings, force=force, start_btn=start_btn, stop_btn=stop_btn, message=message,
                    log=log)


def wire(studio: Studio, train: TrainTab, watch: WatchTab, export: ExportTab) -> None:
    """Start and stop; a start also opens the run in Watch and lists it in Export; Watch's timer polls the console."""

    @user_errors
    def start_training(run_name, model, task, dataset, rewards_text, preset, max_steps, *settings_then_force):
        *settings, force = settings_then_force
        request = launcher.TrainRequest(
            run_name=(run_name or "").strip(), model=model, task=task, dataset=(dataset or ""),
            rewards=parse_weights(rewards_text, "rewards"), preset=preset or "", max_steps=int(max_steps or 40),
            overrides=form_overrides(settings), force=bool(force))
        run_dir, pid = launcher.start_run(request, studio.runs_root)
        return {train.message: f"Started **{request.run_name}** (pid {pid}) → `{run_dir}`. Open it in **Watch**.",
                watch.run: request.run_name, export.run: gr.update(choices=studio.run_choices())}

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

    form = [train.run_name, train.model, train.task, train.dataset, train.rewards, train.preset, train.max_steps,
            *train.settings, train.force]
    train.start_btn.click(start_training, form, [train.message, watch.run, export.run], api_name="start_training")
    train.stop_btn.click(stop_training, train.run_name, train.message, api_name="stop_training")
    watch.timer.tick(training_log, train.run_name, train.log, api_name="training_log", show_progress="hidden")
