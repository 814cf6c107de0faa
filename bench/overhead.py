"""Overhead of `local-grpo train` over a bare TRL GRPOTrainer script, same tiny model and settings.

Each round runs, in turn, the bare script, ours with grpo.fast_cpu_generation off (TRL's own
generation: the overhead of our hooks, recorder, callbacks and the success forecast), the same
without p_ref and its forecast (--p-ref-prompts 0: what every step pays), and ours as shipped (fast
CPU generation on); with --order abba (the default) it then runs them again in reverse, so that a
steady drift in the machine's load falls equally on every variant. Two numbers per
step, medians over the steps after a warm-up:

    step_time  TRL's own (training_step: generation, rewards, loss forward/backward)
    wall       the whole step, from one step's end to the next: step_time + optimizer + every callback
               (ours: consecutive `time` stamps of metrics.jsonl; bare: a callback's stamps)

Both sides generate every completion to the cap (EOS suppressed), so that lengths learned from the two
sides' different rewards do not count as overhead.

The ratio is ours / bare of the pooled medians (and of the means, where a rare slow step, such as
a forecast refit, counts in full); its 95 % interval comes from resampling the rounds (bootstrap,
2,000 draws, seed 0), so round-to-round drift in load shows up in it.

    python bench/overhead.py [--rounds 8] [--steps 12] [--variants ours_trl_generation,ours] [--order abba]
                             [--out bench/results/overhead.json]

Whole runs in separate processes differ in speed by up to 17 % with the same config, which is wider
than the effect sought. `--interleave` removes that: each round is one process in which the bare
trainer and one variant of ours take turns a step at a time (bench/take_turns.py), so every step of
ours has a bare step beside it, seconds apart. Its ratio is of the pooled step times (means, and
medians); the 95 % interval draws rounds, then blocks of consecutive step pairs within them (block_bootstrap).

    python bench/overhead.py --interleave [--rounds 6] [--steps 60] [--variants ours_trl_generation]
    python bench/overhead.py --reanalyse bench/results/.../overhead-interleaved.json   # ratios again from its pairs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SETTINGS = dict(num_generations=8, per_device_train_batch_size=16, max_completion_length=32, learning_rate=1e-3)

def run_bare(model_dir: str, steps: int, workdir: str) -> dict:
    """bench/bare_trl.py in its own process."""
    subprocess.run([sys.executable, os.path.join(HERE, "bare_trl.py"), model_dir, str(steps), workdir, json.dumps(SETTINGS)],
                   check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, capture_output=True)
    return json.load(open(os.path.join(workdir, "bare.json")))


def train_argv(model_dir: str, steps: int, out: str, flags: list[str]) -> list[str]:
    """`local-grpo train` arguments for the bare script's task, model and settings, plus a variant's flags."""
    argv = ["train", "--model", model_dir, "--backend", "hf",
            "--task", "arithmetic", "--num-train", "160", "--num-heldout", "40", "--max-steps", str(steps),
            "--save-steps", str(steps), "--lora-r", "16", "--lora-alpha", "32", "--dtype", "float32",
            "--cpu-autocast", "off",  # fp32 like the bare script (bf16=False), on any CPU
            # every completion runs to the cap (EOS suppressed, as in the bare script), so both sides generate
            # the same number of tokens whatever the rewards teach
            "--trl", f"generation_kwargs={{min_new_tokens: {SETTINGS['max_completion_length']}}}",
            "--output", out, "--json", "--rewards", "correct_numeric,format_soft:0.2", *flags]
    for key, value in SETTINGS.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def run_ours(model_dir: str, steps: int, workdir: str, flags: list[str]) -> dict:
    out = os.path.join(workdir, "run")
    cmd = [sys.executable, "-m", "local_grpo.cli", *train_argv(model_dir, steps, out, flags)]
    t = time.time()
    subprocess.run(cmd, check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, capture_output=True)
    wall = time.time() - t
    metrics = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    stamps = [m["time"] for m in metrics if "step_time" in m]
    return {"wall_process": wall, "step_time": [m["step_time"] for m in metrics if "step_time" in m],
            "step_wall": [b - a for a, b in zip(stamps, stamps[1:])]}


def pooled_ratio(rounds: list[dict], variant: str, key: str, centre=statistics.median) -> float:
    """centre(variant's `key` steps) / centre(bare's), steps pooled over the rounds."""
    ours = centre([x for r in rounds for x in r[variant][key]])
    bare = centre([x for r in rounds for x in r["bare"][key]])
    return ours / bare


def bootstrap_interval(rounds: list[dict], variant: str, key: str, centre=statistics.median, draws: int = 2000,
                       seed: int = 0) -> list[float]:
    """95 % interval of `pooled_ratio`, resampling whole rounds with replacement."""
    import random

    rng = random.Random(seed)
    ratios = sorted(pooled_ratio([rng.choice(rounds) for _ in rounds], variant, key, centre) for _ in range(draws))
    return [round(ratios[int(0.025 * draws)], 3), round(ratios[int(0.975 * draws) - 1], 3)]


def ratio_entry(rounds: list[dict], variant: str, key: str) -> dict:
    """The median ratio with its interval and per-round values, and the mean ratio (a rare slow step counts in full)."""
    return {"ratio": round(pooled_ratio(rounds, variant, key), 3), "ci95": bootstrap_interval(rounds, variant, key),
            "per_round": [round(statistics.median(r[variant][key]) / statistics.median(r["bare"][key]), 3)
                          for r in rounds],
            "mean_ratio": round(pooled_ratio(rounds, variant, key, statistics.fmean), 3),
            "mean_ci95": bootstrap_interval(rounds, variant, key, statistics.fmean)}


VARIANTS = {"bare": None, "ours_trl_generation": ["--no-fast-cpu-generation"],
            "ours_no_forecast": ["--no-fast-cpu-generation", "--p-ref-prompts", "0"], "ours": ["--fast-cpu-generation"]}


def run_turns(model_dir: str, steps: int, workdir: str, variant: str, ours_first: bool) -> dict:
    """bench/take_turns.py in its own process: {"bare": [s, ...], variant: [s, ...]}, a whole step each."""
    cmd = [sys.executable, os.path.join(HERE, "take_turns.py"), model_dir, str(steps), workdir, variant]
    subprocess.run(cmd + (["ours-first"] if ours_first else []), check=True, cwd=REPO,
                   env={**os.environ, "PYTHONPATH": REPO}, capture_output=True)
    return json.load(open(os.path.join(workdir, "turns.json")))


def mean_ratio(pairs) -> float:
    """ours / bare of the summed step times of (bare, ours) pairs."""
    return sum(o for _, o in pairs) / sum(b for b, _ in pairs)


def rounded(pairs_by_round) -> list:
    """(bare, ours) pairs per round as JSON lists, to 0.1 ms."""
    return [[[round(b, 4), round(o, 4)] for b, o in r] for r in pairs_by_round]


def block_bootstrap(pairs_by_round: list[list[tuple[float, float]]], block: int = 5, draws: int = 2000,
                    seed: int = 0) -> dict:
    """95 % intervals of ours/bare (ratio of means, ratio of medians) by a two-stage bootstrap: draw the
    rounds with replacement, then within each drawn round its blocks of `block` consecutive (bare, ours)
    step pairs, so both a round's own luck (one process's memory layout) and slow stretches count."""
    import random

    rounds = [[pairs[i:i + block] for i in range(0, len(pairs), block)] for pairs in pairs_by_round]
    rng = random.Random(seed)
    means, medians = [], []
    for _ in range(draws):
        drawn = [p for blocks in (rng.choice(rounds) for _ in rounds) for _ in blocks for p in rng.choice(blocks)]
        means.append(mean_ratio(drawn))
        medians.append(statistics.median(o for _, o in drawn) / statistics.median(b for b, _ in drawn))
    lo, hi = int(0.025 * draws), int(0.975 * draws) - 1
    means.sort()
    medians.sort()
    return {"mean_ci95": [round(means[lo], 4), round(means[hi], 4)],
            "median_ci95": [round(medians[lo], 4), round(medians[hi], 4)]}


def interleaved_entry(pairs_by_round: list[list[tuple[float, float]]]) -> dict:
    """ours/bare over every step pair: ratio of means (a rare slow step counts in full) and of medians."""
    pairs = [p for r in pairs_by_round for p in r]
    bare, ours = [b for b, _ in pairs], [o for _, o in pairs]
    return {"pairs": len(pairs), "mean_ratio": round(mean_ratio(pairs), 4),
            "median_ratio": round(statistics.median(ours) / statistics.median(bare), 4),
            **block_bootstrap(pairs_by_round),
            "per_round_mean_ratio": [round(mean_ratio(r), 4) for r in pairs_by_round],
            "bare_mean_step_s": round(statistics.fmean(bare), 4), "ours_mean_step_s": round(statistics.fmean(ours), 4)}


def interleaved(args, variants: list[str]) -> dict:
    """Rounds of bench/take_turns.py: per variant, one process where it and the bare trainer alternate steps."""
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from tiny_model import build_tiny_model

    pairs = {v: [] for v in variants}
    gc_seconds = {v: [] for v in variants}  # per round: {"bare": s, variant: s} of garbage collection in their steps
    trl_pairs = {v: [] for v in variants}  # the same steps' TRL step_time (training_step alone), bare and ours
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(os.path.join(tmp, "tiny"), hidden=256, layers=4)
        for i in range(args.rounds):
            for variant in variants:
                got = run_turns(model_dir, args.steps, tempfile.mkdtemp(dir=tmp), variant, ours_first=i % 2 == 1)
                # drop the warm-up steps and the last, which also holds the end of training (saving)
                pairs[variant].append(list(zip(got["bare"][args.warmup:-1], got[variant][args.warmup:-1])))
                gc_seconds[variant].append(got["gc_s"])
                trl = got["trl_step_time"]
                trl_pairs[variant].append(list(zip(trl["bare"][args.warmup:-1], trl[variant][args.warmup:-1])))
                r = pairs[variant][-1]
                print(f"round {i + 1} {variant}: {mean_ratio(r):.4f} (bare {statistics.fmean(b for b, _ in r):.3f} s/step)",
                      flush=True)
    return with_ratios({
        "method": "interleaved: per round one process, bare TRL and ours alternating a step at a time "
                  "(bench/take_turns.py); rounds alternate which goes first",
        "model": "tiny random Llama (hidden 256, 4 layers) + BPE tokenizer",
        "settings": SETTINGS, "steps_per_run": args.steps, "warmup_ignored": args.warmup, "rounds": args.rounds,
        "step_pairs_s": {v: rounded(pairs[v]) for v in variants},
        # TRL's step_time of the same steps: training_step alone (generation, rewards, loss), without the
        # optimizer and the callbacks
        "trl_step_time_pairs_s": {v: rounded(trl_pairs[v]) for v in variants},
        "gc_s_per_round": gc_seconds,
        "goal": "ours_trl_generation whole-step ratio <= 1.03",
        "load_average_at_end": os.getloadavg()[0],
    })


def with_ratios(result: dict) -> dict:
    """An --interleave result with "ratios" (whole steps) and "trl_step_time_ratios" computed from its pairs."""
    for key, pairs_key in (("ratios", "step_pairs_s"), ("trl_step_time_ratios", "trl_step_time_pairs_s")):
        if pairs_key in result:
            result[key] = {v: interleaved_entry(rounds) for v, rounds in result[pairs_key].items()}
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2, help="steps ignored at the start of each run")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma list; bare is always run")
    parser.add_argument("--order", choices=("forward", "abba"), default="abba",
                        help="abba: each round runs the variants, then again in reverse, so a steady drift in load "
                             "falls equally on every variant")
    parser.add_argument("--interleave", action="store_true",
                        help="each round one process in which bare and ours take turns a step at a time")
    parser.add_argument("--reanalyse", metavar="FILE", help="recompute an --interleave result's ratios from its step pairs")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "overhead.json"))
    args = parser.parse_args()
    if args.reanalyse:
        result = with_ratios(json.load(open(args.reanalyse)))
        json.dump(result, open(args.reanalyse, "w"), indent=1)
        print(json.dumps({k: result[k] for k in ("ratios", "trl_step_time_ratios") if k in result}, indent=1))
        return
    chosen = ["bare"] + [v for v in args.variants.split(",") if v and v != "bare"]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)} (choose from {', '.join(VARIANTS)})")
    if args.interleave:
        result = interleaved(args, chosen[1:])
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        json.dump(result, open(args.out, "w"), indent=1)
        print(json.dumps({k: result[k] for k in ("ratios", "trl_step_time_ratios")}, indent=1))
        return
    sequence = chosen + chosen[::-1] if args.order == "abba" else chosen
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from tiny_model import build_tiny_model

    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(os.path.join(tmp, "tiny"), hidden=256, layers=4)
        for i in range(args.rounds):
            entry = {v: {"step_time": [], "step_wall": [], "run_medians": []} for v in chosen}
            for variant in sequence:
                flags, workdir = VARIANTS[variant], tempfile.mkdtemp(dir=tmp)
                got = run_bare(model_dir, args.steps, workdir) if flags is None else run_ours(model_dir, args.steps, workdir, flags)
                for key in ("step_time", "step_wall"):
                    entry[variant][key] += got[key][args.warmup:]
                entry[variant]["run_medians"].append(round(statistics.median(got["step_wall"][args.warmup:]), 4))
            rounds.append(entry)
            print(f"round {i + 1}: " + ", ".join(f"{v} {statistics.median(e['step_wall']):.3f} s/step"
                                                  for v, e in entry.items()), flush=True)
    result = {
        "model": "tiny random Llama (hidden 256, 4 layers) + BPE tokenizer",
        "settings": SETTINGS, "steps_per_run": args.steps, "warmup_ignored": args.warmup, "rounds": len(rounds),
        "order": sequence,
        "median_step_s": {v: {k: round(statistics.median([x for r in rounds for x in r[v][k]]), 4)
                              for k in ("step_time", "step_wall")} for v in chosen},
        "run_medians_step_wall": {v: [r[v]["run_medians"] for r in rounds] for v in chosen},
        "ratios": {v: {k: ratio_entry(rounds, v, k) for k in ("step_time", "step_wall")} for v in chosen if v != "bare"},
        "goal": "ours_trl_generation step_wall ratio <= 1.03",
        "load_average_at_end": os.getloadavg()[0],
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    json.dump(result, open(args.out, "w"), indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
