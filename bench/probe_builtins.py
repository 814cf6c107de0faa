"""Probe every built-in correctness reward (and the sloppy substring reward) with its battery.

Three row sets: the arithmetic task (50 prompts), the countdown task (50), and a mixed set of golds
(thousands, decimals, fractions, negatives) that exercises every known-right form. The numeric rows
include the structured-gold family (rewards.probe; its rates are under "families"). Writes
bench/results/probe_builtins.json (rates and per-probe counts, examples dropped). Run: python bench/probe_builtins.py
"""

from __future__ import annotations

import json
import os

import rewards
from local_grpo.config import Config
from local_grpo.data import load_examples
from rewards.probe import probe

NUMERIC = ["correct_exact", "correct_numeric", "correct_math", "gsm8k_strict", "gsm8k_flexible", "integer_answer",
           "bench/soundness/sloppy_reward.py:contains_answer"]
MIXED = {"What is 17 + 25?": "42", "What is 999 + 235?": "1234", "What is half of one?": "0.5",
         "What is 3 times 0.75?": "2.25", "What is 5 - 12?": "-7", "What is 1/8 of 1?": "0.125"}


def task_rows(task: str, n: int = 50) -> list[dict]:
    """The first n training rows of a built-in task."""
    config = Config()
    config.data.task, config.data.num_train, config.data.num_heldout = task, n, 0
    return load_examples(config)[0]


def compact(report: dict) -> dict:
    """Rates (overall and per family) and counts only."""
    return {name: {"false_positive_rate": r["false_positive_rate"], "false_negative_rate": r["false_negative_rate"],
                   "families": r["families"],
                   "probes": {p: {k: e[k] for k in ("kind", "family", "credited", "total", "abstained")}
                              for p, e in r["probes"].items()}}
            for name, r in report["rewards"].items()}


def main() -> None:
    arithmetic = task_rows("arithmetic")
    countdown = task_rows("countdown")
    results = {
        "arithmetic": compact(probe([rewards.get(s) for s in NUMERIC], [r["question"] for r in arithmetic],
                                    [r["answer"] for r in arithmetic])),
        "mixed_golds": compact(probe([rewards.get(s) for s in NUMERIC], list(MIXED), list(MIXED.values()))),
        "countdown": compact(probe([rewards.get("countdown"), rewards.get("correct_numeric")],
                                   [r["question"] for r in countdown], [r["answer"] for r in countdown],
                                   {"nums": [r["numbers"] for r in countdown], "target": [r["target"] for r in countdown]})),
    }
    os.makedirs("bench/results", exist_ok=True)
    with open("bench/results/probe_builtins.json", "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1)
    for battery, by_reward in results.items():
        print(battery)
        for name, r in by_reward.items():
            structured = r["families"].get("structured_gold")
            split = "" if structured is None else (f"  structured gold: FP {structured['false_positive_rate']:6.1%}"
                                                   f"  FN {structured['false_negative_rate']:6.1%}"
                                                   f"  abstained {structured['abstained']}")
            print(f"  {name:<50} FP {r['false_positive_rate']:6.1%}  FN {r['false_negative_rate']:6.1%}{split}")


if __name__ == "__main__":
    main()
