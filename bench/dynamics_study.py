"""The dynamics study: measured success per step vs the predictor, for runs made with dynamics_study.yaml.

    local-grpo train --config bench/dynamics_study.yaml --beta B --output runs/dynamics/beta-B   (per β)
    python bench/dynamics_study.py runs/dynamics/beta-0.1 runs/dynamics/beta-2.0 [--measure-final]

Reads each run's p_ref.json (per-prompt success of the starting model on held-out prompts) and
metrics.jsonl (success per step on the training batch, success_predicted), and with --measure-final
re-measures the held-out prompts with the trained adapter (same prompts, k and seed as p_ref), the
like-for-like number to set against the predicted p_N. Writes bench/results/dynamics_study.json and
docs/images/dynamics_study.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from local_grpo import dynamics  # noqa: E402
from local_grpo.train import p_ref as success  # noqa: E402
from local_grpo.config import load as load_config  # noqa: E402
from local_grpo.rundir import RunDir  # noqa: E402

RESULTS = os.path.join(REPO, "bench", "results", "dynamics_study.json")
PLOT = os.path.join(REPO, "docs", "images", "dynamics_study.png")


def study_run(path: str, measure_final: bool) -> dict:
    run = RunDir.open(path)
    config = load_config(run.file("config.yaml"))
    p_ref = run.read_json("p_ref.json")
    steps = [m for m in run.metrics() if "success" in m]
    params = success.predictor_params(config)
    p_refs = [p["p_ref"] for p in p_ref["per_prompt"]]
    n = config.grpo.max_steps
    predicted = dynamics.predict_dataset(p_refs, steps=n, **params)
    out = {
        "run_dir": os.path.relpath(run.path, REPO),
        "beta": config.grpo.beta, "kl": config.kl_mode, "num_generations": config.grpo.num_generations,
        "learning_rate": config.grpo.learning_rate, "max_steps": n,
        "predictor_params": params,
        "p_ref": {"k": p_ref["k"], "prompts": len(p_refs), "mean": p_ref["mean"], "per_prompt": p_refs},
        "predicted": {"p_star": predicted["p_star"], "trajectory": predicted["trajectory"],
                      "per_prompt_p_star": [row["p_star"] for row in predicted["per_prompt"]]},
        "measured": {"step": [m["step"] for m in steps], "success": [m["success"] for m in steps],
                     "kl": [m.get("kl") for m in steps], "reward": [m.get("reward") for m in steps],
                     "mean_length": [m.get("completions/mean_length") for m in steps]},
    }
    last = out["measured"]["success"][-4:]
    out["measured"]["success_last4_mean"] = sum(last) / len(last) if last else None
    if measure_final:
        out["final_heldout"] = measure_final_heldout(run, config, p_ref)
    return out


def measure_final_heldout(run, config, p_ref) -> dict:
    """Held-out success of the trained adapter, measured exactly as p_ref was (prompts, k, seed)."""
    import rewards

    from local_grpo import backends, data

    loaded = backends.load_for_inference(config, run.adapter_dir)
    _, held_out = data.load_examples(config)
    rows = held_out[: len(p_ref["per_prompt"])]
    g = config.grpo
    result = success.measure_p_ref(loaded.model, loaded.tokenizer, rows, rewards.get(config.success_reward),
                                   p_ref["k"], g.max_completion_length, g.temperature, g.top_p, g.seed)
    return {"mean": result["mean"], "per_prompt": [p["p_ref"] for p in result["per_prompt"]]}


def plot(results: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.2 * len(results), 3.6), dpi=100, squeeze=False)
    for ax, r in zip(axes[0], results):
        m = r["measured"]
        ax.plot(m["step"], m["success"], "o-", color="tab:blue", alpha=0.6, label="measured success (training batch)")
        k = 3
        smooth = [sum(m["success"][max(0, i - k + 1): i + 1]) / len(m["success"][max(0, i - k + 1): i + 1])
                  for i in range(len(m["success"]))]
        ax.plot(m["step"], smooth, "-", color="tab:blue", lw=2, label="measured, 3-step mean")
        traj = r["predicted"]["trajectory"]
        ax.plot(range(1, len(traj) + 1), traj, "s--", color="tab:orange", label="predicted p_{n-1}")
        ax.axhline(r["predicted"]["p_star"], color="tab:orange", ls=":", label=f"predicted p* = {r['predicted']['p_star']:.2f}")
        ax.axhline(r["p_ref"]["mean"], color="gray", ls=":", label=f"p_ref (held-out) = {r['p_ref']['mean']:.2f}")
        if "final_heldout" in r:
            ax.plot([r["max_steps"]], [r["final_heldout"]["mean"]], "*", ms=14, color="tab:green",
                    label=f"held-out after training = {r['final_heldout']['mean']:.2f}")
        ax.set_title(f"β = {r['beta']} (KL to ref), lr {r['learning_rate']:g}, G = {r['num_generations']}")
        ax.set_xlabel("trainer step")
        ax.set_ylabel("success")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7, loc="center right")
    fig.suptitle("SmolLM2-135M, 1-digit addition, CPU: measured success vs the dynamics predictor", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(PLOT), exist_ok=True)
    fig.savefig(PLOT)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--measure-final", action="store_true")
    args = parser.parse_args(argv)
    previous = {}
    if os.path.exists(RESULTS):
        previous = {r["run_dir"]: r for r in json.load(open(RESULTS)).get("runs", [])}
    results = []
    for path in args.runs:
        r = study_run(path, args.measure_final)
        if "final_heldout" not in r and "final_heldout" in previous.get(r["run_dir"], {}):
            r["final_heldout"] = previous[r["run_dir"]]["final_heldout"]
        results.append(r)
    kept = [r for key, r in previous.items() if key not in {r["run_dir"] for r in results}]  # runs not re-read
    results = sorted(kept + results, key=lambda r: r["beta"])
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as fh:
        json.dump({"runs": results}, fh, indent=1)
    plot(results)
    for r in results:
        print(f"beta {r['beta']}: p_ref {r['p_ref']['mean']:.3f}  predicted p* {r['predicted']['p_star']:.3f}  "
              f"measured success first {r['measured']['success'][0]:.3f} last-4 mean {r['measured']['success_last4_mean']:.3f}"
              + (f"  held-out after {r['final_heldout']['mean']:.3f}" if "final_heldout" in r else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
