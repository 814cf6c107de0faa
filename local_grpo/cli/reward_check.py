"""`local-grpo rewards check`: will this reward set teach the base model? (library: reward_check.py)

    local-grpo rewards check --config configs/cpu-quickstart.yaml
    local-grpo rewards check --model embedded --task countdown --rewards countdown,format_soft:0.2 --prompts 8 --json

cli/rewards.py adds it under the `rewards` command. Text output is a report
ending with the verdict; --json prints one object (keys in docs/reward-check.md); progress goes to stderr.
"""

from __future__ import annotations

import json
import sys

from .. import config as config_mod
from .. import models, tasks
from ..errors import UserError
from ..output import stdout_to_stderr
from .common import add_config_flags, config_from_args


def add_check_command(commands) -> None:
    """Add `check` to the `rewards` command's sub-commands."""
    p = commands.add_parser("check", help="sample the base model and say whether the rewards give GRPO a learning signal",
                            description="Sample G completions per held-out prompt from the base model (cached under "
                            "runs/.reward-check-cache), score them with the reward set and report signal, variance "
                            "shares, agreement, soundness and a verdict. Flags override the config file, like train.")
    p.add_argument("--config", help="YAML config (see configs/)")
    p.add_argument("--preset", help="cpu, 6gb, 8gb, 12gb, 16gb, 24gb")
    p.add_argument("--rewards", help="name[:weight],... or path/to/file.py:function[:weight]")
    p.add_argument("--backend", choices=config_mod.BACKENDS, help="auto (Unsloth with a GPU, else hf), unsloth, hf")
    p.add_argument("--prompts", type=int, default=8, metavar="K", help="held-out prompts to sample (default 8)")
    p.add_argument("--cache-dir", default=None, help="sample cache folder (default runs/.reward-check-cache)")
    p.add_argument("--fresh", action="store_true", help="generate new samples even when the cache has them")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    add_config_flags(p)
    p.set_defaults(func=run_check)


def check_config(args) -> config_mod.Config:
    """The config the check judges: preset < config file < flags, with the task's defaults filled in."""
    config = config_from_args(args)
    if not config.output_dir:
        config.output_dir = "unused"  # the check never creates a run directory
    config = tasks.fill_defaults(config)
    config_mod.validate(config)
    models.check_name(config.model.name, config.model.gguf_file)
    return config


def run_check(args) -> int:
    from ..reward_check import DEFAULT_CACHE_DIR, CheckSettings, check_rewards

    settings = CheckSettings(prompts=args.prompts, cache_dir=args.cache_dir or DEFAULT_CACHE_DIR,
                             use_cache=not args.fresh).check()
    config = check_config(args)
    with stdout_to_stderr(args.json):
        result = check_rewards(config, settings, progress=StderrProgress())
    if args.json:
        print(json.dumps(result.to_dict(), allow_nan=False))
    else:
        print(format_report(result.to_dict()))
    return 0


class StderrProgress:
    """Progress lines on stderr: one per generation batch, one per later stage."""

    def __call__(self, stage: str, done: int, total: int) -> None:
        label = {"generate": "completions sampled", "score": "completions scored", "probe": "soundness probe"}[stage]
        tail = "done" if stage == "probe" else f"{done}/{total}"
        print(f"rewards check: {label} {tail}", file=sys.stderr, flush=True)


# --- the text report ------------------------------------------------------------------------

def format_report(result: dict) -> str:
    """The check as readable text, ending with the verdict."""
    source = "read from the cache" if result["cache"]["hit"] else f"generated in {result['seconds']['generate']:.0f} s"
    lines = [f"reward check: {result['model']} on {result['task']}, {result['prompts']} held-out prompts x "
             f"G={result['num_generations']} = {result['samples']} completions ({source}; {result['cache']['path']})", ""]
    lines += reward_lines(result)
    lines += signal_lines(result)
    lines += agreement_lines(result)
    lines += probe_lines(result)
    verdict = result["verdict"]
    lines += ["", f"verdict: {verdict['text']}", f"  because {verdict['reason']}"]
    lines += [f"  warning: {w}" for w in verdict["warnings"]]
    return "\n".join(lines)


def number(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def reward_lines(result: dict) -> list[str]:
    lines = [f"{'reward':<24} {'weight':>6} {'mean':>7} {'std':>7} {'None':>5}  histogram (counts per bin, range)"]
    for stats in result["rewards"]:
        hist = stats["histogram"]
        shape = " ".join(str(c) for c in hist["counts"])
        span = f"[{hist['edges'][0]:g}, {hist['edges'][-1]:g}]" if hist["edges"] else ""
        lines.append(f"{stats['name']:<24} {stats['weight']:>6g} {number(stats['mean']):>7} {number(stats['std']):>7} "
                     f"{stats['fraction_none']:>5.0%}  {shape} {span}")
        if stats["faults"]:
            lines.append(f"{'':<24} faults: " + ", ".join(f"{k}={v}" for k, v in stats["faults"].items()))
    return lines


def signal_lines(result: dict) -> list[str]:
    g, zero = result["num_generations"], result["zero_std_fraction"]
    flat = sum(1 for p in result["per_prompt"] if p["zero_std"])
    p_ref, forecast, cut = result["p_ref"], result["forecast"], result["truncation"]
    shares = ", ".join(f"{name} {'-' if share is None else format(share, '.0%')}"
                       for name, share in result["variance_shares"].items())
    return [
        "",
        f"zero-std groups: {flat}/{result['prompts']} prompts ({number(zero, '.0%')}) give GRPO no signal at G={g}",
        f"p_ref ({p_ref['reward']} >= {p_ref['threshold']}): mean {number(p_ref['mean'], '.3f')}; per prompt "
        + " ".join(f"{p['p_ref']:.2f}" for p in result["per_prompt"]),
        f"forecast ({forecast['params']['kl']}, {forecast['steps']} steps): success {forecast['p_ref_mean']:.3f} -> "
        f"{forecast['success_at_max_steps']:.3f}, limit p* {forecast['p_star']:.3f}; {forecast['note']}",
        f"  ({forecast['absorbing_prompts']} of {result['prompts']} prompts have p_ref 0 or 1, which the forecast "
        "holds fixed: all G samples agree on success, so GRPO has no success signal there)",
        f"advantage variance shares ({result['variance_scale']} scaling): {shares}",
        f"length cap: {cut['cut']} of {cut['samples']} completions reached {cut['cap']} tokens "
        f"(grpo.max_completion_length), {cut['cut_failed']} of them failed",
    ]


def agreement_lines(result: dict) -> list[str]:
    lines = ["", "agreement on success (score >= 0.999 x the reward's maximum):"]
    for table in result["agreement"]:
        a, b = table["a"], table["b"]
        lines.append(f"  {a} vs {b}: both {table['both']}, neither {table['neither']}, "
                     f"only {a} {table['a_only']}, only {b} {table['b_only']}")
        for cell, who in (("a_only", a), ("b_only", b)):
            for example in table["examples"][cell]:
                lines.append(f"    only {who}, prompt {example['group']}: {short(example['completion'])}")
    return lines


def probe_lines(result: dict) -> list[str]:
    if not result["probe"]:
        return ["", "soundness probe: no correctness reward to probe"]
    lines = ["", "soundness probe (known-wrong / known-right completions):"]
    for name, rates in result["probe"].items():
        lines.append(f"  {name}: false positives {rates['false_positive_rate']:.1%}, false negatives "
                     f"{rates['false_negative_rate']:.1%} ({rates['completions']} probe completions, "
                     f"{rates['battery']} battery)")
    return lines


def short(text: str, limit: int = 100) -> str:
    line = str(text).replace("\n", "⏎ ")
    return line if len(line) <= limit else line[: limit - 1] + "…"
