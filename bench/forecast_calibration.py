"""Calibration of the kl-none success forecast over finished runs: does its 80 % band cover what happened?

    python bench/forecast_calibration.py RUN_DIR [RUN_DIR ...] [--out bench/results/forecast_calibration.json]
    python bench/forecast_calibration.py --stored bench/results/forecast_coverage.json ...   (stored replays)

Each RUN_DIR is a finished `local-grpo train` run with `grpo.beta: 0` (kl none) and p_ref measured, trained
for at least FIT_STEPS + WINDOW steps. For each run, read through local_grpo.rundir:

- forecast.json: the curve and 80 % band training fitted on steps 1..FIT_STEPS (from step FIT_STEPS + 1 on
  the file is no longer rewritten, so it is exactly the forecast the run showed from then on);
- completions.jsonl: the success of every completion, per trainer step;
- metrics.jsonl: the logged steps and what the run showed at its end (forecast.judge_logged, the rule the
  summary and the studio use).

Scored: the band over the last WINDOW logged steps (the mean of its per-step low and high ends) against the
measured success of those steps (all their completions pooled). The bar (issue 27): at least 12 runs on at
least 3 tasks, and the band contains the measured mean in 65-95 % of runs. Runs too short, trained with a
KL term, or without p_ref are listed as excluded with the reason. Writes one JSON with a row per run and
the summary; prints the summary and a markdown table for docs/dynamics.md. `--stored` scores the runs
kept only as bench/forecast_coverage.py results (their forecast replayed from steps 1-10, success per step).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import yaml  # noqa: E402

from local_grpo import forecast, rundir  # noqa: E402
from local_grpo.rundir import RunDir  # noqa: E402

RESULTS = os.path.join(REPO, "bench", "results", "forecast_calibration.json")
FIT_STEPS = 10  # the band is the one made from steps 1-10 (train.p_ref.FIT_STEPS, which training uses)
WINDOW = 10  # ... scored against the measured mean success of the run's last 10 logged steps
COVERAGE_BAR = (0.65, 0.95)
MIN_RUNS, MIN_TASKS = 12, 3


def run_task(config: dict) -> str:
    """The run's task as its config names it: the dataset file, or the built-in task with its options."""
    data = config.get("data") or {}
    if data.get("dataset"):
        return f"dataset {data['dataset']}"
    options = data.get("task_options") or {}
    return str(data.get("task") or "?") + (f" {json.dumps(options, sort_keys=True)}" if options else "")


def score(path: str) -> dict:
    """One finished run's row: the band over its last WINDOW steps, the measured success there, what it showed."""
    run = RunDir.open(path)
    with open(run.file(rundir.CONFIG), encoding="utf-8") as fh:
        config = yaml.safe_load(fh) or {}
    grpo = config.get("grpo") or {}
    row = {"run_dir": run.path, "source": "run directory", "task": run_task(config), "seed": grpo.get("seed")}
    curve = run.forecast()
    if curve is None:
        return {**row, "excluded": "no forecast.json (a KL run, or p_ref not measured)"}
    logged = [m for m in run.metrics() if isinstance(m.get("step"), int) and "reward" in m]
    counts = forecast.success_counts(rundir.iter_jsonl(run.file(rundir.COMPLETIONS)))
    return score_curve(row, curve, logged, counts)


def score_curve(row: dict, curve: dict, logged: list[dict], counts: dict) -> dict:
    """The row for a forecast curve (forecast.json's fields), the logged metrics lines and the success
    counts per trainer step (forecast.success_counts)."""
    if curve.get("fit_steps") != FIT_STEPS:
        return {**row, "excluded": f"the forecast was fitted on steps 1-{curve.get('fit_steps')}, not 1-{FIT_STEPS}"}
    if len(logged) < WINDOW + 1 or logged[-WINDOW - 1]["step"] < FIT_STEPS:
        return {**row, "excluded": f"{len(logged)} logged steps: the last {WINDOW} overlap steps 1-{FIT_STEPS}"}
    after, last = logged[-WINDOW - 1]["step"], logged[-1]["step"]
    tallies = [counts[s] for s in counts if after < s <= last]
    measured = forecast.MeasuredSuccess(sum(k for k, _ in tallies), sum(n for _, n in tallies))
    by_step = {s: i for i, s in enumerate(curve["steps"])}
    window = [m["step"] for m in logged[-WINDOW:] if m["step"] in by_step]

    def mean(key):
        return sum(curve[key][by_step[s]] for s in window) / len(window)

    low, high = mean("success_predicted_low"), mean("success_predicted_high")
    end = by_step[window[-1]]
    shown = forecast.judge_logged(logged, counts)
    return {**row, "excluded": None, "steps": last, "window": [window[0], window[-1]],
            "beta": curve.get("beta"), "norm": (curve.get("params") or {}).get("norm", curve.get("norm")),
            "forecast_window": {"median": round(mean("success_predicted"), 4), "low": round(low, 4), "high": round(high, 4)},
            "width_window": round(high - low, 4),
            "width_last_step": round(curve["success_predicted_high"][end] - curve["success_predicted_low"][end], 4),
            "measured_window": round(measured.mean, 4), "measured_samples": measured.samples,
            "contained": low <= measured.mean <= high,
            "shown_at_end": shown.shown, "shown_reason": shown.reason}


def stored_rows(path: str, completions_per_step: int) -> list[dict]:
    """Rows from a stored bench/forecast_coverage.py result: each run's forecast replayed from steps 1-10 and
    its measured success per step (a fraction of `completions_per_step` completions; the run directories
    themselves were not kept). The metrics lines are rebuilt with the curve's forecast at each step, as
    training logs it from step 11 on, so the rule sees what the run showed."""
    with open(path, encoding="utf-8") as fh:
        stored = json.load(fh)
    rows = []
    for run in stored["runs"]:
        curve = {"fit_steps": run["fit_steps"], "beta": run["beta"], "norm": run.get("norm"), **run["forecast"]}
        curve["steps"] = list(range(1, len(curve["success_predicted"]) + 1))
        logged, counts = [], {}
        for step, success in enumerate(run["measured"], start=1):
            if not isinstance(success, (int, float)) or step > len(curve["steps"]):
                continue
            counts[step] = (round(success * completions_per_step), completions_per_step)
            logged.append({"step": step, "reward": None, **{key: curve[key][step - 1] for key in
                           ("success_predicted", "success_predicted_low", "success_predicted_high")}})
        row = {"run_dir": run["run_dir"], "source": os.path.relpath(path, REPO),
               "task": "arithmetic (quickstart recipes)", "seed": run.get("seed")}
        rows.append(score_curve(row, curve, logged, counts))
    return rows


def summarize(rows: list[dict]) -> dict:
    scored = [r for r in rows if not r["excluded"]]
    tasks = sorted({r["task"] for r in scored})
    contained = sum(r["contained"] for r in scored)
    coverage = contained / len(scored) if scored else None
    # how sure the coverage is from this many runs: a Wilson interval at the band's own level
    low, high = forecast.MeasuredSuccess(contained, len(scored)).interval(z=1.2816) if scored else (None, None)
    return {
        "fit_steps": FIT_STEPS, "window": WINDOW, "level": forecast.BAND_LEVEL, "coverage_bar": list(COVERAGE_BAR),
        "runs": len(rows), "runs_scored": len(scored), "tasks": tasks, "contained": contained,
        "coverage": None if coverage is None else round(coverage, 4),
        "coverage_80pct_interval": None if low is None else [round(low, 3), round(high, 3)],
        "median_width_window": round(statistics.median(r["width_window"] for r in scored), 4) if scored else None,
        "median_width_last_step": round(statistics.median(r["width_last_step"] for r in scored), 4) if scored else None,
        "shown_at_end": sum(r["shown_at_end"] for r in scored),
        "shown_and_contained": sum(r["shown_at_end"] and r["contained"] for r in scored),
        "met": (len(scored) >= MIN_RUNS and len(tasks) >= MIN_TASKS and coverage is not None
                and COVERAGE_BAR[0] <= coverage <= COVERAGE_BAR[1]),
    }


def markdown(rows: list[dict]) -> str:
    lines = [f"| task | seed | steps | forecast over the last {WINDOW} steps, 80 % band | measured | inside? | width "
             "| shown at the end? |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["excluded"]:
            lines.append(f"| {r['task']} | {r['seed']} | - | excluded: {r['excluded']} | | | | |")
            continue
        f = r["forecast_window"]
        lines.append(f"| {r['task']} | {r['seed']} | {r['steps']} | {f['median']:.2f} [{f['low']:.2f}, {f['high']:.2f}] "
                     f"| {r['measured_window']:.3f} | {'**yes**' if r['contained'] else 'no'} | {r['width_window']:.2f} "
                     f"| {'yes' if r['shown_at_end'] else 'too early'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", help="finished run directories")
    parser.add_argument("--stored", nargs="*", default=[],
                        help="stored bench/forecast_coverage.py results (arithmetic quickstart recipes) to score as well")
    parser.add_argument("--completions-per-step", type=int, default=16,
                        help="for --stored: completions a step (the quickstart recipes' per_device_train_batch_size)")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args()
    rows = [score(path) for path in args.runs]
    for path in args.stored:
        rows += stored_rows(path, args.completions_per_step)
    if not rows:
        parser.error("give run directories or --stored results")
    summary = summarize(rows)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump({"summary": summary, "runs": rows}, fh, indent=1)
    print(json.dumps(summary))
    print(markdown(rows))


if __name__ == "__main__":
    sys.exit(main())
