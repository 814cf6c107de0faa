"""Helpers the tabs share: UserError -> gr.Error, the studio's paths, and the `name: weight` lines of reward boxes."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import gradio as gr

from local_grpo.errors import UserError

from apps import runs

REWARDS_FOLDER = "reward_files"   # saved reward files live in RUNS/reward_files/
EXPORTS_FOLDER = "exports"


def user_errors(handler):
    """Run a handler; a UserError becomes gr.Error (shown in the UI, raised in gradio_client)."""

    @functools.wraps(handler)
    def wrapped(*args):
        try:
            return handler(*args)
        except UserError as error:
            raise gr.Error(str(error), print_exception=False) from None
    return wrapped


@dataclass
class Studio:
    """What the tabs share: the runs folder and how a run name becomes a run directory."""

    runs_root: str

    @property
    def rewards_dir(self) -> str:
        return os.path.join(self.runs_root, REWARDS_FOLDER)

    def run_path(self, name: str) -> str:
        path = runs.resolve_under(self.runs_root, name, "run")
        if not os.path.isdir(path) or not runs.is_run_dir(path):
            raise UserError(f"run: {name!r} is not a run directory in {self.runs_root}")
        return path

    def run_choices(self) -> list[str]:
        return runs.find_runs(self.runs_root)


def task_choices() -> list[str]:
    """The built-in tasks the Train form and the check panel offer (their one source in the studio); both
    also take a typed task file, path/to/file.py:NAME."""
    from local_grpo import tasks

    return tasks.builtin_names()


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
