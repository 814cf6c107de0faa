"""`local-grpo predict`: the success-amplification predictor on the command line.

Reads its inputs from flags or from a run directory (p_ref.json, else the first logged step of
completions.jsonl; config.yaml for β and the variant), calls local_grpo.dynamics, and prints one
JSON object (--json) or a short readable summary. The maths lives in dynamics.py, not here.
Must stay light to import: no torch, transformers or trl.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import config as config_mod
from .. import dynamics, rundir
from ..errors import UserError

DEFAULTS = {"kl": "ref", "norm": "meanstd", "alpha": 0.5, "eps": 1e-5, "steps": 50}
SPARK_LEVELS = "_.-~=+*#"


def register_cli(subparsers):
    """Add `predict` to an argparse subparsers object; sets func=run(args) -> int."""
    parser = subparsers.add_parser(
        "predict",
        help="predict how GRPO amplifies the probability of success (Mroueh's recurrence)",
        description="Predict the success trajectory p_0..p_N, its limit p* and every fixed point "
        "for one p_ref, or per prompt for a run directory (--from-run).",
    )
    parser.add_argument("--p-ref", type=float, help="success probability of the reference model, in [0, 1]")
    parser.add_argument("--beta", type=float, help="KL strength β > 0 (paper's, per sequence); step size for --kl none")
    parser.add_argument("--kl", help="ref | mirror | both | none (default ref; none = mirror dynamics, β as step size)")
    parser.add_argument("--alpha", type=float, help="weight of the KL to the reference with --kl both, in (0, 1] (default 0.5)")
    parser.add_argument("--norm", help="meanstd (GRPO) | mean (Dr. GRPO) (default meanstd)")
    parser.add_argument("--eps", type=float, help="ε in sqrt(p(1-p)+ε) for --norm meanstd (default 1e-5)")
    parser.add_argument("--steps", type=int, help="trajectory length N (default 50)")
    parser.add_argument("--from-run", metavar="RUN_DIR", help="predict per prompt from a run's p_ref.json (or completions.jsonl)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.set_defaults(func=run)
    return parser


def run(args) -> int:
    """Entry point for `local-grpo predict`; raises UserError on bad input."""
    if args.from_run is not None:
        if args.p_ref is not None:
            raise UserError("--p-ref and --from-run exclude each other: pass one of them")
        return _run_from_dir(args)
    if args.p_ref is None:
        raise UserError("--p-ref is required (a probability in [0, 1]) unless --from-run RUN_DIR is given")
    if args.beta is None:
        raise UserError("--beta is required (a number > 0)")
    params = _params_from_flags(args, {})
    result = dynamics.predict(args.p_ref, **params)
    _print(args, result, params, source=None)
    return 0


def _params_from_flags(args, base):
    """Flags win over `base` (values from a run's config), which win over DEFAULTS."""
    params = {**DEFAULTS, **base}
    for name in ("beta", "kl", "norm", "alpha", "eps", "steps"):
        value = getattr(args, name)
        if value is not None:
            params[name] = value
    return params


# ---------------------------------------------------------------------------------------------
# --from-run


def _run_from_dir(args) -> int:
    run_dir = Path(args.from_run)
    if not run_dir.is_dir():
        raise UserError(f"--from-run: {run_dir} is not a directory")
    p_refs, prompts, source = read_p_refs(run_dir)
    params = _params_from_flags(args, params_from_config(run_dir, beta_given=args.beta is not None))
    if "beta" not in params:
        raise UserError(f"--beta is required: {run_dir} has no config.yaml with grpo.beta")
    result = dynamics.predict_dataset(p_refs, **params)
    for row, prompt in zip(result["per_prompt"], prompts):
        row["prompt"] = prompt
    _print(args, result, params, source=source)
    return 0


def read_p_refs(run_dir):
    """(p_refs, prompts, source) from RUN_DIR/p_ref.json, else from completions.jsonl's first step."""
    run = rundir.RunDir(str(run_dir))
    p_ref_path = run.file(rundir.P_REF)
    if os.path.exists(p_ref_path):
        data = run.p_ref()
        try:
            rows = data["per_prompt"]
            return [float(r["p_ref"]) for r in rows], [r.get("prompt") for r in rows], f"{p_ref_path} (k={data.get('k')})"
        except (ValueError, KeyError, TypeError) as err:
            raise UserError(f"{p_ref_path}: expected {{'k', 'per_prompt': [{{'prompt', 'p_ref'}}], 'mean'}} ({err})") from None

    completions_path = run.file(rundir.COMPLETIONS)
    if not os.path.exists(completions_path):
        raise UserError(f"--from-run: {run_dir} has neither p_ref.json nor completions.jsonl")
    records = [r for r in run.completions() if "step" in r]
    if not records:
        raise UserError(f"{completions_path}: no logged completions to measure p_ref from")
    first_step = min(r["step"] for r in records)
    successes = {}
    for r in records:
        if r["step"] != first_step:
            continue
        if "success" not in r:
            raise UserError(f"{completions_path}: lines have no 'success' field (0|1) to measure p_ref from")
        successes.setdefault(r.get("prompt"), []).append(float(r["success"]))
    prompts = list(successes)
    p_refs = [sum(s) / len(s) for s in successes.values()]
    return p_refs, prompts, f"{completions_path} (no p_ref.json: measured success at step {first_step})"


def params_from_config(run_dir, beta_given=False):
    """The predictor's kl/beta/norm/eps/alpha from RUN_DIR/config.yaml (TRL values mapped), or {}."""
    config_path = run_dir / rundir.CONFIG
    if not config_path.exists():
        return {}
    config = config_mod.load(str(config_path))
    g = config.grpo
    params = {"kl": config.kl_mode, "alpha": g.kl_alpha}
    beta = g.beta
    if config.kl_mode == "none" or not beta:
        # no KL term: the predictor needs a step size from the user (mirror dynamics)
        params["kl"] = "none"
        if not beta_given:
            raise UserError(f"--beta is required: {config_path} has no KL (grpo.kl none / beta 0); pass --beta as a step size")
        beta = 1.0  # overridden by the flag
    params.update(dynamics.mapping_from_trl(beta, g.scale_rewards, g.num_generations))
    return params


# ---------------------------------------------------------------------------------------------
# Output


def _print(args, result, params, source):
    if args.json:
        keys = ["p_star", "fixed_points", "trajectory", "converged", "cycle", "per_prompt", "p_ref_mean"]
        out = {k: result[k] for k in keys if k in result}
        out["params"] = params
        if source:
            out["source"] = source
        print(json.dumps(out))
        return
    print(summary(result, params, source))


def summary(result, params, source=None):
    """A short readable report of a prediction."""
    norm_name = {"meanstd": "GRPO (mean+std)", "mean": "Dr. GRPO (mean-only)"}[params["norm"]]
    kl_name = {
        "ref": "KL to reference",
        "mirror": "KL to previous policy (mirror)",
        "both": f"KL to reference and previous policy (alpha={params['alpha']:g})",
        "none": "no KL (mirror dynamics, beta as step size)",
    }[params["kl"]]
    eps_part = f", eps={params['eps']:g}" if params["norm"] == "meanstd" else ""
    lines = [f"{norm_name}, {kl_name}, beta={params['beta']:g}{eps_part}"]
    trajectory = result["trajectory"]
    if source:
        n = len(result["per_prompt"])
        lines.append(f"p_ref from {source}: {n} prompts, mean {result['p_ref_mean']:.4f}")
        lines.append(f"p*  {_fmt(result['p_star'])}  (mean of the per-prompt limits)")
    else:
        lines.append(f"p_ref {_fmt(trajectory[0])}  ->  p* {_fmt(result['p_star'])}  (limit of the iteration)")
        if result.get("cycle"):
            lines.append("  oscillates: cycle " + ", ".join(_fmt(p) for p in result["cycle"]) + "; p* is the cycle mean")
        points = ", ".join(f"{_fmt(f['p'])} ({'stable' if f['stable'] else 'unstable'})" for f in result["fixed_points"])
        lines.append(f"fixed points: {points or 'none'}")
    lines.append(f"trajectory ({len(trajectory) - 1} steps): {_fmt(trajectory[0])} {sparkline(trajectory)} {_fmt(trajectory[-1])}")
    return "\n".join(lines)


def sparkline(values, width=60):
    """An ASCII sparkline of `values` (subsampled to `width` characters), scaled to their range."""
    if len(values) > width:
        values = [values[round(i * (len(values) - 1) / (width - 1))] for i in range(width)]
    low, high = min(values), max(values)
    if high - low < 1e-12:
        return SPARK_LEVELS[0] * len(values)
    top = len(SPARK_LEVELS) - 1
    return "".join(SPARK_LEVELS[round((v - low) / (high - low) * top)] for v in values)


def _fmt(p):
    """4 decimals, or 1 − x when p is too close to 1 to show."""
    if 0.9999 < p < 1.0:
        return f"1-{1.0 - p:.1e}"
    return f"{p:.4f}"
