"""`local-grpo eval`: pass@1 / pass@k, rewards, format and length of a model, and base vs trained."""

from __future__ import annotations

import json
import os
import sys

from .. import config as config_mod
from .. import rundir, tasks
from ..config import Config
from ..errors import UserError
from ..evaluate import EvalSettings, run_eval, write_results
from ..output import notice, stdout_to_stderr
from .common import add_config_flags, config_from_args

CONFIG_FLAGS = ("model", "task", "dataset", "answer-format")


def register_cli(subparsers) -> None:
    p = subparsers.add_parser("eval", help="pass@1 / pass@k, rewards, format and length of a model (and base vs trained)",
                              description="Evaluate a model (optionally with a LoRA adapter) on held-out prompts.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--adapter", help="a PEFT adapter folder to evaluate on top of --model")
    src.add_argument("--run", help="a run directory: model, task, rewards, system prompt and adapter come from it")
    p.add_argument("--checkpoint", choices=rundir.ADAPTER_CHOICES,
                   help="with --run: best (the default when the run kept one, trained with --eval-steps) or final")
    add_config_flags(p, only=CONFIG_FLAGS)
    p.add_argument("--task-options", help="task options as JSON, e.g. '{\"path\": \"test.jsonl\"}' for gsm8k")
    p.add_argument("--rewards", help="name[:weight],... rewards to report (default: the run's or the task's)")
    p.add_argument("--split", default="held-out", help="held-out (default) or train")
    p.add_argument("--n", type=int, help="number of prompts (default: the whole held-out split, 40)")
    p.add_argument("--k", type=int, default=4, help="k of pass@k (default 4)")
    p.add_argument("--samples", type=int, default=8, help="sampled completions per prompt for pass@1/pass@k (default 8; 0 = greedy only)")
    p.add_argument("--temperature", type=float, help="sampling temperature (default: the run's, else 1.0)")
    p.add_argument("--max-new-tokens", type=int, help="longest completion (default: the run's max_completion_length, 64)")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per generation batch (default 8)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (the same for base and trained)")
    p.add_argument("--backend", choices=config_mod.BACKENDS, help="auto, unsloth, hf (default: the run's)")
    p.add_argument("--compare", action="store_true", help="evaluate base and trained on the same prompts and seeds")
    p.add_argument("--out", help="per-prompt results as jsonl (default with --run: RUN_DIR/eval_prompts.jsonl)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=main)


def config_for_args(args) -> tuple[Config, str | None, str | None]:
    """The config, the adapter folder named by the flags (--run reads RUN_DIR/config.yaml), and with --run
    the line that says which of the run's adapters that is."""
    chosen_text = None
    if args.run:
        run = rundir.RunDir.open(args.run)
        config = config_from_args(args, base=run.file(rundir.CONFIG))
        chosen = run.choose_adapter(args.checkpoint)
        adapter = chosen["path"]
        if not os.path.isdir(adapter):
            raise UserError(f"--run: {run.path} has no adapter/ folder yet (training not finished?)")
        chosen_text = f"eval: {chosen['text']}"
    else:
        if args.checkpoint:
            raise UserError("--checkpoint: needs --run RUN_DIR (it picks one of the run's adapters)")
        if not getattr(args, "cfg__model", None):
            raise UserError("--model: required unless --run RUN_DIR is given")
        config = config_from_args(args)
        adapter = args.adapter
        if args.n:
            config.data.num_heldout = args.n
    if adapter is not None and not os.path.isdir(adapter):
        raise UserError(f"--adapter: no such folder: {adapter}")
    config_mod.validate(tasks.fill_defaults(config))
    return config, adapter, chosen_text


def settings_for_args(args, config: Config) -> EvalSettings:
    return EvalSettings(
        n=args.n, k=args.k, samples=args.samples,
        temperature=args.temperature if args.temperature is not None else config.grpo.temperature,
        max_new_tokens=args.max_new_tokens or config.grpo.max_completion_length,
        batch_size=args.batch_size, seed=args.seed, split=args.split,
    )


def main(args) -> int:
    config, adapter, chosen_text = config_for_args(args)
    settings = settings_for_args(args, config).check()  # bad flags are refused before anything else is said
    if chosen_text:
        notice(chosen_text)
    with stdout_to_stderr(args.json):  # library prints (Unsloth's loader) must not reach a --json stdout
        base = rundir.RunDir.open(args.run).base_model() if args.run else None  # the base as training loaded it
        result = run_eval(config, adapter, settings, compare=args.compare, progress=True, base=base)
    if args.compare and not args.run:
        print("note: --compare without --run prints the table but writes no eval_compare.json", file=sys.stderr)
    written = write_results(result, rundir.RunDir.open(args.run).path if args.run else None, args.out, args.compare)
    summary = {k: v for k, v in result.items() if k != "records"}
    summary["files"] = written
    if args.json:
        print(json.dumps(summary))
    else:
        print(format_table(result))
        for path in written:
            print(f"wrote {path}")
    return 0


def format_table(result: dict) -> str:
    """Metrics as a text table: one column per model (base, trained, change) or one for a single model."""
    columns = [("base", result["base"]), ("trained", result["trained"])] if "base" in result else [("value", result["metrics"])]
    names = [k for k in columns[0][1] if k not in ("n_prompts", "seconds")]
    lines = [f"{'metric':<26}" + "".join(f"{label:>10}" for label, _ in columns) + (f"{'change':>10}" if len(columns) == 2 else "")]

    def cell(v):
        return f"{v:>10.3f}" if isinstance(v, (int, float)) else f"{'-':>10}"

    for name in names:
        values = [m.get(name) for _, m in columns]
        line = f"{name:<26}" + "".join(cell(v) for v in values)
        if len(values) == 2 and all(isinstance(v, (int, float)) for v in values):
            line += f"{values[1] - values[0]:>+10.3f}"
        lines.append(line)
    seconds = sum(m.get("seconds") or 0 for _, m in columns)
    lines.append(f"{result['n_prompts']} prompts ({result['split']}), samples={result['samples']}, k={result['k']}, "
                 f"temperature={result['temperature']}, seed={result['seed']}, max_new_tokens={result['max_new_tokens']}, "
                 f"{seconds:.0f} s")
    return "\n".join(lines)
