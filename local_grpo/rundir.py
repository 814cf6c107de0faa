"""The run directory as code: every file name, one record type per file, and the one reader.

    RUN_DIR/config.yaml                  the full resolved config
    RUN_DIR/metrics.jsonl                one MetricsRecord per logged step
    RUN_DIR/completions.jsonl            one CompletionRecord per sampled completion
    RUN_DIR/events.jsonl                 one EventRecord per info line, warning, alert or reward fault
    RUN_DIR/base_model.json              the BaseModelRecord: the base model training loaded (eval and export load it)
    RUN_DIR/p_ref.json                   per-prompt success of the starting model (when measured)
    RUN_DIR/forecast.json                kl none: the success forecast fitted to the first steps, with its band
    RUN_DIR/reward_code.json             one RewardFileRecord per version of a user reward file trained with
    RUN_DIR/reward_code/                 the copies of those versions, <sha256[:16]>-<file name>.py
    RUN_DIR/control.json                 live changes from the app (reward weights), read each step
    RUN_DIR/summary.json                 the end-of-training summary
    RUN_DIR/eval_compare.json            base vs trained metrics (`local-grpo eval --run RUN_DIR --compare`)
    RUN_DIR/eval_compare_prompts.jsonl   per-prompt results of that comparison
    RUN_DIR/eval_prompts.jsonl           per-prompt results of `local-grpo eval --run RUN_DIR`
    RUN_DIR/checkpoints/                 trainer checkpoints (for --resume)
    RUN_DIR/adapter/                     the final LoRA adapter
    RUN_DIR/best_adapter/                the adapter of the best held-out success (grpo.eval_steps)
    RUN_DIR/best.json                    the BestRecord: which step that was, and its held-out success

docs/run-directory.md documents every field; tests/test_rundir.py checks it against this module.
Lines are appended whole (one write + flush per line); the reader skips a torn or garbled line.
The app, eval, export, predict and diagnostics read a run only through this module. It must not
import torch, transformers or trl.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from .errors import UserError

CONFIG = "config.yaml"
METRICS = "metrics.jsonl"
COMPLETIONS = "completions.jsonl"
EVENTS = "events.jsonl"
BASE_MODEL = "base_model.json"
P_REF = "p_ref.json"
FORECAST = "forecast.json"
CONTROL = "control.json"
CHECKPOINTS = "checkpoints"
ADAPTER = "adapter"
BEST_ADAPTER = "best_adapter"
BEST = "best.json"
SUMMARY = "summary.json"
EVAL_COMPARE = "eval_compare.json"
EVAL_COMPARE_PROMPTS = "eval_compare_prompts.jsonl"
EVAL_PROMPTS = "eval_prompts.jsonl"
REWARD_CODE = "reward_code"
REWARD_CODE_MANIFEST = "reward_code.json"
FILES = (CONFIG, METRICS, COMPLETIONS, EVENTS, BASE_MODEL, P_REF, FORECAST, CONTROL, SUMMARY, EVAL_COMPARE, EVAL_COMPARE_PROMPTS,
         EVAL_PROMPTS, REWARD_CODE_MANIFEST, REWARD_CODE, CHECKPOINTS, ADAPTER, BEST_ADAPTER, BEST)
ADAPTER_CHOICES = ("best", "final")  # eval --checkpoint / export --checkpoint: which adapter of a run they read

# events.jsonl types: reward faults (a reward could not score) are counted apart from learning-signal alerts
TOOL_FAULT = "tool_fault"  # a tool call that raised, overran its time limit or crashed (the model read the error)
EVENT_TYPES = ("info", "warning", "alert", "reward_fault", "reward_reloaded", "weights_changed", TOOL_FAULT)
# kinds of the learning-signal findings train's diagnostics write (as an `alert` or an `info` event)
SIGNAL_KINDS = ("no_signal_streak", "length_drift", "reward_without_success", "format_without_correctness",
                "held_out_falling", "not_learnable")


def event_category(event: dict) -> str | None:
    """'reward_fault', 'signal_alert', 'signal_info' or None (every other event) for an events.jsonl line.

    Reward faults: a reward's per-call faults, its all-failed streak alert, the audit's verifier
    disagreeing with the reward. Signal findings: the SIGNAL_KINDS, at alert or info level.
    """
    kind, type_ = event.get("kind"), event.get("type")
    if type_ == "reward_fault" or (type_ == "alert" and kind not in SIGNAL_KINDS):
        return "reward_fault"
    if kind in SIGNAL_KINDS and type_ in ("alert", "info"):
        return "signal_alert" if type_ == "alert" else "signal_info"
    return None


# --- records ----------------------------------------------------------------------------------

@dataclass
class CompletionRecord:
    """One sampled completion as the rewards scored it (a line of completions.jsonl)."""

    step: int  # the trainer step whose batch this completion was sampled for (1-based)
    prompt: str  # the user's question (last user turn of a chat prompt)
    completion: str  # the text the rewards scored (the assistant's message)
    answer: Any  # the gold answer column, when the data has one
    rewards: dict  # reward key -> score (None: the reward could not judge)
    total: float  # the weighted sum of the scores that are not None
    success: int  # 1 when the success reward scored >= rewards.SUCCESS_THRESHOLD
    turns: list | None = None  # a tool task's completion turn by turn (`completion_turns`); absent otherwise
    row: int | None = None  # the prompt's index in the training rows (training batches); absent otherwise

    def to_json(self) -> dict:
        record = dataclasses.asdict(self)
        for optional in ("turns", "row"):
            if record[optional] is None:
                del record[optional]
        return record


def completion_turns(messages) -> list[dict]:
    """A multi-turn completion (TRL's chat messages) as CompletionRecord.turns: one {"role", "content"} per
    turn, with "tool_calls": [{"name", "arguments"}] on an assistant turn that called tools and "name" on a
    tool turn (the tool's result)."""
    turns = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        turn = {"role": message.get("role"), "content": content if isinstance(content, str) else str(content or "")}
        calls = [call.get("function", call) for call in message.get("tool_calls") or [] if isinstance(call, dict)]
        if calls:
            turn["tool_calls"] = [{"name": call.get("name"), "arguments": call.get("arguments")} for call in calls]
        if message.get("role") == "tool" and message.get("name"):
            turn["name"] = message["name"]
        turns.append(turn)
    return turns


@dataclass
class MetricsRecord:
    """One logged step (a line of metrics.jsonl): ours, plus every other number logged that step (`values`)."""

    step: int
    time: float  # seconds since training (re)started
    success: float | None = None  # fraction of this step's completions judged correct
    success_predicted: float | None = None  # the dynamics forecast for this step (when p_ref was measured)
    forecast_shown: bool | None = None  # whether that forecast may be shown (forecast.judge_logged); else "too early"
    values: dict = field(default_factory=dict)  # TRL's (reward, reward_std, rewards/<key>/mean, kl, ...), audit/*

    def to_json(self) -> dict:
        record = {"step": self.step, **self.values}
        for name in ("success", "success_predicted", "forecast_shown"):
            if getattr(self, name) is not None:
                record[name] = getattr(self, name)
        record["time"] = self.time
        return record


@dataclass
class EventRecord:
    """One line of events.jsonl: `type` is one of EVENT_TYPES; extra fields depend on it (kind, step, ...)."""

    time: float
    type: str
    message: str
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"time": self.time, "type": self.type, "message": self.message, **self.extra}


@dataclass
class RewardFileRecord:
    """One version of a user reward file a run trained with (an entry of reward_code.json)."""

    spec: str  # the reward as configured: path/to/file.py:function
    file: str  # the copy, relative to the run directory: reward_code/<sha256[:16]>-<file name>.py
    sha256: str  # of the file's bytes
    first_step: int  # the first trainer step scored with this version

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class BaseModelRecord:
    """The base model a run trained on, as it was loaded (base_model.json); eval and export load the same."""

    name: str  # model.name as configured: embedded, a folder, a GGUF file or a hub id
    path: str  # what was loaded: an absolute local folder or a hub id (Unsloth 4-bit: the -bnb-4bit id it maps to)
    snapshot: str | None  # a hub id's folder in the local Hugging Face cache when training loaded it; else None
    load_in_4bit: bool  # the base was loaded as bitsandbytes 4-bit (nf4)
    dtype: str  # the compute dtype: float32, bfloat16 or float16
    backend: str  # hf or unsloth

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class BestRecord:
    """The best held-out success of a run so far and the step whose adapter is in best_adapter/ (best.json)."""

    step: int  # the trainer step after whose update the adapter was evaluated
    held_out_success: float  # eval/pass@1 at that step: greedy success on the first grpo.eval_prompts held-out prompts
    prompts: int  # how many held-out prompts that was
    adapter: str  # the folder, relative to the run directory: best_adapter

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def read_jsonl(path: str) -> list[dict]:
    """All whole JSON objects in a jsonl file; a torn or garbled line is skipped, a missing file is []."""
    return list(iter_jsonl(path))


def iter_jsonl(path: str) -> Iterator[dict]:
    if not os.path.exists(path):
        return
    with open(path, "rb") as fh:
        for raw in fh:
            try:
                obj = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue  # a torn last line (killed writer) or a garbled one
            if isinstance(obj, dict):
                yield obj


def _ends_torn(path: str) -> bool:
    """True when a non-empty file does not end with a newline (its writer died mid-line)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell() == 0:
                return False
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"
    except OSError:
        return False


def _json_default(value: Any):
    try:  # numpy / torch scalars
        return value.item()
    except AttributeError:
        return str(value)


class RunDir:
    """A run directory on disk. Create it with `create` (new run) or `open` (resume / read)."""

    def __init__(self, path: str, readonly: bool = False):
        self.path = os.path.abspath(path)
        # readonly: every write is a no-op (the ranks other than 0 of a multi-process run)
        self.readonly = readonly
        self._checked_ends: set[str] = set()
        self._chosen_adapter = ADAPTER  # what adapter_dir names (choose_adapter)

    # --- creation --------------------------------------------------------------------------
    @staticmethod
    def check_new(path: str, overwrite: bool = False) -> None:
        """Raise UserError unless `create(path, overwrite)` may make a run directory there."""
        if os.path.exists(path) and not os.path.isdir(path):
            raise UserError(f"--output: {path} exists and is not a directory")
        if os.path.isdir(path) and os.listdir(path) and not overwrite:
            raise UserError(
                f"--output: run directory {path} already exists; use --resume to continue it, "
                "--overwrite to replace it, or another --output"
            )

    @classmethod
    def create(cls, path: str, overwrite: bool = False) -> "RunDir":
        """Make a new, empty run directory. An existing non-empty one is refused unless overwrite."""
        cls.check_new(path, overwrite)
        if os.path.isdir(path) and os.listdir(path):
            shutil.rmtree(path)
        try:
            os.makedirs(path, exist_ok=True)
            probe = os.path.join(path, ".write-test")
            with open(probe, "w") as fh:
                fh.write("ok")
            os.remove(probe)
        except OSError as exc:
            raise UserError(f"--output: cannot write to {path} ({exc.strerror or exc})") from None
        return cls(path)

    @classmethod
    def open(cls, path: str) -> "RunDir":
        """An existing run directory (it must hold a config.yaml)."""
        run = cls(path)
        if not os.path.isfile(run.file(CONFIG)):
            raise UserError(f"run directory {path}: no {CONFIG} here (not a local-grpo run directory)")
        return run

    # --- paths -----------------------------------------------------------------------------
    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    @property
    def checkpoints_dir(self) -> str:
        return self.file(CHECKPOINTS)

    @property
    def adapter_dir(self) -> str:
        """The adapter this RunDir reads: adapter/ (the final one, which training writes), or the one
        `choose_adapter` picked for eval and export."""
        return self.file(self._chosen_adapter)

    def choose_adapter(self, which: str | None = None) -> dict:
        """Point `adapter_dir` at the adapter eval and export read, and say which it is.

        `which`: "best" (best_adapter/, the best held-out success), "final" (adapter/), or None: the best
        when the run kept one (trained with grpo.eval_steps), else the final. Returns {"which", "path",
        "step", "held_out_success", "text"} (text: one line for the user).
        """
        if which not in (None, *ADAPTER_CHOICES):
            raise UserError(f"--checkpoint: {which!r} is not one of {', '.join(ADAPTER_CHOICES)}")
        best = self.best()
        if which == "best" and best is None:
            raise UserError(f"--checkpoint best: {self.path} kept no best adapter (train with --eval-steps N to keep "
                            f"one); --checkpoint final reads {ADAPTER}/")
        if best is not None and which != "final":
            self._chosen_adapter = BEST_ADAPTER
            text = (f"the best checkpoint: step {best['step']}, held-out success {best['held_out_success']:.3f} on "
                    f"{best['prompts']} prompts ({BEST_ADAPTER}/; --checkpoint final for the last step's {ADAPTER}/)")
            return {"which": "best", "path": self.adapter_dir, "step": best["step"],
                    "held_out_success": best["held_out_success"], "text": text}
        self._chosen_adapter = ADAPTER
        text = f"the final adapter ({ADAPTER}/)" + (" (the run kept no best checkpoint)" if best is None else "")
        return {"which": "final", "path": self.adapter_dir, "step": None, "held_out_success": None, "text": text}

    def last_checkpoint(self) -> str | None:
        """The newest `checkpoint-N` folder, or None."""
        folder = self.checkpoints_dir
        if not os.path.isdir(folder):
            return None
        steps = []
        for name in os.listdir(folder):
            if name.startswith("checkpoint-") and name.split("-")[-1].isdigit():
                if os.path.isfile(os.path.join(folder, name, "trainer_state.json")):
                    steps.append(checkpoint_step(name))
        return os.path.join(folder, f"checkpoint-{max(steps)}") if steps else None

    # --- writing ---------------------------------------------------------------------------
    def append(self, name: str, record: dict) -> None:
        """Append one JSON object as one whole line (write + flush)."""
        self.append_all(name, [record])

    def append_all(self, name: str, records: list[dict]) -> None:
        """Append JSON objects, one whole line each, in one write (+ flush)."""
        if self.readonly or not records:
            return
        lines = "".join(json.dumps(r, ensure_ascii=False, default=_json_default) + "\n" for r in records)
        if name not in self._checked_ends:  # a torn last line (killed writer): end it so these lines stay whole
            self._checked_ends.add(name)
            if _ends_torn(self.file(name)):
                lines = "\n" + lines
        try:
            with open(self.file(name), "a", encoding="utf-8") as fh:
                fh.write(lines)
                fh.flush()
        except OSError as exc:  # e.g. disk full: name the file (a write error carries no filename)
            raise OSError(exc.errno, exc.strerror, exc.filename or self.file(name)) from None

    def event(self, type: str, message: str, **fields) -> dict:
        """Record an info line, warning, alert or fault in events.jsonl and return it."""
        record = EventRecord(round(time.time(), 3), type, message, fields).to_json()
        self.append(EVENTS, record)
        return record

    def save_best(self, record: BestRecord, write_adapter) -> None:
        """Replace best_adapter/ with what `write_adapter(folder)` writes, then best.json with `record`.

        The new folder is written beside the old one and swapped in, so a crash leaves one whole adapter.
        """
        if self.readonly:
            return
        target, partial, old = self.file(BEST_ADAPTER), self.file(BEST_ADAPTER + ".partial"), self.file(BEST_ADAPTER + ".old")
        for leftover in (partial, old):
            shutil.rmtree(leftover, ignore_errors=True)
        write_adapter(partial)
        if os.path.isdir(target):
            os.replace(target, old)
        os.replace(partial, target)
        shutil.rmtree(old, ignore_errors=True)
        self.write_json(BEST, record.to_json())

    def write_json(self, name: str, obj: Any) -> None:
        """Write a whole JSON file atomically (temp file + rename)."""
        if self.readonly:
            return
        tmp = self.file(name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=1, ensure_ascii=False, default=_json_default)
        os.replace(tmp, self.file(name))

    def read_json(self, name: str) -> Any:
        try:
            with open(self.file(name), encoding="utf-8") as fh:
                return json.load(fh)
        except (OSError, json.JSONDecodeError):
            return None

    def keep_steps_up_to(self, name: str, step: int) -> int:
        """Drop records with step > `step` (and any torn line) from a jsonl file; returns lines dropped.

        Used on --resume: the trainer restarts from the checkpoint at `step`, so later lines would
        otherwise appear twice.
        """
        path = self.file(name)
        if self.readonly or not os.path.exists(path):
            return 0
        with open(path, "rb") as fh:
            total = sum(1 for _ in fh)
        kept = [r for r in read_jsonl(path) if int(r.get("step", 0)) <= step]
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            for record in kept:
                fh.write(json.dumps(record, ensure_ascii=False, default=_json_default) + "\n")
        os.replace(tmp, path)
        return total - len(kept)

    def keep_reward_file(self, spec: str, content: bytes, first_step: int) -> dict | None:
        """Record a version of a user reward file: its copy under reward_code/ and a reward_code.json entry.

        Nothing is written when it is the spec's latest recorded version already (same sha256); returns
        the new entry, else None.
        """
        if self.readonly:
            return None
        digest = hashlib.sha256(content).hexdigest()
        latest = [r for r in self.reward_files() if r.get("spec") == spec]
        if latest and latest[-1].get("sha256") == digest:
            return None
        stem = os.path.basename(spec.rsplit(":", 1)[0] if not spec.endswith(".py") else spec)
        relative = f"{REWARD_CODE}/{digest[:16]}-{stem}"
        copy = self.file(relative)
        if not os.path.isfile(copy):
            os.makedirs(self.file(REWARD_CODE), exist_ok=True)
            with open(copy + ".tmp", "wb") as fh:
                fh.write(content)
            os.replace(copy + ".tmp", copy)
        record = RewardFileRecord(spec=spec, file=relative, sha256=digest, first_step=int(first_step)).to_json()
        self.write_json(REWARD_CODE_MANIFEST, [*self.reward_files(), record])
        return record

    def keep_reward_files_up_to(self, step: int) -> int:
        """Drop reward_code.json entries first used after `step` (--resume redoes those steps); returns entries dropped.

        A copy no remaining entry names is deleted with its entry.
        """
        records = self.reward_files()
        kept = [r for r in records if int(r.get("first_step", 0)) <= step]
        if self.readonly or len(kept) == len(records):
            return 0
        self.write_json(REWARD_CODE_MANIFEST, kept)
        for name in {r.get("file") for r in records} - {r.get("file") for r in kept}:
            if isinstance(name, str) and os.path.isfile(self.file(name)):
                os.remove(self.file(name))
        return len(records) - len(kept)

    # --- reading ---------------------------------------------------------------------------
    def reward_files(self) -> list[dict]:
        """reward_code.json's entries (RewardFileRecord dicts) in the order recorded; [] when absent or garbled."""
        data = self.read_json(REWARD_CODE_MANIFEST)
        return [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []

    def metrics(self) -> list[dict]:
        return read_jsonl(self.file(METRICS))

    def base_model(self) -> dict | None:
        """base_model.json (a BaseModelRecord dict), or None for runs from before it was written, or garbled."""
        data = self.read_json(BASE_MODEL)
        fields = {f.name for f in dataclasses.fields(BaseModelRecord)}
        return data if isinstance(data, dict) and fields <= set(data) else None

    def forecast(self) -> dict | None:
        """forecast.json (kl none: the success forecast per step), or None when absent, garbled or empty."""
        data = self.read_json(FORECAST)
        return data if isinstance(data, dict) and isinstance(data.get("steps"), list) and data["steps"] else None

    def completions(self) -> list[dict]:
        return read_jsonl(self.file(COMPLETIONS))

    def events(self) -> list[dict]:
        return read_jsonl(self.file(EVENTS))

    def p_ref(self) -> dict | None:
        return self.read_json(P_REF)

    def best(self) -> dict | None:
        """best.json (a BestRecord dict) when best_adapter/ holds an adapter, else None (no grpo.eval_steps, or garbled)."""
        data = self.read_json(BEST)
        fields = {f.name for f in dataclasses.fields(BestRecord)}
        if not isinstance(data, dict) or not fields <= set(data):
            return None
        return data if os.path.isfile(os.path.join(self.file(BEST_ADAPTER), "adapter_config.json")) else None

    def eval_compare(self) -> dict | None:
        """eval_compare.json ({"base": metrics, "trained": metrics, ...}), or None when absent or garbled."""
        data = self.read_json(EVAL_COMPARE)
        if not isinstance(data, dict) or not isinstance(data.get("base"), dict) or not isinstance(data.get("trained"), dict):
            return None
        return data


def checkpoint_step(path: str) -> int:
    """The step N of a `checkpoint-N` folder (its path or name)."""
    return int(os.path.basename(os.path.normpath(path)).rsplit("-", 1)[-1])


# --- the step-time breakdown (train/step_timer.py writes it) -----------------------------------

STEP_TIME_KEYS = ("time/generation_s", "time/rewards_s", "time/train_s", "time/other_s")


def timed_rows(rows: list[dict]) -> list[dict]:
    """The metrics rows that carry all four time/<phase>_s numbers."""
    return [r for r in rows if all(isinstance(r.get(k), (int, float)) for k in STEP_TIME_KEYS)]


def eta_seconds(rows: list[dict], max_steps: int, window: int = 5) -> float | None:
    """Seconds left to max_steps at the mean step time of the last `window` logged rows, or None."""
    timed = timed_rows(rows)
    if not timed:
        return None
    last = timed[-window:]
    per_step = sum(sum(r[k] for k in STEP_TIME_KEYS) for r in last) / len(last)
    return round(max(0, max_steps - int(timed[-1].get("step", 0))) * per_step, 1)


def mean_breakdown(rows: list[dict], skip: int = 1) -> dict[str, float] | None:
    """Mean time/<phase>_s over the rows (the first `skip` steps left out: they include warm-up), or None."""
    timed = timed_rows(rows)
    timed = timed[skip:] if len(timed) > skip else timed
    if not timed:
        return None
    return {k: round(sum(r[k] for r in timed) / len(timed), 3) for k in STEP_TIME_KEYS}
