"""How narrow can the kl-none forecast from steps 1-10 be when its own model is exactly true?

Simulates quickstart-shaped runs from the recurrence the forecast fits (local_grpo.forecast): prompts'
starting success q ~ Beta(μκ, (1−μ)κ), each prompt's log-odds rising by 1/β a step, 8 held-out prompts
× 4 samples before training, and 2 prompt groups of 8 completions a step (the quickstart's 16 a step). It
fits the forecast on the held-out counts and steps 1-10 exactly as training does (p_ref.SuccessForecast's
fit, forecast.fit_step_size), then scores it with issue 13's bar: the band averaged over steps 31-40
contains the simulated measured mean of those steps, and the band at step 40 is at most 0.25 wide.
Because the data come from the model itself (dynamics.trajectories, the paths the fit uses), a miss or a
wide band here is what the data allow, not a wrong shape. True speeds are chosen so that the mean success
over steps 31-40 spans the quickstart's (0.30-0.56).

    python bench/forecast_oracle.py [--runs 40] [--seed 0] [--out bench/results/forecast_oracle.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [REPO, HERE]

from forecast_coverage import MAX_WIDTH, WINDOW  # noqa: E402  (the bar, as the replay of real runs scores it)

from local_grpo import dynamics, forecast  # noqa: E402
from local_grpo.train.p_ref import FIT_STEPS, FORECAST_NORM  # noqa: E402

STEPS = WINDOW[1]
HELD_OUT, SAMPLES, GROUPS_PER_STEP, G = 8, 4, 2, 8
POPULATION = {"mean": 0.04, "kappa": 10.0}  # 0-1 successes in 32 held-out samples, like the quickstart
BETAS = (7.0, 9.0, 12.0)  # true step sizes: mean success over steps 31-40 from ≈ 0.55 to ≈ 0.3


def simulate(rng, beta: float) -> tuple[list, list, float]:
    """(held-out counts, groups of steps 1..FIT_STEPS, measured mean success over WINDOW) for one run."""
    a, b = POPULATION["mean"] * POPULATION["kappa"], (1 - POPULATION["mean"]) * POPULATION["kappa"]
    held_out = [(int(rng.binomial(SAMPLES, q)), SAMPLES) for q in rng.beta(a, b, HELD_OUT)]
    prompts = rng.beta(a, b, (STEPS, GROUPS_PER_STEP))
    paths = dynamics.trajectories(prompts.ravel(), [beta], kl="none", norm=FORECAST_NORM, steps=STEPS)[0]
    success = paths.reshape(STEPS, GROUPS_PER_STEP, STEPS + 1)  # [step, group, n]: step s is sampled by π_{s−1}
    counts = [[int(rng.binomial(G, success[s - 1, g, s - 1])) for g in range(GROUPS_PER_STEP)]
              for s in range(1, STEPS + 1)]
    groups = [(s, k, G) for s in range(1, FIT_STEPS + 1) for k in counts[s - 1]]
    window = [sum(counts[s - 1]) / (G * GROUPS_PER_STEP) for s in range(WINDOW[0], WINDOW[1] + 1)]
    return held_out, groups, float(np.mean(window))


def score(held_out, groups, measured: float) -> dict:
    band = forecast.fit_step_size(held_out, groups, steps=STEPS, kl="none", norm=FORECAST_NORM).band()
    lo, hi = WINDOW  # entry j of the band is p_j, the success logged at step j + 1
    low = float(np.mean(band["low"][lo - 1:hi]))
    high = float(np.mean(band["high"][lo - 1:hi]))
    width = band["high"][hi - 1] - band["low"][hi - 1]
    return {"measured_mean_31_40": round(measured, 4), "band_31_40": [round(low, 4), round(high, 4)],
            "width_step_40": round(width, 4), "contained": low <= measured <= high, "narrow_enough": width <= MAX_WIDTH}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40, help="simulated runs per true β")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join(REPO, "bench", "results", "forecast_oracle.json"))
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    per_beta = {}
    for beta in BETAS:
        runs = [score(*simulate(rng, beta)) for _ in range(args.runs)]
        widths = sorted(r["width_step_40"] for r in runs)
        per_beta[str(beta)] = {
            "measured_mean_31_40": round(float(np.mean([r["measured_mean_31_40"] for r in runs])), 4),
            "contained": sum(r["contained"] for r in runs), "narrow_enough": sum(r["narrow_enough"] for r in runs),
            "both": sum(r["contained"] and r["narrow_enough"] for r in runs),
            "width_step_40_quartiles": [widths[len(widths) // 4], widths[len(widths) // 2], widths[3 * len(widths) // 4]],
            "runs": runs,
        }
    result = {"population": POPULATION, "held_out": [HELD_OUT, SAMPLES], "groups_per_step": [GROUPS_PER_STEP, G],
              "fit_steps": FIT_STEPS, "window": list(WINDOW), "max_width": MAX_WIDTH, "level": forecast.BAND_LEVEL,
              "runs_per_beta": args.runs, "seed": args.seed, "per_beta": per_beta}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({beta: {k: v for k, v in entry.items() if k != "runs"} for beta, entry in per_beta.items()},
                     indent=1))


if __name__ == "__main__":
    main()
