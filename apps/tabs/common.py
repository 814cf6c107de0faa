"""Helpers every tab uses: UserError -> gr.Error, and the studio's paths."""

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
