"""The base model's greedy success before any training, with the quickstart's system prompt and the task's own.

Evaluates the base model of configs/cpu-quickstart.yaml (or --config) on its 40 held-out prompts, greedy, at
the config's completion cap and at 64 new tokens (bench/quickstart.py's held-out length), once with the
config's `data.system_prompt` and once with the task's default. Accuracy only: the times in the JSON are
for orientation, not a speed claim.

    python bench/base_prompt.py [--config configs/cpu-quickstart.yaml] [--out bench/results/base_prompt.json]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else the platform's machine type."""
    try:
        with open("/proc/cpuinfo") as fh:
            return next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=os.path.join(REPO, "configs", "cpu-quickstart.yaml"))
    parser.add_argument("--out", default=os.path.join(HERE, "results", "base_prompt.json"))
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from local_grpo import backends, evaluate, tasks
    from local_grpo import config as config_mod

    config = config_mod.validate(tasks.fill_defaults(config_mod.load(args.config)))
    loaded = backends.load_for_inference(config)
    reward_set = evaluate.reward_set(config)
    prompts = {"config": config.data.system_prompt, "task_default": tasks.task_for(config).system_prompt}
    rows = []
    for label, system_prompt in prompts.items():
        variant = copy.deepcopy(config)
        variant.data.system_prompt = system_prompt
        for cap in sorted({config.grpo.max_completion_length, 64}):
            settings = evaluate.EvalSettings(samples=0, max_new_tokens=cap, batch_size=20)
            held_out = evaluate.eval_rows(variant, settings)
            started = time.time()
            metrics, _ = evaluate.evaluate(loaded.model, loaded.tokenizer, held_out, reward_set, settings,
                                           label=f"{label}, {cap} tokens")
            rows.append({"system_prompt": label, "text": system_prompt, "max_new_tokens": cap,
                         "prompts": len(held_out), "pass@1_greedy": metrics["pass@1_greedy"],
                         "format_rate": metrics["format_rate"], "mean_length": metrics["mean_length"],
                         "seconds": round(time.time() - started, 1)})
            print(json.dumps(rows[-1]), flush=True)
    result = {"config": os.path.relpath(args.config, REPO), "model": config.model.name, "greedy": True,
              "rows": rows, "date": datetime.date.today().isoformat(), "machine": cpu_model(),
              "cpu_count": os.cpu_count(), "cpu_bf16_flags": backends.cpu_bf16_flags(),
              "load_average_at_end": os.getloadavg()[0]}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())
