"""`local-grpo rewards list | score | probe`: inspect the built-ins, score a JSONL file of completions,
probe rewards for hacks with a battery of known-wrong/known-right completions (rewards.probe).

register_cli(subparsers) adds the `rewards` command; each sub-command sets func(args) -> exit code.
Bad specs raise RewardSpecError (the main CLI prints it on one line and exits 2); a bad
completions file is reported the same way here. With --json, stdout holds exactly one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys

from rewards.errors import RewardSpecError
from rewards.registry import describe, names, parse_reward_list

from ..config import Config, RewardSpec
from ..data import load_examples
from ..tasks import RewardSet, build_reward_set
from . import reward_check

BATCH_SIZE = 64


def register_cli(subparsers) -> argparse.ArgumentParser:
    """Add `rewards list` and `rewards score` to an argparse subparsers object."""
    parser = subparsers.add_parser("rewards", help="list the built-in rewards or score a file of completions")
    commands = parser.add_subparsers(dest="rewards_command", required=True)
    listing = commands.add_parser("list", help="built-in reward names, one-line descriptions and parameters")
    listing.add_argument("--json", action="store_true", help="print one JSON object")
    listing.set_defaults(func=list_command)
    score = commands.add_parser("score", help="score completions (JSONL with 'completion' and dataset columns)")
    score.add_argument("--rewards", required=True, help="name[:weight],... or path/to/file.py:function[:weight]")
    score.add_argument("--completions", required=True, help="JSONL file: one object per line with a 'completion' "
                       "(text or chat list) and columns such as 'answer' and 'prompt' (a run's completions.jsonl works)")
    score.add_argument("--json", action="store_true", help="print one JSON object")
    score.set_defaults(func=score_command)
    probing = commands.add_parser("probe", help="score a battery of known-wrong and known-right completions "
                                  "(reward hacks) with each reward, before training")
    probing.add_argument("--rewards", required=True, help="name,... or path/to/file.py:function,... (weights ignored)")
    source = probing.add_mutually_exclusive_group()
    source.add_argument("--task", help="task whose prompts and gold answers to use: a built-in (default arithmetic) "
                        "or path/to/file.py:NAME")
    source.add_argument("--dataset", help="local .jsonl/.csv/.parquet file with question and answer columns")
    probing.add_argument("--n", type=int, default=50, help="prompts to build the battery from (default 50)")
    probing.add_argument("--json", action="store_true", help="print one JSON object")
    probing.set_defaults(func=probe_command)
    reward_check.add_check_command(commands)
    return parser


def list_command(args) -> int:
    """Print every built-in with its summary and parameters."""
    entries = [describe(name) for name in names()]
    if args.json:
        print(json.dumps({"rewards": entries}, default=repr))
        return 0
    for entry in entries:
        params = ", ".join(f"{k}={v!r}" for k, v in entry["params"].items()) or "no parameters"
        print(f"{entry['name']:<16} {entry['summary']}\n{'':<16} params: {params}")
    return 0


def read_completions(path: str) -> list[dict]:
    """Rows of a JSONL file; RewardSpecError naming file:line for a bad line (a torn last line is skipped)."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
    except OSError as error:
        raise RewardSpecError(f"--completions: cannot read {path}: {error.strerror}") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines) or (number == len(lines) - 1 and not lines[-1].strip()):
                continue  # a torn last line, as the run directory contract allows
            raise RewardSpecError(f"--completions: {path}:{number} is not valid JSON") from None
        if not isinstance(row, dict) or "completion" not in row:
            raise RewardSpecError(f"--completions: {path}:{number} has no 'completion' field")
        rows.append(row)
    if not rows:
        raise RewardSpecError(f"--completions: {path} has no completions")
    return rows


def batch_kwargs(rows: list[dict]) -> dict:
    """Dataset columns as keyword lists (prompt → prompts), like the trainer passes them."""
    keys = sorted({k for row in rows for k in row} - {"completion", "rewards", "total", "step"})
    kwargs = {("prompts" if k == "prompt" else k): [row.get(k) for row in rows] for k in keys}
    return kwargs


def reward_list(text: str) -> RewardSet:
    """The --rewards list built like a run's rewards (unique keys); a bare file.py stands for each of its functions."""
    specs = [RewardSpec(name=spec, weight=weight) for spec, weight in parse_reward_list(text)]
    return build_reward_set(specs, expand_files=True, field="--rewards")


def score_rows(reward_fns: list, rows: list[dict]) -> dict[str, list]:
    """Scores of every reward for every row, in batches."""
    scores: dict[str, list] = {fn.__name__: [] for fn in reward_fns}
    for start in range(0, len(rows), BATCH_SIZE):
        batch = rows[start:start + BATCH_SIZE]
        completions = [row["completion"] for row in batch]
        kwargs = batch_kwargs(batch)
        for fn in reward_fns:
            scores[fn.__name__].extend(fn(completions, **kwargs))
    return scores


def summary(values: list, faults: dict) -> dict:
    """mean, std, fraction None and fault counts of one reward's scores."""
    present = [v for v in values if v is not None]
    return {"mean": statistics.fmean(present) if present else None,
            "std": statistics.pstdev(present) if present else None,
            "fraction_none": 1 - len(present) / len(values) if values else 0.0,
            "faults": dict(faults)}


def score_command(args) -> int:
    """Score the completions file with the weighted reward list; print rows and a summary."""
    reward_set = reward_list(args.rewards)
    reward_fns = reward_set.functions
    rows = read_completions(args.completions)
    scores = score_rows(reward_fns, rows)
    totals = [reward_set.total({key: values[i] for key, values in scores.items()}) for i in range(len(rows))]
    report = {
        "rewards": [{"name": key, "weight": w} for key, w in zip(reward_set.keys, reward_set.weights)],
        "completions": [{"index": i, "scores": {fn.__name__: scores[fn.__name__][i] for fn in reward_fns},
                         "total": totals[i]} for i in range(len(rows))],
        "summary": {fn.__name__: summary(scores[fn.__name__], fn.fault_counts) for fn in reward_fns},
        "events": [event for fn in reward_fns for event in fn.drain_events()],
    }
    if args.json:
        print(json.dumps(report, allow_nan=False))
    else:
        print_report(report)
    return 0


def probe_rows(args) -> list[dict]:
    """Prompt rows (question, answer, countdown columns) of --task or --dataset."""
    if args.n < 1:
        raise RewardSpecError(f"--n: must be at least 1, got {args.n}")
    config = Config()
    config.data.task, config.data.dataset = args.task or "arithmetic", args.dataset
    config.data.num_train, config.data.num_heldout = args.n, 0
    return load_examples(config)[0][: args.n]


def probe_command(args) -> int:
    """Probe every reward with the battery built from the task's prompts; print the table or JSON."""
    from rewards.probe import format_table, probe

    reward_fns = reward_list(args.rewards).functions
    rows = probe_rows(args)
    columns = {}
    if all("numbers" in row and "target" in row for row in rows):
        columns = {"nums": [row["numbers"] for row in rows], "target": [row["target"] for row in rows]}
    report = probe(reward_fns, [row["question"] for row in rows], [row["answer"] for row in rows], columns)
    if args.json:
        print(json.dumps(report, allow_nan=False, default=str))
    else:
        print(format_table(report))
    return 0


def cell(value) -> str:
    """A score for the table (blank-ish for None)."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def print_report(report: dict) -> None:
    """The human-readable table: one row per completion, then the summary per reward."""
    columns = [r["name"] for r in report["rewards"]]
    print("  #  " + "  ".join(f"{c[:14]:>14}" for c in columns) + f"  {'total':>8}")
    for row in report["completions"]:
        cells = "  ".join(f"{cell(row['scores'][c]):>14}" for c in columns)
        print(f"{row['index']:>3}  {cells}  {row['total']:>8.3f}")
    print()
    for name, stats in report["summary"].items():
        faults = ", ".join(f"{k}={v}" for k, v in stats["faults"].items()) or "none"
        print(f"{name:<20} mean {cell(stats['mean'])}  std {cell(stats['std'])}  "
              f"none {stats['fraction_none']:.0%}  faults: {faults}")
    for event in report["events"]:
        if event["type"] == "alert":
            print(f"alert: {event['message']}", file=sys.stderr)
