"""The rewards check from the studio: build its Config, run it in a child process, show its result as tables.

The check (local_grpo.reward_check, docs/reward-check.md) loads the base model and samples it, so it
runs as `python -m local_grpo.cli rewards check --config CONFIG --json` in its own process, like
training: the app never holds the model, and the check's stderr progress lines
("rewards check: completions sampled 8/64") drive the panel's progress bar. The Config itself is
built here from the form (preset < form fields, `tasks.fill_defaults`, `config.validate`), so bad
input fails at once with the field's name. Its samples are cached under RUNS/.reward-check-cache/;
`cached_samples` turns a cache file into the designer's sample lines.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from local_grpo import config as config_mod
from local_grpo import tasks
from local_grpo.errors import UserError

CACHE_FOLDER = ".reward-check-cache"  # under the runs folder, as `rewards check` defaults to runs/.reward-check-cache
DEFAULT_TIMEOUT_S = 3 * 3600  # a first check on CPU samples for minutes (docs/reward-check.md: 13 min measured)
PROGRESS_LINE = re.compile(r"rewards check: (?P<label>[a-z ]+?) (?:(?P<done>\d+)/(?P<total>\d+)|done)\s*$")
STAGES = {"completions sampled": "generate", "completions scored": "score", "soundness probe": "probe"}


@dataclass
class CheckRequest:
    """The check panel's form: like the Train form (model, preset, task or dataset, rewards) plus K and --fresh."""

    model: str = "embedded"
    preset: str = ""
    task: str = "arithmetic"
    dataset: str = ""
    rewards: dict[str, float] = field(default_factory=dict)  # spec -> weight; empty = the task's defaults
    num_generations: int | None = None
    max_completion_length: int | None = None
    prompts: int = 8
    fresh: bool = False


def check_config(request: CheckRequest) -> config_mod.Config:
    """The Config the check judges: preset < form fields, the task's defaults filled, validated."""
    from local_grpo import models
    from local_grpo.presets import apply_preset

    if request.prompts is None or int(request.prompts) < 1:
        raise UserError(f"prompts: must be >= 1, got {request.prompts}")
    data = apply_preset(request.preset, {}, source="preset") if request.preset else {}
    config = config_mod.from_dict(data, source="check form")
    config.model.name = local_or_name((request.model or "embedded").strip())
    if (request.dataset or "").strip():
        config.data.dataset = local_or_name(request.dataset.strip())
    else:
        config.data.task, config.data.dataset = request.task or "arithmetic", None
    for name, value in (("num_generations", request.num_generations),
                        ("max_completion_length", request.max_completion_length)):
        if value not in (None, ""):
            setattr(config.grpo, name, int(value))
    g = config.grpo
    if g.num_generations >= 2 and (g.per_device_train_batch_size * g.gradient_accumulation_steps) % g.num_generations:
        # the check never trains: round the batch up to whole groups rather than refuse this G
        g.per_device_train_batch_size = -(-g.per_device_train_batch_size // g.num_generations) * g.num_generations
        g.gradient_accumulation_steps = 1
    config.rewards = [config_mod.RewardSpec(name=file_spec(spec), weight=float(weight))
                      for spec, weight in request.rewards.items()]
    config.output_dir = "unused"  # the check never creates a run directory
    config = tasks.fill_defaults(config)
    config_mod.validate(config)
    models.check_name(config.model.name, config.model.gguf_file)
    return config


def local_or_name(value: str) -> str:
    """An existing local path made absolute (the check runs in another folder); names pass unchanged."""
    return os.path.abspath(value) if os.path.exists(value) else value


def file_spec(spec: str) -> str:
    """`path.py:function` with an existing path made absolute; built-in names unchanged."""
    path, sep, function = spec.rpartition(":")
    if sep and path.endswith(".py") and os.path.exists(path):
        return f"{os.path.abspath(path)}:{function}"
    return spec


def check_command(config_path: str, request: CheckRequest, cache_dir: str) -> list[str]:
    from apps.launcher import python_command

    command = [*python_command(), "-m", "local_grpo.cli", "rewards", "check", "--config", config_path,
               "--prompts", str(int(request.prompts)), "--cache-dir", cache_dir, "--json"]
    return command + (["--fresh"] if request.fresh else [])


def run_check(request: CheckRequest, runs_root: str, progress: Callable[[str, int, int], None] | None = None,
              timeout_s: float = DEFAULT_TIMEOUT_S) -> dict:
    """Run the check in a child process; its --json object. UserError with the child's last line on failure."""
    config = check_config(request)
    cache_dir = os.path.join(runs_root, CACHE_FOLDER)
    os.makedirs(cache_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="studio-check-") as scratch:
        config_path = os.path.join(scratch, "check.yaml")
        config_mod.save(config, config_path)
        out_path = os.path.join(scratch, "result.json")
        with open(out_path, "w", encoding="utf-8") as out:
            process = subprocess.Popen(check_command(config_path, request, cache_dir), stdout=out,
                                       stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=scratch)
            last_lines = follow_progress(process, progress, time.monotonic() + timeout_s)
        if process.returncode is None or process.returncode < 0:
            raise UserError(f"rewards check: stopped after {timeout_s:g}s (try fewer prompts or generations)")
        if process.returncode != 0:
            raise UserError(last_lines[-1] if last_lines else f"rewards check: failed with code {process.returncode}")
        with open(out_path, encoding="utf-8") as fh:
            return json.load(fh)


def follow_progress(process: subprocess.Popen, progress, deadline: float) -> list[str]:
    """Read the child's stderr to its end, reporting progress lines; kills it past the deadline."""
    kept: list[str] = []
    for line in process.stderr:
        line = line.rstrip("\n")
        if line.strip():
            kept = (kept + [line])[-20:]
        parsed = parse_progress(line)
        if parsed and progress:
            progress(*parsed)
        if time.monotonic() > deadline:
            process.kill()
            break
    process.wait()
    return kept


def parse_progress(line: str) -> tuple[str, int, int] | None:
    """("generate"|"score"|"probe", done, total) from one of the check's progress lines, else None."""
    match = PROGRESS_LINE.search(line)
    if not match or match["label"] not in STAGES:
        return None
    if match["done"] is None:
        return STAGES[match["label"]], 1, 1
    return STAGES[match["label"]], int(match["done"]), int(match["total"])


# --- the cache, as designer samples -------------------------------------------------------

def cache_files(runs_root: str) -> list[tuple[str, str]]:
    """(label, file name) of every cached sample file, newest first; the label says model, K x G and when."""
    folder = os.path.join(runs_root, CACHE_FOLDER)
    if not os.path.isdir(folder):
        return []
    entries = []
    for name in os.listdir(folder):
        if not name.endswith(".jsonl"):
            continue
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8") as fh:
                header = json.loads(fh.readline())
            key = header["key"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        label = (f"{os.path.basename(str(key.get('model')))} · {len(key.get('prompts') or [])} prompts × "
                 f"G={key.get('num_generations')} · {header.get('created', '')} · {name}")
        entries.append((os.path.getmtime(path), label, name))
    return [(label, name) for _, label, name in sorted(entries, reverse=True)]


def cached_samples(path: str) -> list[dict]:
    """A cache file's samples as the designer's {prompt, answer, completion, group} (group: the prompt's index)."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [json.loads(line) for line in fh if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise UserError(f"check samples: {os.path.basename(path)} is not a readable cache file") from None
    if not lines or "key" not in lines[0]:
        raise UserError(f"check samples: {os.path.basename(path)} has no cache header")
    return [{"prompt": str(item.get("prompt") or ""), "answer": item.get("answer"), "completion": item.get("completion", ""),
             "group": f"prompt {item.get('group')}: {str(item.get('prompt') or '')[:60]}"} for item in lines[1:]]


# --- the result as tables -----------------------------------------------------------------

def verdict_markdown(result: dict) -> str:
    """Verdict first (plain words and why), then what was sampled, signal, p_ref, forecast and timing."""
    verdict = result["verdict"]
    icon = {"learnable": "✅"}.get(verdict["kind"], "⚠️")
    zero_std = result.get("zero_std_fraction")
    p_ref, forecast = result.get("p_ref") or {}, result.get("forecast") or {}
    cache, seconds = result.get("cache") or {}, result.get("seconds") or {}
    lines = [f"### {icon} Verdict: {verdict['text']}", f"{verdict['reason']}"]
    lines += [f"- ⚠ {warning}" for warning in verdict.get("warnings") or []]
    lines.append(f"\n`{result['model']}` on `{result['task']}`: {result['prompts']} held-out prompts × "
                 f"G={result['num_generations']} = {result['samples']} completions "
                 f"({'read from the cache' if cache.get('hit') else 'sampled now'}; {seconds.get('total', '?')} s).")
    if zero_std is not None:
        flat = sum(1 for row in result.get("per_prompt") or [] if row.get("zero_std"))
        lines.append(f"- **Zero-std groups: {flat}/{result['prompts']} ({zero_std:.0%})** give GRPO no signal "
                     f"at G={result['num_generations']}.")
    if p_ref.get("mean") is not None:
        lines.append(f"- p_ref ({p_ref['reward']} ≥ {p_ref['threshold']}): mean {p_ref['mean']:.3f}")
    if forecast:
        lines.append(f"- Forecast over {forecast['steps']} steps: success {forecast['p_ref_mean']:.3f} → "
                     f"{forecast['success_at_max_steps']:.3f} (limit p* {forecast['p_star']:.3f}). {forecast['note']}")
    return "\n".join(lines)


STATS_COLUMNS = ["reward", "weight", "mean", "std", "fraction None", "variance share", "histogram range", "faults"]


def reward_stats_table(result: dict) -> pd.DataFrame:
    """One row per reward: name, weight, mean, std, fraction None, variance share, histogram range, faults."""
    shares = result.get("variance_shares") or {}
    rows = []
    for r in result.get("rewards") or []:
        edges = r["histogram"].get("edges") or []
        rows.append({"reward": r["name"], "weight": r["weight"], "mean": _round(r["mean"]), "std": _round(r["std"]),
                     "fraction None": _round(r["fraction_none"]), "variance share": _round(shares.get(r["name"])),
                     "histogram range": f"{edges[0]:g} to {edges[-1]:g}" if edges else "",
                     "faults": ", ".join(f"{k}: {v}" for k, v in (r.get("faults") or {}).items())})
    return pd.DataFrame(rows, columns=STATS_COLUMNS)


def histogram_frame(result: dict) -> pd.DataFrame:
    """Each reward's histogram as rows (bin, count, reward) for one BarPlot.

    Every reward has its own range (lowest to highest score, in the stats table), so `bin` is the bin's
    rank, "01" (lowest scores) to "10" (highest), which keeps the rewards' shapes comparable.
    """
    rows = []
    for r in result.get("rewards") or []:
        counts = r["histogram"].get("counts") or []
        rows += [{"bin": f"{i + 1:02d}", "count": int(count), "reward": r["name"]} for i, count in enumerate(counts)]
    return pd.DataFrame(rows, columns=["bin", "count", "reward"]).astype({"count": "int64"})


def shares_frame(result: dict) -> pd.DataFrame:
    """The advantage variance shares (reward, share); empty when the total never varies within a group."""
    rows = [{"reward": name, "share": float(share)} for name, share in (result.get("variance_shares") or {}).items()
            if share is not None]
    return pd.DataFrame(rows, columns=["reward", "share"]).astype({"share": "float64"})


def per_prompt_table(result: dict) -> pd.DataFrame:
    rows = [{"prompt": row["index"], "question": row.get("question"), "answer": row.get("answer"),
             "p_ref": _round(row.get("p_ref")), "total mean": _round(row.get("total_mean")),
             "total std": _round(row.get("total_std")), "zero std": bool(row.get("zero_std"))}
            for row in result.get("per_prompt") or []]
    return pd.DataFrame(rows, columns=["prompt", "question", "answer", "p_ref", "total mean", "total std", "zero std"])


def agreement_table(result: dict) -> pd.DataFrame:
    """Per pair of rewards, the counts of both / only a / only b / neither succeeding."""
    rows = [{"a": t["a"], "b": t["b"], "both": t["both"], "only a": t["a_only"], "only b": t["b_only"],
             "neither": t["neither"]} for t in result.get("agreement") or []]
    return pd.DataFrame(rows, columns=["a", "b", "both", "only a", "only b", "neither"])


def disagreement_examples(result: dict) -> pd.DataFrame:
    """The example completions of every disagreement cell: who credits it, prompt index, completion, scores."""
    rows = []
    for t in result.get("agreement") or []:
        for cell, who in (("a_only", t["a"]), ("b_only", t["b"])):
            for example in (t.get("examples") or {}).get(cell) or []:
                scores = example.get("scores") or {}
                rows.append({"pair": f"{t['a']} vs {t['b']}", "only": who, "prompt": example.get("group"),
                             "completion": example.get("completion"),
                             "scores": ", ".join(f"{k} {_round(v)}" for k, v in scores.items())})
    return pd.DataFrame(rows, columns=["pair", "only", "prompt", "completion", "scores"])


def probe_table(result: dict) -> pd.DataFrame:
    rows = [{"reward": name, "false positive rate": _round(p["false_positive_rate"]),
             "false negative rate": _round(p["false_negative_rate"]), "battery": p.get("battery"),
             "probe completions": p.get("completions")} for name, p in (result.get("probe") or {}).items()]
    return pd.DataFrame(rows, columns=["reward", "false positive rate", "false negative rate", "battery",
                                       "probe completions"])


def _round(value, digits: int = 4):
    return None if value is None else round(float(value), digits)
