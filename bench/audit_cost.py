"""Cost of the training-time reward audit per step: Auditor.on_scored on one step's 16 completions.

Each task's verifier, on a batch shaped like the cpu preset's step (16 completions, all credited by the
reward so that the full top-k is audited). Writes bench/results/audit_cost.json. CPU only, no model.
Run: python bench/audit_cost.py
"""

from __future__ import annotations

import json
import os
import statistics
import time

from local_grpo.tasks import builtin_tasks
from local_grpo.train.audit import Auditor

STEP_COMPLETIONS = 16
REPEATS = 50
BATCHES = {
    "arithmetic": ("What is 47 + 38?", "85", ["47 + 38 = 85\nAnswer: 85", "Answer: 185", "The answer is 85."]),
    "countdown": ("Using the numbers [3, 5, 7], write an equation that equals 56.", "56",
                  ["Answer: (3 + 5) * 7", "Answer: 7 * 8", "<answer>(5 + 3) * 7</answer>"]),
    "dataset": ("What is 3/4 of 2/3?", "1/2", ["Answer: \\frac{1}{2}", "The answer is 0.5", "Answer: 3/4"]),
}


def step_records(prompt: str, answer: str, texts: list[str]) -> list[dict]:
    """One step's records: the texts cycled to STEP_COMPLETIONS, each with a credited total."""
    return [{"step": 1, "prompt": prompt, "answer": answer, "completion": texts[i % len(texts)],
             "total": 1.0} for i in range(STEP_COMPLETIONS)]


def cost_ms(task: str) -> dict:
    """Median and max milliseconds per step for a task's verifier (first call, warm-up, reported apart)."""
    prompt, answer, texts = BATCHES[task]
    auditor = Auditor(builtin_tasks()[task].verifier, [1.0])
    records = step_records(prompt, answer, texts)
    started = time.perf_counter()
    auditor.on_scored(1, records)
    first = (time.perf_counter() - started) * 1000
    times = []
    for step in range(REPEATS):
        started = time.perf_counter()
        auditor.on_scored(step + 2, [dict(r, completion=r["completion"] + " " * (step + 1)) for r in records])
        times.append((time.perf_counter() - started) * 1000)
    return {"verifier": auditor.verifier_name, "first_call_ms": round(first, 2),
            "median_ms": round(statistics.median(times), 3), "max_ms": round(max(times), 3),
            "audited_per_step": auditor.top_k}


def main() -> None:
    results = {task: cost_ms(task) for task in BATCHES}
    report = {"what": "Auditor.on_scored per training step (16 completions, top-4 audited)",
              "machine": f"{os.cpu_count()} CPU cores, shared", "results": results}
    os.makedirs("bench/results", exist_ok=True)
    with open("bench/results/audit_cost.json", "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
