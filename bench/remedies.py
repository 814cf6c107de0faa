"""Remedies for a task the starting model rarely solves, at equal wall time (issue 27; docs/dynamics.md).

For each task and seed, every arm trains from configs/cpu-quickstart.yaml side by side (one process
each, one torch thread each, started together, so they share the machine's load alike) for the same
--minutes of training (grpo.max_minutes), with a constant learning rate (a cosine schedule needs a known
step count) and --force (the learnability gate would stop these tasks: that is the point). Arms:

    plain        the recipe as it is (uniform prompts)
    zero_std     grpo.filter_zero_std: skip prompts whose groups had no signal on their last visits
    difficulty   grpo.prompt_sampling difficulty: prompts drawn by their posterior E[p(1-p)]
    resample     grpo.resample_all_fail 2: DAPO's dynamic sampling of all-fail groups
    hints        grpo.hints: the start of the worked solution for prompts whose last group all failed
    cap96        grpo.max_completion_length 96 instead of 32: the gate's cap advice (both tasks had 84-88 %
                 of the p_ref completions cut at 32 tokens)
    hints_v1     grpo.hints under its first rule (only prompts whose own last group failed; before commit
                 dae97e4): kept in the table, it hinted no prompt
    plain_rerun  the plain recipe again, for an arm measured in a later sitting (--together): its reference
                 at that sitting's load

Then each arm's final adapter is scored by `local-grpo eval --run RUN --samples 0` (held-out greedy
pass@1 on the run's 40 held-out prompts; the plain arm with --compare, which also scores the base).
Writes bench/results/remedies-TASKS.json (a row per task x arm x seed, and per task x arm the mean and the
spread) and keeps the runs under --work; prints the markdown table for docs/dynamics.md.

    python bench/remedies.py --minutes 8 --seeds 1 2 [--tasks word_problems arith3] [--work /tmp/remedies]
    python bench/remedies.py --analyze-only --work /tmp/remedies
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

QUICKSTART = os.path.join(REPO, "configs", "cpu-quickstart.yaml")
# task name in this benchmark -> (built-in task, its options); each keeps the quickstart's system prompt
TASKS = {
    "word_problems": ("word_problems", {"digits": 2}),
    "arith3": ("arithmetic", {"digits": 2, "operands": 3, "operations": ["+", "-"]}),
}
ARMS = {
    "plain": [],
    "zero_std": ["--filter-zero-std"],
    "difficulty": ["--prompt-sampling", "difficulty"],
    "resample": ["--resample-all-fail", "2"],
    "hints": ["--hints"],
    "cap96": ["--max-completion-length", "96"],
    "plain_rerun": [],
    "hints_v1": ["--hints"],  # the code before dae97e4; running it now runs the current rule
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=8.0, help="training wall time of every arm")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--work", default="/tmp/remedies")
    parser.add_argument("--out", help="default: bench/results/remedies-TASK[-TASK].json")
    parser.add_argument("--analyze-only", action="store_true", help="read the runs in --work; train nothing")
    parser.add_argument("--together", action="store_true",
                        help="train every task x seed x arm of this call side by side (default: one task and seed at a time)")
    return parser.parse_args()


def run_dir(work: str, task: str, seed: int, arm: str) -> str:
    return os.path.join(work, task, f"seed{seed}", arm)


def train_command(task: str, seed: int, arm: str, minutes: float, output: str) -> list[str]:
    name, options = TASKS[task]
    return [sys.executable, "-m", "local_grpo.cli", "train", "--config", QUICKSTART, "--task", name,
            "--task-options", json.dumps(options), "--seed", str(seed), "--max-steps", "1000",
            "--lr-scheduler-type", "constant", "--max-minutes", str(minutes), "--save-steps", "1000",
            "--force", "--output", output, *ARMS[arm]]


def side_by_side(commands: list[list[str]], logs: list[str]) -> list[int]:
    """Start every command at once (one torch thread each) and wait for all; their exit codes."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    procs = []
    for command, log in zip(commands, logs):
        with open(log, "w", encoding="utf-8") as fh:
            procs.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT))
    return [p.wait() for p in procs]


def train_and_eval(args) -> None:
    combos = [(task, seed, arm) for task in args.tasks for seed in args.seeds for arm in args.arms]
    batches = [combos] if args.together else [[c for c in combos if c[:2] == (task, seed)]
                                              for task in args.tasks for seed in args.seeds]
    for batch in batches:
        todo = [c for c in batch if not os.path.exists(os.path.join(run_dir(args.work, *c), "summary.json"))]
        if todo:
            for combo in todo:
                os.makedirs(os.path.dirname(run_dir(args.work, *combo)), exist_ok=True)
            codes = side_by_side([train_command(task, seed, arm, args.minutes, run_dir(args.work, task, seed, arm))
                                  for task, seed, arm in todo], [run_dir(args.work, *c) + ".train.log" for c in todo])
            print(f"trained {dict(zip(map(str, todo), codes))}", flush=True)
        evals = [c for c in batch if not os.path.exists(run_dir(args.work, *c) + ".eval.json")]
        commands = [[sys.executable, "-m", "local_grpo.cli", "eval", "--run", run_dir(args.work, *c), "--samples", "0",
                     "--json", *(["--compare"] if c[2] == "plain" else [])] for c in evals]
        side_by_side_json(commands, [run_dir(args.work, *c) + ".eval.json" for c in evals])


def side_by_side_json(commands: list[list[str]], outs: list[str]) -> None:
    """Run the evals side by side; each one's stdout (its --json result) into its file."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    procs = [(subprocess.Popen(c, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True), out)
             for c, out in zip(commands, outs)]
    for proc, out in procs:
        stdout, _ = proc.communicate()
        if proc.returncode == 0:
            with open(out, "w", encoding="utf-8") as fh:
                fh.write(stdout)
        else:
            print(f"eval failed ({proc.returncode}): {out}", file=sys.stderr)


def held_out(eval_json: dict, side: str = "trained") -> float | None:
    """Held-out greedy pass@1 from `local-grpo eval --json` (with --compare: per side)."""
    if side in eval_json:  # --compare: {"base": {...}, "trained": {...}}
        result = eval_json[side]
    elif side == "trained":  # one model: {"metrics": {...}}
        result = eval_json.get("metrics", {})
    else:
        return None
    value = result.get("pass@1_greedy")
    return None if value is None else float(value)


def arm_row(path: str) -> dict | None:
    """One run: steps, time, training success (first/last quarter), groups with signal, held-out success."""
    from local_grpo import rundir

    if not os.path.exists(os.path.join(path, rundir.SUMMARY)):
        return None
    run = rundir.RunDir.open(path)
    summary = run.read_json(rundir.SUMMARY) or {}
    records = run.completions()
    steps = sorted({r["step"] for r in records})
    quarter = max(1, len(steps) // 4)

    def success(chosen) -> float | None:
        rows = [r["success"] for r in records if r["step"] in chosen]
        return round(sum(rows) / len(rows), 4) if rows else None

    groups: dict = {}
    for r in records:
        groups.setdefault((r["step"], r.get("row", r["prompt"])), []).append(r["success"])
    with_signal = sum(0 < sum(g) < len(g) for g in groups.values())
    evaluated = {}
    if os.path.exists(path + ".eval.json"):
        with open(path + ".eval.json", encoding="utf-8") as fh:
            evaluated = json.load(fh)
    p_ref = run.read_json(rundir.P_REF) or {}
    gate = next((e for e in run.events() if "verdict" in e), {})
    return {"run": path, "steps": summary.get("steps"), "train_seconds": summary.get("train_seconds"),
            "p_ref": p_ref.get("mean"), "gate": {k: gate.get(k) for k in ("verdict", "successes", "completions")},
            "completions": len(records),
            "train_success_first_quarter": success(set(steps[:quarter])),
            "train_success_last_quarter": success(set(steps[-quarter:])),
            "groups": len(groups), "groups_with_signal": with_signal,
            "held_out": held_out(evaluated) if evaluated else None,
            "base_held_out": held_out(evaluated, "base"),
            "stopped": (summary.get("early_stop") or {}).get("reason")}


def analyze(args) -> dict:
    rows = []
    for task in args.tasks:
        for seed in args.seeds:
            for arm in args.arms:
                row = arm_row(run_dir(args.work, task, seed, arm))
                if row is not None:
                    rows.append({"task": task, "seed": seed, "arm": arm, **row})
    table = {}
    for task in args.tasks:
        base = [r["base_held_out"] for r in rows if r["task"] == task and r["base_held_out"] is not None]
        for arm in args.arms:
            mine = [r for r in rows if r["task"] == task and r["arm"] == arm and r["held_out"] is not None]
            if not mine:
                continue
            values = [r["held_out"] for r in mine]
            table[f"{task}/{arm}"] = {
                "task": task, "arm": arm, "seeds": [r["seed"] for r in mine], "held_out": values,
                "held_out_mean": round(statistics.mean(values), 4), "held_out_range": [min(values), max(values)],
                "steps": [r["steps"] for r in mine], "groups_with_signal": [r["groups_with_signal"] for r in mine],
                "groups": [r["groups"] for r in mine], "base_held_out": base[0] if base else None}
    return {"minutes_per_arm": args.minutes, "tasks": {t: {"task": TASKS[t][0], "options": TASKS[t][1]} for t in args.tasks},
            "arms": {a: ARMS[a] for a in args.arms}, "machine": {"cpus": os.cpu_count(),
            "load_average_at_this_write": [round(x, 2) for x in os.getloadavg()]}, "rows": rows, "table": table}


def markdown(result: dict) -> str:
    lines = ["| task | arm | held-out greedy success per seed | mean | steps | groups with signal |",
             "|---|---|---|---|---|---|"]
    for entry in result["table"].values():
        signal = ", ".join(f"{s}/{g}" for s, g in zip(entry["groups_with_signal"], entry["groups"]))
        lines.append(f"| {entry['task']} | {entry['arm']} | {', '.join(f'{v:.3f}' for v in entry['held_out'])} | "
                     f"{entry['held_out_mean']:.3f} | {', '.join(map(str, entry['steps']))} | {signal} |")
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    started = time.time()
    if not args.analyze_only:
        train_and_eval(args)
    result = analyze(args)
    result["wall_seconds"] = None if args.analyze_only else round(time.time() - started, 1)
    args.out = args.out or os.path.join(HERE, "results", f"remedies-{'-'.join(args.tasks)}.json")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    print(markdown(result))


if __name__ == "__main__":
    main()
