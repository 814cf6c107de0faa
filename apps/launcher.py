"""Start and stop training runs as separate processes, and change a live run's reward weights.

A run started here is `python -m local_grpo.cli train ... --output RUN_DIR` in its own session
(it survives the app closing or restarting); its console output goes to RUNS/.studio/<run>.log and
its pid to RUNS/.studio/<run>.pid, so a restarted app can still stop it. The app never touches the
trainer's internals: live weight changes go through RUN_DIR/control.json, which the trainer reads
at each step begin (and records as a `weights_changed` event).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from local_grpo import rundir
from local_grpo.errors import UserError

STUDIO_DIR = ".studio"
RUN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,79}")


@dataclass
class TrainRequest:
    """What the Train form asks for; `run_name` is a folder inside the runs folder."""

    run_name: str
    model: str = "embedded"
    task: str = "arithmetic"
    dataset: str = ""
    rewards: dict[str, float] = field(default_factory=dict)  # spec -> weight; empty = the task's defaults
    preset: str = ""
    max_steps: int = 40
    overrides: dict[str, object] = field(default_factory=dict)  # config flag name -> value, e.g. {"num-generations": 4}
    force: bool = False  # --force: past the learnability gate and the memory plan


def train_command(request: TrainRequest, runs_root: str) -> list[str]:
    """The `local-grpo train` command line for a request (checked; UserError names the bad field)."""
    if not RUN_NAME.fullmatch(request.run_name or ""):
        raise UserError(f"run name: {request.run_name!r} must be letters, digits, _ . - (e.g. arithmetic-1)")
    run_dir = os.path.join(os.path.realpath(runs_root), request.run_name)
    command = [*python_command(), "-m", "local_grpo.cli", "train", "--output", run_dir,
               "--model", local_or_name((request.model or "embedded").strip()), "--max-steps", str(int(request.max_steps))]
    if request.dataset.strip():
        command += ["--dataset", local_or_name(request.dataset.strip())]
    elif request.task:
        command += ["--task", request.task]
    if request.rewards:
        for spec, weight in request.rewards.items():
            if "," in spec:
                raise UserError(f"rewards: {spec!r} must not contain a comma")
            if not isinstance(weight, (int, float)) or weight != weight:
                raise UserError(f"rewards: weight of {spec!r} must be a number")
        command += ["--rewards", ",".join(f"{spec}:{float(weight):g}" for spec, weight in request.rewards.items())]
    if request.preset:
        command += ["--preset", request.preset]
    for flag, value in request.overrides.items():
        if value is None or value == "":
            continue
        if isinstance(value, bool):
            command.append(f"--{flag}" if value else f"--no-{flag}")
        else:
            command += [f"--{flag}", str(value)]
    if request.force:
        command.append("--force")
    return command


def python_command() -> list[str]:
    """This Python, told not to put the working folder first on sys.path (a ./rewards folder would
    otherwise shadow the rewards package in the child)."""
    return [sys.executable, "-P"] if sys.version_info >= (3, 11) else [sys.executable]


def local_or_name(value: str) -> str:
    """An existing local path made absolute (the child runs in another folder); names pass unchanged."""
    return os.path.abspath(value) if os.path.exists(value) else value


def studio_file(runs_root: str, run_name: str, suffix: str) -> str:
    folder = os.path.join(runs_root, STUDIO_DIR)
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{run_name}.{suffix}")


def start_run(request: TrainRequest, runs_root: str) -> tuple[str, int]:
    """Start training in a new process session; returns (run_dir, pid). Refuses an existing run folder."""
    command = train_command(request, runs_root)
    run_dir = command[command.index("--output") + 1]
    if os.path.exists(run_dir) and os.listdir(run_dir):
        raise UserError(f"run name: {request.run_name!r} already exists in the runs folder; choose another name")
    if running_pid(runs_root, request.run_name):
        raise UserError(f"run name: {request.run_name!r} is already training")
    log_path = studio_file(runs_root, request.run_name, "log")
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True, cwd=os.path.dirname(log_path))
    with open(studio_file(runs_root, request.run_name, "pid"), "w") as fh:
        fh.write(str(process.pid))
    _CHILDREN[process.pid] = process
    return run_dir, process.pid


_CHILDREN: dict[int, subprocess.Popen] = {}  # runs started by this app process (reaped on poll)


def running_pid(runs_root: str, run_name: str) -> int | None:
    """The pid of a run this app (or an earlier one) started, when that process is still alive."""
    try:
        with open(os.path.join(runs_root, STUDIO_DIR, f"{run_name}.pid")) as fh:
            pid = int(fh.read().strip())
    except (OSError, ValueError):
        return None
    child = _CHILDREN.get(pid)
    if child is not None:
        return pid if child.poll() is None else None
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return pid


def stop_run(runs_root: str, run_name: str, grace_s: float = 10.0) -> str:
    """Interrupt a run this app started (SIGINT, then SIGKILL after grace_s); returns a message."""
    pid = running_pid(runs_root, run_name)
    if pid is None:
        return f"{run_name}: not running (nothing to stop)"
    try:
        os.killpg(pid, signal.SIGINT)
    except OSError:
        return f"{run_name}: not running (nothing to stop)"
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if running_pid(runs_root, run_name) is None:
            return f"{run_name}: stopped (checkpoints are kept; `local-grpo train --resume --output ...` continues it)"
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if pid in _CHILDREN:
        _CHILDREN[pid].wait(timeout=5)
    return f"{run_name}: killed after {grace_s:g}s"


def log_tail(runs_root: str, run_name: str, lines: int = 30) -> str:
    """The last lines of a run's console log (what `local-grpo train` printed)."""
    path = os.path.join(runs_root, STUDIO_DIR, f"{run_name}.log")
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()[-20000:]
    except OSError:
        return ""
    text = text.replace("\r", "\n")
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])


def write_weights(run_dir: str, weights: dict[str, float]) -> dict:
    """Write RUN_DIR/control.json = {"weights": {...}} (atomic); the trainer applies it at the next step."""
    clean = {}
    for name, weight in weights.items():
        try:
            value = float(weight)
        except (TypeError, ValueError):
            raise UserError(f"weights: {name!r} needs a number, got {weight!r}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise UserError(f"weights: {name!r} must be finite")
        clean[str(name)] = value
    control = {"weights": clean}
    rundir.RunDir(run_dir).write_json(rundir.CONTROL, control)
    return control


def read_control(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, rundir.CONTROL), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError):
        return {}
