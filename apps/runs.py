"""Run directories as tables: the run list, curves, completions, alerts, eval comparison.

Pure functions over the files of the run-directory contract (docs/architecture.md); they never
import the trainer. Every path a user types is resolved under the app's runs folder (`resolve_under`).
"""

from __future__ import annotations

import json
import math
import os
import time

import pandas as pd

from local_grpo import rundir
from local_grpo.errors import UserError
from local_grpo.forecast import Band, ForecastView, judge_forecast
from local_grpo.rundir import read_jsonl

RUNNING_WINDOW_S = 120  # a run whose metrics changed this recently, without summary.json, is "running"

# Curve panels: title -> metric keys drawn in it ("rewards/*" expands to each reward's mean).
PANELS = {
    "reward": ("reward", "rewards/*"),
    "success": ("success", "success_predicted", "success_predicted_low", "success_predicted_high", "eval/pass@1",
                "audit/disagreement"),
    "length": ("completions/mean_length",),
    "kl": ("kl",),
    "zero_std": ("frac_reward_zero_std",),
    "step_time": rundir.STEP_TIME_KEYS,  # drawn stacked: where each step's seconds went
}
SERIES_NAMES = {
    "reward": "total reward",
    "success": "success",
    "success_predicted": "success (predicted)",
    "success_predicted_low": "forecast band (low)",
    "success_predicted_high": "forecast band (high)",
    "eval/pass@1": "held-out pass@1 (eval)",
    "audit/disagreement": "audit disagreement (reward says right, verifier says wrong)",
    "completions/mean_length": "mean length (tokens)",
    "kl": "KL",
    "frac_reward_zero_std": "fraction of zero-std groups",
    "time/generation_s": "generation",
    "time/rewards_s": "rewards",
    "time/train_s": "train (forward, backward, optimizer)",
    "time/other_s": "other",
}


# --- paths --------------------------------------------------------------------------------

def resolve_under(root: str, user_path: str, field: str = "run") -> str:
    """`user_path` (relative to root, or absolute inside it) as an absolute path inside `root`.

    Anything that escapes root (`..`, an absolute path elsewhere, a symlink out) raises UserError.
    """
    text = (user_path or "").strip()
    if not text:
        raise UserError(f"{field}: empty path (give a folder name inside {root})")
    root_real = os.path.realpath(root)
    candidate = os.path.realpath(os.path.join(root_real, text))
    if candidate != root_real and not candidate.startswith(root_real + os.sep):
        raise UserError(f"{field}: {text!r} is outside the runs folder {root_real} (use a name inside it)")
    return candidate


# --- the run list -------------------------------------------------------------------------

def is_run_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, rundir.CONFIG)) or os.path.isfile(os.path.join(path, rundir.METRICS))


def run_status(path: str, now: float | None = None) -> str:
    """finished (summary.json), running (metrics written lately), or stopped."""
    if os.path.isfile(os.path.join(path, rundir.SUMMARY)):
        return "finished"
    now = time.time() if now is None else now
    newest = max((os.path.getmtime(os.path.join(path, name)) for name in (rundir.METRICS, rundir.EVENTS,
                  rundir.COMPLETIONS, rundir.CONFIG) if os.path.exists(os.path.join(path, name))), default=0)
    return "running" if now - newest < RUNNING_WINDOW_S else "stopped"


def find_runs(root: str, depth: int = 2) -> list[str]:
    """Run directories under root (root itself, children, grandchildren), as paths relative to root."""
    found = []
    root = os.path.realpath(root)
    if not os.path.isdir(root):
        return found
    for current, dirs, _files in os.walk(root):
        rel = os.path.relpath(current, root)
        level = 0 if rel == "." else rel.count(os.sep) + 1
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in (rundir.CHECKPOINTS, rundir.ADAPTER))
        if is_run_dir(current):
            found.append(rel)
            dirs[:] = []
        elif level >= depth:
            dirs[:] = []
    return found


def runs_table(root: str) -> pd.DataFrame:
    """One row per run under root: run, status, steps, last reward, last success, modified."""
    rows = []
    for rel in find_runs(root):
        path = os.path.join(os.path.realpath(root), rel)
        metrics = read_jsonl(os.path.join(path, rundir.METRICS))
        last = metrics[-1] if metrics else {}
        modified = max((os.path.getmtime(os.path.join(path, n)) for n in os.listdir(path)), default=0)
        rows.append({
            "run": rel,
            "status": run_status(path),
            "steps": last.get("step", 0),
            "reward": _rounded(last.get("reward")),
            "success": _rounded(last.get("success")),
            "modified": time.strftime("%Y-%m-%d %H:%M", time.localtime(modified)),
            "_mtime": modified,
        })
    frame = pd.DataFrame(rows, columns=["run", "status", "steps", "reward", "success", "modified", "_mtime"])
    return frame.sort_values("_mtime", ascending=False).drop(columns="_mtime").reset_index(drop=True)


# --- curves -------------------------------------------------------------------------------

def reward_names(metrics: list[dict]) -> list[str]:
    """Reward names seen in metrics keys `rewards/<name>/mean`, in first-seen order."""
    names: list[str] = []
    for record in metrics:
        for key in record:
            if key.startswith("rewards/") and key.endswith("/mean"):
                name = key[len("rewards/"):-len("/mean")]
                if name not in names:
                    names.append(name)
    return names


# Series drawn as logged, never smoothed: a forecast is smooth already, eval points are few and far apart.
UNSMOOTHED = ("success_predicted", "success_predicted_low", "success_predicted_high", "eval/pass@1",
              *rundir.STEP_TIME_KEYS)
RAW_SUFFIX = " (raw)"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
RAW_ALPHA = "40"  # the raw line's opacity (hex alpha appended to its series colour): faint


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over the last `window` values (fewer at the start); window <= 1 returns the values."""
    if window <= 1:
        return [float(v) for v in values]
    return [float(v) for v in pd.Series(values, dtype="float64").rolling(window, min_periods=1).mean()]


def curve_frames(metrics: list[dict], smoothing: int = 1, forecast: dict | None = None,
                 verdict: ForecastView | None = None) -> dict[str, pd.DataFrame]:
    """Long-format frames (step, value, series) for each panel in PANELS; empty frames when absent.

    With smoothing > 1 each noisy series is its moving average over that many logged steps, and the
    logged values stay beside it as the series "<name> (raw)" (drawn faint: `curve_colors`).
    `forecast` (RUN_DIR/forecast.json, `rundir.RunDir.forecast`) extends the forecast series past the last logged step.
    The forecast's point is drawn only where it may be shown (local_grpo.forecast's rule): on a logged step when
    its line says `forecast_shown`, past the last one when `verdict` (the rule's verdict at the last logged step,
    `forecast.judge_logged`) allows that step's band; its band is always drawn.
    """
    frames = {}
    for panel, keys in PANELS.items():
        rows = _forecast_rows(metrics, forecast, keys, verdict)
        for key in keys:
            expanded = [f"rewards/{n}/mean" for n in reward_names(metrics)] if key == "rewards/*" else [key]
            for metric in expanded:
                label = SERIES_NAMES.get(metric) or metric[len("rewards/"):-len("/mean")]
                points = [(record["step"], float(record[metric])) for record in metrics
                          if _is_number(record.get(metric)) and _is_number(record.get("step"))
                          and (metric != "success_predicted" or record.get("forecast_shown") is True)]
                if smoothing > 1 and metric not in UNSMOOTHED and points:
                    rows += [{"step": step, "value": value, "series": label + RAW_SUFFIX} for step, value in points]
                    points = list(zip([p[0] for p in points], moving_average([p[1] for p in points], smoothing)))
                rows += [{"step": step, "value": value, "series": label} for step, value in points]
        frames[panel] = pd.DataFrame(rows, columns=["step", "value", "series"]).astype({"step": "int64", "value": "float64"})
    return frames


def _forecast_rows(metrics: list[dict], forecast: dict | None, keys, verdict: ForecastView | None) -> list[dict]:
    """The forecast's band for the steps not logged yet, for the panel showing `keys`, and its point where
    `verdict`'s measurement allows it (local_grpo.forecast.judge_forecast on that step's band)."""
    if not forecast or "success_predicted" not in keys:
        return []
    last = max((r["step"] for r in metrics if _is_number(r.get("step"))), default=0)
    rows = []
    columns = [forecast.get(key) or [] for key in ("success_predicted", "success_predicted_low", "success_predicted_high")]
    for step, point, low, high in zip(forecast.get("steps") or [], *columns):
        if not (_is_number(step) and step > last and all(_is_number(v) for v in (point, low, high))):
            continue
        rows += [{"step": step, "value": float(low), "series": SERIES_NAMES["success_predicted_low"]},
                 {"step": step, "value": float(high), "series": SERIES_NAMES["success_predicted_high"]}]
        if verdict is not None and judge_forecast(Band(point, low, high), verdict.beside, verdict.measured).shown:
            rows.append({"step": step, "value": float(point), "series": SERIES_NAMES["success_predicted"]})
    return rows


def curve_colors(frame: pd.DataFrame) -> dict[str, str]:
    """A colour per series of a curve frame; a "(raw)" series gets its smoothed series' colour, faint."""
    colors: dict[str, str] = {}
    for series in [s for s in dict.fromkeys(frame["series"]) if not s.endswith(RAW_SUFFIX)]:
        colors[series] = PALETTE[len(colors) % len(PALETTE)]
    for series in [s for s in dict.fromkeys(frame["series"]) if s.endswith(RAW_SUFFIX)]:
        base = colors.setdefault(series[: -len(RAW_SUFFIX)], PALETTE[len(colors) % len(PALETTE)])
        colors[series] = base + RAW_ALPHA
    return colors


def kl_note(run_path: str, frame: pd.DataFrame) -> str:
    """Why the KL panel is empty ("" when it has points): no KL term with beta = 0, or none logged yet."""
    if not frame.empty:
        return ""
    grpo = read_config(run_path).get("grpo") or {}
    kl, beta = grpo.get("kl"), grpo.get("beta", 0.0)
    if kl in (None, "none") and _is_number(beta) and beta == 0:
        return ("**KL: not plotted.** This run trains with `grpo.beta: 0` (config.yaml): there is no reference "
                "model and no KL term, so the trainer logs no KL. Set `--beta` above 0 (or `--kl mirror`) to "
                "keep the policy near a reference.")
    if kl == "none":
        return "**KL: not plotted.** This run sets `grpo.kl: none` (config.yaml): no KL term is computed."
    return "**KL:** no value logged yet."


# --- one prompt across steps --------------------------------------------------------------

def prompt_choices(completions: list[dict]) -> list[tuple[str, str]]:
    """(label, prompt) for every prompt in completions.jsonl, the most often logged first; the label
    says how many steps logged it."""
    steps: dict[str, set] = {}
    for record in completions:
        steps.setdefault(str(record.get("prompt", "")), set()).add(record.get("step", 0))
    ranked = sorted(steps, key=lambda p: -len(steps[p]))
    return [(f"{_short(' '.join(p.split()), 90)} ({len(steps[p])} steps)", p) for p in ranked]


def prompt_history(completions: list[dict], prompt: str) -> pd.DataFrame:
    """The same prompt's completions across steps, oldest first: step, completion, each reward, total, success."""
    chosen = [r for r in completions if str(r.get("prompt", "")) == (prompt or "")]
    table = completions_table(sorted(chosen, key=lambda r: r.get("step", 0)), "all", limit=len(chosen) or 1)
    return table.drop(columns=["prompt"])


def prompt_curve(completions: list[dict], prompt: str) -> pd.DataFrame:
    """Per step, that prompt's success rate and mean total (long format: step, value, series)."""
    by_step: dict[int, list[dict]] = {}
    for record in completions:
        if str(record.get("prompt", "")) == (prompt or "") and _is_number(record.get("step")):
            by_step.setdefault(int(record["step"]), []).append(record)
    rows = []
    for step in sorted(by_step):
        records = by_step[step]
        totals = [r["total"] for r in records if _is_number(r.get("total"))]
        successes = [float(r["success"]) for r in records if isinstance(r.get("success"), bool) or _is_number(r.get("success"))]
        if successes:
            rows.append({"step": step, "value": sum(successes) / len(successes), "series": "success rate"})
        if totals:
            rows.append({"step": step, "value": sum(totals) / len(totals), "series": "mean total reward"})
    return pd.DataFrame(rows, columns=["step", "value", "series"]).astype({"step": "int64", "value": "float64"})


# --- completions --------------------------------------------------------------------------

COMPLETION_VIEWS = ("latest", "best", "worst", "faults")


def completion_text(record: dict) -> str:
    """What the Watch tab shows of one completions.jsonl record's completion (the tables and the per-prompt
    history all go through here): its text, or a tool task's turns one after another, each tool call as
    `[tool call] calculator(expression="80 - 57")` and each result as `[calculator] 23`."""
    turns = record.get("turns")
    if not turns:
        return str(record.get("completion", ""))
    parts = []
    for turn in turns:
        if turn.get("role") == "tool":
            parts.append(f"[{turn.get('name') or 'tool'}] {turn.get('content', '')}")
            continue
        if turn.get("content"):
            parts.append(str(turn["content"]))
        for call in turn.get("tool_calls") or []:
            arguments = call.get("arguments")
            shown = (", ".join(f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in arguments.items())
                     if isinstance(arguments, dict) else json.dumps(arguments, ensure_ascii=False))
            parts.append(f"[tool call] {call.get('name')}({shown})")
    return "\n".join(parts)


def completions_table(completions: list[dict], view: str = "latest", limit: int = 50) -> pd.DataFrame:
    """The completions to show: latest step's, best/worst by total, those with a failed (null) reward,
    or ("all") every one in the given order.

    Columns: step, prompt, answer, completion, one per reward, total, success.
    """
    if view not in (*COMPLETION_VIEWS, "all"):
        raise UserError(f"view: {view!r} is not one of {', '.join(COMPLETION_VIEWS)}")
    names: list[str] = []
    for record in completions:
        for name in (record.get("rewards") or {}):
            if name not in names:
                names.append(name)
    if view == "all":
        chosen = list(completions)
    elif view == "latest":
        last_step = max((r.get("step", 0) for r in completions), default=0)
        chosen = [r for r in completions if r.get("step", 0) == last_step]
    elif view == "faults":
        chosen = [r for r in completions if any(v is None for v in (r.get("rewards") or {}).values())]
        chosen = chosen[::-1]
    else:
        scored = [r for r in completions if _is_number(r.get("total"))]
        chosen = sorted(scored, key=lambda r: r["total"], reverse=(view == "best"))
    rows = []
    for record in chosen[:limit]:
        row = {
            "step": record.get("step"),
            "prompt": _short(record.get("prompt")),
            "answer": "" if record.get("answer") is None else str(record.get("answer")),
            "completion": completion_text(record),
        }
        scores = record.get("rewards") or {}
        for name in names:
            value = scores.get(name)
            row[name] = "fault" if name in scores and value is None else _rounded(value)
        row["total"] = _rounded(record.get("total"))
        row["success"] = record.get("success")
        rows.append(row)
    columns = ["step", "prompt", "answer", "completion", *names, "total", "success"]
    return pd.DataFrame(rows, columns=columns)


# --- events, eval, summary ----------------------------------------------------------------

def alerts_table(events: list[dict], limit: int = 100) -> pd.DataFrame:
    """Warnings, alerts, faults and weight changes, newest first: time, step, type, reward, message."""
    rows = []
    for event in reversed(events):
        rows.append({
            "time": time.strftime("%H:%M:%S", time.localtime(event["time"])) if _is_number(event.get("time")) else "",
            "step": event.get("step"),
            "type": event.get("type", ""),
            "reward": event.get("reward") or "",
            "message": str(event.get("message", "")),
        })
        if len(rows) >= limit:
            break
    return pd.DataFrame(rows, columns=["time", "step", "type", "reward", "message"])


def reward_fault_count(events: list[dict]) -> int:
    """Reward faults in events.jsonl (a reward raised, timed out, returned bad values; the audit disagreed)."""
    return sum(1 for e in events if rundir.event_category(e) == "reward_fault")


def signal_alerts(events: list[dict]) -> list[str]:
    """Learning-signal kinds whose latest finding in events.jsonl is an alert (not an info line)."""
    latest = {e["kind"]: rundir.event_category(e) for e in events
              if rundir.event_category(e) in ("signal_alert", "signal_info")}
    return sorted(kind for kind, category in latest.items() if category == "signal_alert")


def eval_compare_table(run_path: str) -> pd.DataFrame:
    """RUN_DIR/eval_compare.json as rows (metric, base, trained, change); empty when absent."""
    columns = ["metric", "base", "trained", "change"]
    data = rundir.RunDir(run_path).eval_compare()
    if data is None:
        return pd.DataFrame(columns=columns)
    rows = []
    for metric in dict.fromkeys([*data["base"], *data["trained"]]):
        base, trained = data["base"].get(metric), data["trained"].get(metric)
        if not (_is_number(base) or _is_number(trained)):
            continue
        change = trained - base if _is_number(base) and _is_number(trained) else None
        rows.append({"metric": metric, "base": _rounded(base), "trained": _rounded(trained), "change": _rounded(change)})
    return pd.DataFrame(rows, columns=columns)


def run_overview(run_path: str, metrics: list[dict], events: list[dict], verdict: ForecastView | None = None) -> str:
    """A few lines of markdown: status, steps, model/task/rewards, last reward and success, and the success
    forecast as `verdict` (the forecast rule's verdict at the last logged step) allows it."""
    status = run_status(run_path)
    config = read_config(run_path)
    last = metrics[-1] if metrics else {}
    rewards_text = ", ".join(f"{r.get('name')}×{r.get('weight')}" for r in config.get("rewards") or []) or "?"
    model = (config.get("model") or {}).get("name", "?")
    data = config.get("data") or {}
    task = data.get("dataset") or data.get("task") or "?"
    max_steps = (config.get("grpo") or {}).get("max_steps", "?")
    lines = [
        f"**{os.path.basename(run_path)}** — {status}, step {last.get('step', 0)} of {max_steps}",
        f"model `{model}` · task `{task}` · rewards {rewards_text}",
    ]
    eta = rundir.eta_seconds(metrics, max_steps) if status == "running" and isinstance(max_steps, int) else None
    if eta is not None:
        lines[0] += f" · ETA {format_duration(eta)} (at the last steps' pace)"
    if last:
        parts = [f"reward {last.get('reward', float('nan')):.3f}"] if _is_number(last.get("reward")) else []
        if _is_number(last.get("success")):
            parts.append(f"success {last['success']:.2f}")
        lines.append(" · ".join(parts))
    if verdict is not None:
        lines.append(f"success forecast: {verdict.describe()}")
    faults = reward_fault_count(events)
    if faults:
        lines.append(f"⚠ {faults} reward fault(s) — see Alerts")
    signals = signal_alerts(events)
    if signals:
        lines.append(f"⚠ {len(signals)} learning-signal alert(s): {', '.join(signals)} — see Alerts")
    return "  \n".join(lines)


def format_duration(seconds: float) -> str:
    """`1 h 02 min`, `12 min 05 s` or `40 s`."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"


def read_config(run_path: str) -> dict:
    """config.yaml as a dict ({} when missing or unreadable)."""
    import yaml

    try:
        with open(os.path.join(run_path, rundir.CONFIG), encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def configured_weights(run_path: str) -> dict[str, float]:
    """The run's reward weights by reward key (as in metrics): control.json's overrides over config.yaml's."""
    import rewards

    specs = [spec for spec in read_config(run_path).get("rewards") or [] if isinstance(spec, dict)]
    # user-file rewards are named by their function; repeats get the trainer's keys (name#2, ...)
    names = [str(spec.get("name", "")).rsplit(":", 1)[1] if ".py:" in str(spec.get("name", ""))
             else str(spec.get("name", "")) for spec in specs]
    weights = {key: float(spec.get("weight", 1.0)) for key, spec in zip(rewards.unique_keys(names), specs)}
    control = rundir.RunDir(run_path).read_json(rundir.CONTROL) or {}
    if isinstance(control, dict):
        weights.update({k: float(v) for k, v in (control.get("weights") or {}).items() if _is_number(v)})
    return weights


# --- helpers ------------------------------------------------------------------------------

def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _rounded(value, digits: int = 4):
    return round(float(value), digits) if _is_number(value) else None


def _short(text, limit: int = 200) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
