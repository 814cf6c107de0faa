"""The soundness demonstration: the same arithmetic run trained with a sloppy and with a sound correctness reward.

Reads runs/soundness/{sloppy,sound}/metrics.jsonl (written by the two `local-grpo train` commands below),
writes bench/results/soundness_runs.json and docs/images/soundness_runs.png (reward vs success per step).
    local-grpo train --preset cpu --task arithmetic --max-steps 25 --save-steps 1000 --audit \\
        --rewards bench/soundness/sloppy_reward.py:contains_answer,format_soft:0.2 --output runs/soundness/sloppy
    local-grpo train --preset cpu --task arithmetic --max-steps 25 --save-steps 1000 --audit \\
        --rewards correct_numeric,format_soft:0.2 --output runs/soundness/sound
`success` is the task's own correctness (correct_numeric) in both runs; `reward` is what GRPO optimised.
"reaudit" recomputes the audit from completions.jsonl with the current verifier (the live `audit/*`
metrics come from the verifier version the run started with).
"""

from __future__ import annotations

import json
import os
import statistics

RUNS = {"sloppy": "runs/soundness/sloppy", "sound": "runs/soundness/sound"}
REWARD_OF = {"sloppy": "contains_answer", "sound": "correct_numeric"}
WEIGHTS = [1.0, 0.2]  # correctness reward, format_soft
KEYS = ("reward", "success", "audit/disagreement", "audit/audited", "audit/seconds", "completions/mean_length", "time")


def metrics(run_dir: str) -> list[dict]:
    """The run's metrics lines (a torn last line skipped)."""
    rows = []
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as handle:
        for line in handle:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return [r for r in rows if "reward" in r]


def alerts(run_dir: str) -> int:
    """Audit alerts raised in events.jsonl."""
    with open(os.path.join(run_dir, "events.jsonl"), encoding="utf-8") as handle:
        return sum(1 for line in handle if '"alert"' in line and '"audit"' in line)


def summary(name: str, rows: list[dict]) -> dict:
    """Per-step series and start/end means (first/last 5 steps)."""
    correctness = f"rewards/{REWARD_OF[name]}/mean"
    steps = [{"step": r["step"], "correctness_reward": r.get(correctness),
              **{k: r.get(k) for k in KEYS}} for r in rows]

    def mean(part, key):
        values = [s[key] for s in part if isinstance(s.get(key), (int, float))]
        return round(statistics.fmean(values), 4) if values else None

    audited = sum(s["audit/audited"] or 0 for s in steps)
    disagreed = sum((s["audit/disagreement"] or 0) * (s["audit/audited"] or 0) for s in steps)
    seconds = [s["audit/seconds"] for s in steps if s["audit/seconds"] is not None]
    step_times = [b["time"] - a["time"] for a, b in zip(steps, steps[1:])]
    return {"steps": len(steps), "series": steps,
            "reward_first5": mean(steps[:5], "correctness_reward"), "reward_last5": mean(steps[-5:], "correctness_reward"),
            "success_first5": mean(steps[:5], "success"), "success_last5": mean(steps[-5:], "success"),
            "audited": audited, "audit_disagreement_overall": round(disagreed / audited, 4) if audited else None,
            "audit_seconds_per_step_mean": round(statistics.fmean(seconds), 5) if seconds else None,
            "train_seconds_per_step_median": round(statistics.median(step_times), 1) if step_times else None,
            "audit_alerts": alerts(RUNS[name])}


def reaudit(run_dir: str, weights: list[float]) -> dict:
    """The audit recomputed from completions.jsonl with the current verifier: {step: (audited, disagreed)}."""
    from local_grpo.train.audit import Auditor

    by_step: dict[int, list[dict]] = {}
    with open(os.path.join(run_dir, "completions.jsonl"), encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            by_step.setdefault(record["step"], []).append(record)
    out = {}
    for step, records in sorted(by_step.items()):
        auditor = Auditor("arithmetic", weights)
        auditor.on_scored(step, records)
        audited, disagreed = auditor.audited, auditor.disagreed
        out[step] = {"audited": audited, "disagreed": disagreed}
    return out


def plot(results: dict, path: str) -> None:
    """Correctness-reward mean and success per step, one panel per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for axis, (name, result) in zip(axes, results.items()):
        steps = [s["step"] for s in result["series"]]
        axis.plot(steps, [s["correctness_reward"] for s in result["series"]], label=f"reward ({REWARD_OF[name]})")
        axis.plot(steps, [s["success"] for s in result["series"]], label="success (correct_numeric)")
        recheck = result["reaudit"]["per_step"]
        audited = [step for step in steps if recheck.get(step, {}).get("audited")]
        axis.plot(audited, [recheck[step]["disagreed"] / recheck[step]["audited"] for step in audited], "x",
                  label="audit disagreement (re-audited)")
        axis.set_title(f"{name} reward")
        axis.set_xlabel("step")
        axis.set_ylim(-0.05, 1.05)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    results = {name: summary(name, metrics(path)) for name, path in RUNS.items()}
    for name, path in RUNS.items():
        recheck = reaudit(path, WEIGHTS)
        audited = sum(v["audited"] for v in recheck.values())
        disagreed = sum(v["disagreed"] for v in recheck.values())
        results[name]["reaudit"] = {"per_step": recheck, "audited": audited, "disagreed": disagreed,
                                    "disagreement": round(disagreed / audited, 4) if audited else None}
    report = {"what": "SmolLM2-135M (embedded) on arithmetic, cpu preset, shared 2-core CPU; success = correct_numeric",
              "runs": results}
    os.makedirs("bench/results", exist_ok=True)
    with open("bench/results/soundness_runs.json", "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)
    os.makedirs("docs/images", exist_ok=True)
    plot(results, "docs/images/soundness_runs.png")
    for name, r in results.items():
        print(f"{name}: {r['steps']} steps, reward {r['reward_first5']} -> {r['reward_last5']}, success "
              f"{r['success_first5']} -> {r['success_last5']}, audit disagreement {r['audit_disagreement_overall']} "
              f"({r['audited']} audited, {r['audit_alerts']} alerts), audit {r['audit_seconds_per_step_mean']} s/step, "
              f"train {r['train_seconds_per_step_median']} s/step; re-audit {r['reaudit']['disagreed']}/"
              f"{r['reaudit']['audited']}")


if __name__ == "__main__":
    main()
