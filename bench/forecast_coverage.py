"""Coverage of the kl-none success forecast: replay the forecast made from steps 1-10 of finished runs.

    local-grpo train --config configs/cpu-quickstart.yaml --seed S --output runs/forecast/seedS   (S = 1, 2, 3)
    python bench/forecast_coverage.py runs/forecast/seed1 runs/forecast/seed2 runs/forecast/seed3

For each run it rebuilds train.p_ref.SuccessForecast exactly as training does at step FIT_STEPS + 1
(held-out counts from p_ref.json, the prompt groups of steps 1..FIT_STEPS from completions.jsonl), then
compares the forecast for steps 31-40 with the measured success of those steps (metrics.jsonl).
Acceptance (issue 13): the forecast's band over steps 31-40 contains their measured mean success,
its width at step 40 is at most 0.25, and the pooled p_ref is > 0 — on every run.
For runs that reach the window it also fits both shapes of the recurrence (mean-only, the forecast's;
mean+std, the paper's GRPO one) on steps 1..F, F = 10, 20, 30, 40 (40: in-sample), as a check of the shape.
Writes bench/results/forecast_coverage.json and docs/images/forecast_coverage.png.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import yaml  # noqa: E402

from local_grpo import dynamics, forecast, rundir  # noqa: E402
from local_grpo.config import Config  # noqa: E402
from local_grpo.config import load as load_config  # noqa: E402
from local_grpo.errors import UserError  # noqa: E402
from local_grpo.rundir import RunDir  # noqa: E402
from local_grpo.train import p_ref  # noqa: E402

RESULTS = os.path.join(REPO, "bench", "results", "forecast_coverage.json")
PLOT = os.path.join(REPO, "docs", "images", "forecast_coverage.png")
WINDOW = (31, 40)  # the steps whose measured mean the forecast must contain
MAX_WIDTH = 0.25


def run_config(run: RunDir) -> Config:
    """The run's config; a config.yaml from a newer version (keys this tree does not know) gives the
    fields the forecast reads: grpo max_steps, seed, scale_rewards, num_generations, kl_alpha."""
    try:
        return load_config(run.file(rundir.CONFIG))
    except UserError:
        with open(run.file(rundir.CONFIG), encoding="utf-8") as fh:
            grpo = (yaml.safe_load(fh) or {}).get("grpo") or {}
        config = Config()
        for key in ("max_steps", "seed", "scale_rewards", "num_generations", "kl_alpha", "beta", "kl"):
            if key in grpo:
                setattr(config.grpo, key, grpo[key])
        return config


def replay(path: str, fit_steps: int, norm: str | None = None) -> dict:
    """The forecast a run would have made from its first `fit_steps` steps, against what it measured."""
    run = RunDir.open(path)
    config = run_config(run)
    measured = run.read_json(rundir.P_REF)
    scratch = tempfile.mkdtemp(prefix="forecast-replay-")
    try:
        replica = RunDir.create(os.path.join(scratch, "run"))
        for record in rundir.iter_jsonl(run.file(rundir.COMPLETIONS)):
            if record.get("step", 0) <= fit_steps:
                replica.append(rundir.COMPLETIONS, record)
        params = p_ref.forecast_params(config)
        if norm:  # the mean+std shape takes TRL's ε for std scaling (dynamics.mapping_from_trl)
            params["norm"] = norm
            params["eps"] = dynamics.mapping_from_trl(1.0, "group" if norm == "meanstd" else "none",
                                                      config.grpo.num_generations)["eps"]
        predicted = p_ref.SuccessForecast(measured, config, replica, fit_steps=fit_steps, params=params)
        record = replica.read_json(rundir.FORECAST)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return score(run, measured, predicted, record)


def p_ref_report(measured: dict, record: dict) -> dict:
    """Held-out counts, the raw mean, the pooled estimates (as p_ref.json now has them) and the fitted p_0."""
    pooled = measured if "mean_raw" in measured else p_ref.pool_measurement(measured)
    return {"held_out": "{}/{}".format(pooled["successes"], pooled["samples"]), "raw_mean": pooled["mean_raw"],
            "pooled_per_prompt": round(pooled["mean"], 4), "pooled_population_mean": round(pooled["population_mean"], 4),
            "fitted_mean": record["p_ref"]["population_mean"]}


def score(run, measurement: dict, predicted, record: dict) -> dict:
    """Band over WINDOW and at its last step vs the measured success there."""
    measured = {m["step"]: m["success"] for m in run.metrics() if isinstance(m.get("success"), (int, float))}
    lo, hi = WINDOW
    window = [s for s in range(lo, hi + 1) if s in measured]
    values = [predicted.at_step(s) for s in window]

    def mean(key):
        return sum(v[key] for v in values) / len(values)

    end = predicted.at_step(hi)
    width = end["success_predicted_high"] - end["success_predicted_low"]
    if window:
        measured_mean = sum(measured[s] for s in window) / len(window)
        band = (mean("success_predicted_low"), mean("success_predicted_high"))
    else:  # a run stopped before the window: the forecast only
        measured_mean, band = None, (None, None)
        values = [predicted.at_step(s) for s in range(lo, hi + 1)]
    return {
        "run_dir": run.path, "seed": run_config(run).grpo.seed,
        "p_ref": p_ref_report(measurement, record),
        "fit_steps": record["fit_steps"], "beta": record["beta"], "norm": record["params"]["norm"],
        "steps_measured": max(measured), "window_steps_measured": len(window),
        "measured_mean_31_40": None if measured_mean is None else round(measured_mean, 4),
        "forecast_31_40": {"median": round(mean("success_predicted"), 4),
                           "low": round(mean("success_predicted_low"), 4), "high": round(mean("success_predicted_high"), 4)},
        "forecast_step_40": {k.replace("success_predicted", "median").replace("median_", ""): v for k, v in end.items()},
        "width_step_40": round(width, 4),
        "contained": None if measured_mean is None else band[0] <= measured_mean <= band[1],
        "contained_by_step_40_band": None if measured_mean is None else
        end["success_predicted_low"] <= measured_mean <= end["success_predicted_high"],
        "narrow_enough": width <= MAX_WIDTH,
        "measured": [measured.get(s) for s in range(1, max(measured) + 1)],
        "forecast": {k: record[k] for k in ("success_predicted", "success_predicted_low", "success_predicted_high")},
    }


def shape_study(path: str) -> dict:
    """Both shapes of the recurrence fitted on steps 1..F for several F (F = 40: in-sample) vs steps 31-40."""
    rows = []
    for norm in ("mean", "meanstd"):
        for fit_steps in (10, 20, 30, 40):
            r = replay(path, fit_steps, norm)
            rows.append({"norm": norm, "fit_steps": fit_steps, "beta_median": r["beta"]["median"],
                         "forecast_31_40": r["forecast_31_40"], "width_step_40": r["width_step_40"],
                         "contained": r["contained"]})
    return {"run_dir": path, "measured_mean_31_40": r["measured_mean_31_40"], "fits": rows}


def plot(results: list[dict], fit_steps: int, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.4), sharey=True, squeeze=False)
    for ax, result in zip(axes[0], results):
        steps = list(range(1, len(result["forecast"]["success_predicted"]) + 1))
        ax.fill_between(steps, result["forecast"]["success_predicted_low"], result["forecast"]["success_predicted_high"],
                        color="tab:orange", alpha=0.25, label=f"forecast, {round(forecast.BAND_LEVEL * 100)}% band")
        ax.plot(steps, result["forecast"]["success_predicted"], color="tab:orange", label="forecast (median)")
        measured = result["measured"]
        ax.plot(range(1, len(measured) + 1), measured, "o", ms=3, color="tab:blue", label="measured success per step")
        lo, hi = WINDOW
        if result["measured_mean_31_40"] is not None:
            ax.hlines(result["measured_mean_31_40"], lo, hi, color="black", lw=2, label=f"measured mean, steps {lo}-{hi}")
        ax.axvline(result["fit_steps"] + 0.5, color="grey", ls=":", lw=1)
        verdict = {True: "inside", False: "OUTSIDE", None: f"stopped at step {result['steps_measured']}"}[result["contained"]]
        ax.set_title(f"seed {result['seed']}: {verdict}, width@40 {result['width_step_40']:.2f}", fontsize=9)
        ax.set_xlabel("trainer step")
        ax.set_ylim(0, 1)
    axes[0][0].set_ylabel("success (training batches)")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"kl none: forecast fitted on steps 1-{fit_steps} (to the dotted line) vs measured", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--fit-steps", type=int, default=p_ref.FIT_STEPS)
    parser.add_argument("--norm", choices=["meanstd", "mean"], default=None,
                        help="the recurrence's shape (default: train.p_ref.FORECAST_NORM, as in training)")
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument("--plot", default=PLOT)
    args = parser.parse_args()
    results = [replay(path, args.fit_steps, args.norm) for path in args.runs]
    shapes = [shape_study(path) for path, r in zip(args.runs, results) if r["contained"] is not None]
    summary = {
        "fit_steps": args.fit_steps, "window": list(WINDOW), "max_width": MAX_WIDTH, "level": forecast.BAND_LEVEL,
        "norm_override": args.norm,
        "runs": len(results), "runs_reaching_the_window": sum(r["contained"] is not None for r in results),
        "contained": sum(bool(r["contained"]) for r in results),
        "narrow_enough": sum(r["narrow_enough"] for r in results if r["contained"] is not None),
        "accepted": len(results) >= 3 and all(r["contained"] and r["narrow_enough"] and r["p_ref"]["fitted_mean"] > 0
                                              for r in results),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump({"summary": summary, "runs": results, "shape_study": shapes}, fh, indent=1)
    if args.plot:
        os.makedirs(os.path.dirname(args.plot), exist_ok=True)
        plot(results, args.fit_steps, args.plot)
    print(json.dumps(summary))
    for r in results:
        print(json.dumps({k: r[k] for k in ("seed", "p_ref", "beta", "measured_mean_31_40", "forecast_31_40",
                                             "forecast_step_40", "width_step_40", "contained")}))


if __name__ == "__main__":
    sys.exit(main())
