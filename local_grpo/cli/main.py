"""The `local-grpo` command line: train, eval, export, predict, plan, doctor, app, rewards.

Bad input gives one line on stderr naming the field, flag or file, and exit code 2. Commands
import heavy libraries (torch, trl) only when they run, so `--help` and errors are instant; before
any of them, `main` silences the library notices that say nothing about the run (`output.quiet_library_notices`).
"""

from __future__ import annotations

import errno
import json
import os
import sys

from .. import config as config_mod
from ..errors import UserError
from ..output import quiet_library_notices, stdout_to_stderr
from .common import ArgumentParser, add_config_flags, config_from_args

WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)  # reported as one line by main()

def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="local-grpo", description="Teach small language models to reason with GRPO on one machine.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    add_train_command(sub)
    add_doctor_command(sub)
    from . import app, eval, export, plan, predict, rewards

    for module in (eval, export, predict, plan, app, rewards):
        module.register_cli(sub)
    return parser


# --- train --------------------------------------------------------------------------------

def add_train_command(sub) -> None:
    p = sub.add_parser("train", help="train a LoRA adapter with GRPO into a run directory",
                       description="Train with GRPO. Flags override the config file, which overrides the preset.")
    p.add_argument("--config", help="YAML config (see configs/)")
    p.add_argument("--preset", help="cpu, 6gb, 8gb, 12gb, 16gb, 24gb")
    p.add_argument("--rewards", help="name[:weight],... or path/to/file.py:function[:weight]")
    p.add_argument("--backend", choices=config_mod.BACKENDS, help="auto (Unsloth with a GPU, else hf), unsloth, hf")
    p.add_argument("--output", help="run directory (default runs/<task>-<date>-<time>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --output from its last checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    p.add_argument("--force", action="store_true", help="train even when the memory plan says it will not fit, or "
                   "the learnability gate finds the starting model succeeds on (almost) none or all of its samples")
    p.add_argument("--json", action="store_true", help="print the final summary as one JSON object on stdout")
    p.add_argument("--trl", action="append", metavar="KEY=VALUE", default=None,
                   help="any other field of TRL's GRPOConfig (grpo.trl), e.g. --trl importance_sampling_level=sequence; "
                        "repeatable; values are read as YAML (0.28, true, [a, b])")
    p.add_argument("--task-options", help="data.task_options as JSON, e.g. '{\"digits\": 3}' for arithmetic "
                   "(a --task naming another task than the config's starts from no options)")
    add_config_flags(p)
    p.set_defaults(func=run_train)


def run_train(args) -> int:
    from .. import train

    config = config_from_args(args)
    if args.resume and not config.output_dir:
        raise UserError("--resume: needs --output RUN_DIR (the run to continue)")
    if args.resume and args.cfg__max_steps is None:  # plain --resume: the run's own max_steps, not the default
        from ..rundir import CONFIG, RunDir

        config.grpo.max_steps = config_mod.load(RunDir.open(config.output_dir).file(CONFIG)).grpo.max_steps
    with stdout_to_stderr(args.json):  # libraries print (Unsloth, trackers): stdout is for the one JSON object
        summary = train.train(config, resume=args.resume, overwrite=args.overwrite, progress=not args.json,
                              force=args.force)
    if not train.is_main_process():
        return 0  # several processes (accelerate launch): rank 0 prints the summary
    if args.json:
        print(json.dumps(summary))
    else:
        print(train.format_summary(summary))
    return 0


# --- doctor -------------------------------------------------------------------------------

def add_doctor_command(sub) -> None:
    p = sub.add_parser("doctor", help="hardware, the backend `auto` picks, and versions")
    p.add_argument("--model", help="a hub id: which name Unsloth will fetch for it (4-bit and 16-bit), and what is cached")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=run_doctor)


def doctor_report(model: str | None = None) -> dict:
    from .. import backends, models

    report: dict = {"python": sys.version.split()[0], "cpu_count": os.cpu_count()}
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        report["ram_gb"] = round(pages * page_size / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        report["ram_gb"] = None
    report["versions"] = backends.versions()
    gpu = None
    if backends.cuda_available():
        import torch

        props = torch.cuda.get_device_properties(0)
        gpu = {"name": props.name, "vram_gb": round(props.total_memory / 2**30, 1), "count": torch.cuda.device_count()}
    report["gpu"] = gpu
    report["cpu_bf16_flags"] = backends.cpu_bf16_flags()
    report["cpu_autocast_auto"] = "bf16" if report["cpu_bf16_flags"] else "fp32"  # what model.cpu_autocast auto picks
    report["unsloth_installed"] = backends.unsloth_installed()
    report["backend_auto"] = backends.choose_backend(config_mod.Config(), backends.Machine.here()).backend  # a bare config's auto
    try:
        report["embedded_model"] = models.embedded_gguf_path()
    except UserError as exc:
        report["embedded_model"] = None
        report["embedded_model_error"] = str(exc)
    report["cache_dir"] = models.cache_dir()
    if model:
        report["unsloth_fetch"] = backends.unsloth_fetch(model)
    return report


def cpu_autocast_line(flags: list[str]) -> str:
    """What doctor found in the CPU and what model.cpu_autocast auto chooses for CPU training."""
    if flags:
        return (f"CPU bf16: native ({', '.join(flags)}): CPU training runs under bf16 autocast "
                "(model.cpu_autocast auto; --cpu-autocast off forces fp32)")
    return ("CPU bf16: not native (no avx512_bf16 or amx_bf16 flag): CPU training stays fp32 "
            "(bf16 would be emulated, several times slower; --cpu-autocast bf16 forces it)")


def run_doctor(args) -> int:
    report = doctor_report(getattr(args, "model", None))
    if args.json:
        print(json.dumps(report))
        return 0
    gpu = report["gpu"]
    print(f"python {report['python']}, {report['cpu_count']} CPU cores, {report['ram_gb']} GB RAM")
    print(f"GPU: {gpu['name']} ({gpu['vram_gb']} GB) x{gpu['count']}" if gpu else "GPU: none (training runs on the CPU)")
    print(cpu_autocast_line(report["cpu_bf16_flags"]))
    why = "Unsloth installed and a GPU present" if report["backend_auto"] == "unsloth" else (
        "no GPU" if report["unsloth_installed"] else "Unsloth not installed")
    print(f"backend auto -> {report['backend_auto']} ({why})")
    print(f"embedded model: {report['embedded_model'] or report.get('embedded_model_error')}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v))
    missing = [k for k, v in report["versions"].items() if v is None and k not in ("vllm",)]
    if missing:
        print("not installed: " + ", ".join(missing))
    fetch = report.get("unsloth_fetch")
    if fetch:
        def cached(entry):
            return "cached" if entry["cached"] else "not cached"
        print(f"{fetch['model']} ({cached(fetch)}): Unsloth fetches {fetch['4bit']['name']} in 4-bit "
              f"({cached(fetch['4bit'])}), {fetch['16bit']['name']} in 16-bit ({cached(fetch['16bit'])})")
    return 0


# --- entry point --------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    quiet_library_notices()
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"local-grpo: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("local-grpo: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # disk full, file-size limit, read-only or vanished output: one line, not a traceback
        if exc.errno not in WRITE_ERRNOS:
            raise
        where = exc.filename or "an output file"
        hint = " (lines already written are kept; free space, then `local-grpo train --resume --output RUN_DIR`)" \
            if args.command == "train" else ""
        print(f"local-grpo: error: cannot write {where}: {exc.strerror or exc}{hint}", file=sys.stderr)
        return 1
    except Exception as exc:  # a RewardSpecError from the reward library is user input too
        if type(exc).__name__ == "RewardSpecError":
            print(f"local-grpo: error: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
