"""Quickstart learning benchmark: the README's main job on this machine's CPU cores.

Trains the embedded SmolLM2-135M with configs/cpu-quickstart.yaml (or --config), checkpointing every
--eval-every steps, then measures greedy success on the 40 held-out arithmetic prompts for the base
model and every checkpoint. Reports wall time, steps, success vs training time, the time to reach the
plain-TRL anchor's final held-out success (0.525 after 843 s, measured while planning; ANCHOR below),
and the success reached within 7 and 15 minutes of training.

    python bench/quickstart.py [--config configs/cpu-quickstart.yaml] [--max-steps 40] [--eval-every 5]
    python bench/quickstart.py --eval-only RUN_DIR [--eval-max-new-tokens 64]   # re-evaluate a kept run
    python bench/quickstart.py --train-only --keep-run RUN_DIR ...   # train now, evaluate later with --eval-only

--train-only lets a sitting time several runs back to back on a quiet machine and leave their
(untimed) checkpoint evaluations for later.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ANCHOR = {"before": 0.125, "after": 0.525, "steps": 40, "train_s": 843.5}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=os.path.join(REPO, "configs", "cpu-quickstart.yaml"))
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--seed", type=int, default=None, help="grpo.seed (default: the config's)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "quickstart.json"))
    parser.add_argument("--keep-run", default=None, help="copy the run directory here afterwards")
    parser.add_argument("--cpu-autocast", choices=["auto", "bf16", "off"], default=None,
                        help="model.cpu_autocast (default: the config's); off = fp32, for the bf16 side by side")
    parser.add_argument("--eval-max-new-tokens", type=int, default=64,
                        help="greedy tokens for the held-out eval (64, as the anchor's eval)")
    parser.add_argument("--eval-only", metavar="RUN_DIR", default=None,
                        help="skip training: evaluate an existing run's checkpoints (kept with --keep-run)")
    parser.add_argument("--train-only", action="store_true",
                        help="train and keep the run (--keep-run) without evaluating it; --eval-only evaluates it later")
    args = parser.parse_args()
    if args.train_only and not args.keep_run:
        parser.error("--train-only: needs --keep-run RUN_DIR (where the run is kept for --eval-only)")
    return args


def train_run(args, work: str):
    """Train with the bench's settings into WORK/run: (config, run, summary, wall seconds)."""
    from local_grpo import config as config_mod
    from local_grpo import train
    from local_grpo.rundir import RunDir

    config = config_mod.load(args.config)
    if args.max_steps:
        config.grpo.max_steps = args.max_steps
    if args.seed is not None:
        config.grpo.seed = args.seed
    if args.cpu_autocast:
        config.model.cpu_autocast = args.cpu_autocast
    config.grpo.save_steps = args.eval_every
    config.grpo.save_total_limit = 1000
    config.output_dir = os.path.join(work, "run")
    started = time.time()
    summary = train.train(config, progress=True)
    return config, RunDir.open(config.output_dir), summary, time.time() - started


def main() -> None:
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from local_grpo import config as config_mod
    from local_grpo import evaluate
    from local_grpo import rundir
    from local_grpo.rundir import RunDir

    work = tempfile.mkdtemp(prefix="quickstart-bench-")
    if args.eval_only:
        run = RunDir.open(args.eval_only)
        config = config_mod.load(run.file("config.yaml"))
        summary = run.read_json("summary.json")
        wall = None
    else:
        config, run, summary, wall = train_run(args, work)
        if args.train_only:
            keep_and_clean_up(args, config, work)
            print(f"trained in {wall:.1f} s; kept in {args.keep_run} (evaluate with --eval-only)")
            return
    metrics = run.metrics()
    seconds_at_step = {m["step"]: m["time"] for m in metrics}

    settings = evaluate.EvalSettings(n=config.data.num_heldout, samples=0, max_new_tokens=args.eval_max_new_tokens,
                                     batch_size=20)
    rows = evaluate.eval_rows(config, settings)
    reward_set = evaluate.reward_set(config)
    from local_grpo import backends

    loaded = backends.load_for_inference(config, run.adapter_dir)
    model = loaded.model
    with model.disable_adapter():
        base, _ = evaluate.evaluate(model, loaded.tokenizer, rows, reward_set, settings, label="base")
    curve = [{"step": 0, "train_s": 0.0, "success": base["pass@1_greedy"]}]
    checkpoints = sorted((rundir.checkpoint_step(name), os.path.join(run.checkpoints_dir, name))
                         for name in os.listdir(run.checkpoints_dir) if name.startswith("checkpoint-"))
    for step, path in checkpoints:
        name = f"step{step}"
        model.load_adapter(path, adapter_name=name)
        model.set_adapter(name)
        result, _ = evaluate.evaluate(model, loaded.tokenizer, rows, reward_set, settings, label=name)
        curve.append({"step": step, "train_s": seconds_at_step.get(step), "success": result["pass@1_greedy"]})
        print(curve[-1], flush=True)

    def reached(threshold):
        hits = [c for c in curve if c["success"] is not None and c["success"] >= threshold and c["step"] > 0]
        return hits[0] if hits else None

    def best_within(seconds):
        inside = [c for c in curve if c["train_s"] is not None and c["train_s"] <= seconds]
        return max(inside, key=lambda c: c["success"]) if inside else None

    result = {
        "config": os.path.relpath(args.config, REPO),
        "steps": summary["steps"], "train_wall_s": round(wall, 1) if wall else None, "train_s": summary["train_seconds"],
        "eval_max_new_tokens": args.eval_max_new_tokens,
        "mean_step_s": round(summary["train_seconds"] / max(1, summary["steps"]), 2),
        "heldout_prompts": len(rows), "greedy_success_before": base["pass@1_greedy"],
        "greedy_success_after": curve[-1]["success"], "curve": curve,
        "anchor": ANCHOR,
        "first_checkpoint_at_or_above_anchor": reached(ANCHOR["after"]),
        "first_checkpoint_at_or_above_0.70": reached(0.70),
        "first_checkpoint_at_or_above_0.575": reached(0.575),
        "seed": config.grpo.seed, "cpu_autocast": summary.get("cpu_autocast"),
        "cpu_bf16_flags": backends.cpu_bf16_flags(), "step_time_breakdown": rundir.mean_breakdown(metrics),
        "best_within_7_min": best_within(420), "best_within_15_min": best_within(900),
        "train_summary": summary, "load_average_at_end": os.getloadavg()[0], "cpu_count": os.cpu_count(),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k not in ("curve", "train_summary")}, indent=1))
    keep_and_clean_up(args, config, work)


def keep_and_clean_up(args, config, work: str) -> None:
    """Copy a run trained here to --keep-run (when given), then remove the bench's work folder."""
    if args.keep_run and not args.eval_only:
        shutil.copytree(config.output_dir, args.keep_run, dirs_exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
