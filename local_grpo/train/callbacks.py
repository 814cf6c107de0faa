"""The run-directory callback: one metrics.jsonl line per logged step, live diagnostics, live weights, progress.

A transformers TrainerCallback by duck typing (events it does not define are no-ops), so that importing
this module does not import transformers before Unsloth gets to patch it. Diagnostics run on the rows
this callback keeps in memory, right after it writes each one: no second callback, no re-reading files.
"""

from __future__ import annotations

import os
import sys
import time

from .. import rundir
from ..config import Config
from . import diagnostics
from .recorder import RewardRecorder
from .step_timer import StepTimer


class RunDirCallback:
    """Writes metrics.jsonl each logged step, raises diagnostics alerts, applies control.json, shows progress.

    `metric_hooks` are callables(step) -> dict of extra metrics for that step's line (audit, predictor).
    `stop_checks` are callables() -> a reason to stop training now, or None, asked after each line (the
    early stop of held_out_eval.BestCheckpoint); the first reason stops the trainer (`early_stop`).
    """

    def __getattr__(self, name):
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def __init__(self, run: rundir.RunDir, recorder: RewardRecorder, config: Config, progress: bool = True):
        self.run = run
        self.recorder = recorder
        self.progress = progress
        self.trainer = None
        self.bar = None
        self.metric_hooks = []
        self.stop_checks = []
        self.early_stop: dict | None = None  # {"step", "reason"} once a stop check asked
        self.rows = [r for r in run.metrics() if "reward" in r]  # earlier steps of a resumed run
        self.alerts = diagnostics.AlertLog(run, diagnostics.format_reward_names(recorder.names))
        self._control_mtime = None
        self._started = time.time()
        self._logged_step = 0  # global_step of the last metrics line (or where training began)

    @property
    def timer(self) -> StepTimer | None:
        return getattr(self.trainer, "step_timer", None)

    def _timed(self, method, *args, **kwargs):
        timer = self.timer
        if timer is None:
            return method(*args, **kwargs)
        with timer.span("callbacks"):
            return method(*args, **kwargs)

    def attach(self, trainer) -> None:
        """Add this callback to the trainer, replacing transformers' own log printers."""
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        self.trainer = trainer
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(self)

    def on_train_begin(self, args, state, control, **kwargs):
        self._logged_step = state.global_step
        if self.progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=state.max_steps, initial=state.global_step, desc="GRPO", unit="step",
                            dynamic_ncols=True, file=sys.stderr)

    def on_step_begin(self, args, state, control, **kwargs):
        self._timed(self.apply_control)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self.timer is not None:
            self.timer.start("optimizer")

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self.timer is not None:
            self.timer.stop("optimizer")

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        self._timed(self.log, state, logs)
        if self.early_stop is None:
            self.check_stop(state.global_step, control)

    def check_stop(self, step: int, control) -> None:
        """Ask the stop checks; the first reason ends training after this step (TrainerControl.should_training_stop)."""
        for check in self.stop_checks:
            reason = check()
            if reason:
                self.early_stop = {"step": step, "reason": reason}
                self.run.event("info", f"early stop after step {step}: {reason}", step=step, kind="early_stop")
                control.should_training_stop = True
                return

    def log(self, state, logs) -> None:
        """One metrics.jsonl line for a logged step: TRL's logs, the step-time breakdown, the hooks' metrics."""
        logs = dict(logs or {})
        # Skip the trainer's end-of-training summary; steps that reuse a batch (num_iterations > 1) have loss but no reward.
        if "train_runtime" in logs or not {"reward", "loss"} & logs.keys():
            return
        values = {k: v for k, v in logs.items() if isinstance(v, (int, float))}
        for hook in self.metric_hooks:
            values.update(hook(state.global_step))
        if self.timer is not None:
            values.update(self.timer.take(state.global_step - self._logged_step,
                                          exclude_other=values.get("eval/seconds", 0.0)))
        self._logged_step = state.global_step
        record = rundir.MetricsRecord(
            step=state.global_step, time=round(time.time() - self._started, 3), success=self.recorder.take_success(),
            success_predicted=values.pop("success_predicted", None), forecast_shown=values.pop("forecast_shown", None),
            values=values,
        ).to_json()
        self.run.append(rundir.METRICS, record)
        if "reward" in record:
            self.rows.append(record)
            self.alerts.update(self.rows)
        self._show(record)

    def _show(self, record: dict) -> None:
        if self.bar is None:
            return
        post = {"reward": f"{record['reward']:.3f}"} if "reward" in record else {}
        if "success" in record:
            post["success"] = f"{record['success']:.2f}"
        if "completions/mean_length" in record:
            post["len"] = f"{record['completions/mean_length']:.0f}"
        self.bar.set_postfix(post, refresh=False)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def apply_control(self) -> None:
        """Read RUN_DIR/control.json (written by the app) and apply new reward weights (keyed by reward key)."""
        path = self.run.file(rundir.CONTROL)
        try:
            mtime = os.path.getmtime(path)
        except OSError:
            return
        if mtime == self._control_mtime:
            return
        self._control_mtime = mtime
        weights = (self.run.read_json(rundir.CONTROL) or {}).get("weights") or {}
        names = self.recorder.names
        changed = {}
        for name, weight in weights.items():
            if name in names and isinstance(weight, (int, float)) and not isinstance(weight, bool):
                i = names.index(name)
                if self.recorder.weights[i] != float(weight):
                    self.recorder.weights[i] = float(weight)
                    changed[name] = float(weight)
            else:
                self.run.event("warning", f"control.json: ignored weight for {name!r} (not a reward of this run or not a number)")
        if not changed:
            return
        step = self.trainer.state.global_step + 1 if self.trainer is not None else None
        if self.trainer is not None:
            self.trainer.set_reward_weights(self.recorder.weights)
        self.run.event("weights_changed", f"reward weights changed: {changed}", step=step,
                       weights=dict(zip(names, self.recorder.weights)))
