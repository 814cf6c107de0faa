"""Reward code as part of the record: a copy of each user reward file version a run trains with, and of its task file.

A user reward (`path/to/file.py:function`) is re-read when its file changes during a run (rewards/userfile.py
emits a `reward_reloaded` event). `RewardFileLog` keeps the version in use when training starts and each
version a reload brings, content-hashed, with the step it became active: RUN_DIR/reward_code/ and
RUN_DIR/reward_code.json (rundir.RunDir.keep_reward_file). A user task file (`--task path/to/file.py:NAME`)
is kept the same way, once, as the run starts. An adapter can be traced to the code that shaped it.
"""

from __future__ import annotations

from .. import rundir
from ..config import Config
from .recorder import RewardRecorder


def file_specs(config: Config, recorder: RewardRecorder) -> dict[int, tuple[object, str]]:
    """id(reward function) -> (function, spec) for every user-file reward of the run, the success reward included."""
    from rewards.userfile import is_file_spec

    pairs = list(zip(recorder.reward_fns, [spec.name for spec in config.rewards]))
    if recorder.success_fn not in recorder.reward_fns:
        pairs.append((recorder.success_fn, config.success_reward))
    return {id(fn): (fn, spec) for fn, spec in pairs if isinstance(spec, str) and is_file_spec(spec)}


def task_file_spec(config: Config) -> str | None:
    """The run's task file reference (`path/to/file.py:NAME`), or None for a built-in task."""
    from ..tasks import is_task_file

    return None if config.data.dataset or not is_task_file(config.data.task) else config.data.task


def spec_path(spec: str) -> str:
    """The file part of `path/to/file.py:function`."""
    from rewards.userfile import split_file_spec

    return split_file_spec(spec)[0]


class RewardFileLog:
    """Records user reward file versions into the run directory; `on_event` is a RewardRecorder.on_event hook."""

    def __init__(self, run: rundir.RunDir, config: Config, recorder: RewardRecorder):
        self.run = run
        self.specs = file_specs(config, recorder)
        self.task_spec = task_file_spec(config)

    def start(self, step: int) -> None:
        """Keep the version of every user reward file (and the task file) in use from `step` (the run's first step to train)."""
        for _, spec in self.specs.values():
            self.keep(spec, step)
        if self.task_spec:
            self.keep(self.task_spec, step)

    def on_event(self, fn, step: int, event: dict) -> None:
        if event.get("kind") == "reward_reloaded" and id(fn) in self.specs:
            self.keep(self.specs[id(fn)][1], step)

    def keep(self, spec: str, step: int) -> dict | None:
        """Record the file's current content for `spec` from `step` on (nothing when unchanged or unreadable)."""
        try:
            with open(spec_path(spec), "rb") as fh:
                content = fh.read()
        except OSError:  # deleted mid-run: the reward faults on its own; there is no version to keep
            return None
        return self.run.keep_reward_file(spec, content, step)
