"""The `local-grpo` command line: train, eval, export, predict, plan, doctor, app, rewards.

Bad input gives one line on stderr naming the field, flag or file, and exit code 2. Commands
import heavy libraries (torch, trl) only when they run, so `--help` and errors are instant.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import json
import os
import sys

from . import config as config_mod
from . import models
from .errors import UserError

WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)  # reported as one line by main()

# Feature modules that add their own sub-command with `register_cli(subparsers)`.
COMMAND_MODULES = (
    "local_grpo.evaluate",
    "local_grpo.export",
    "local_grpo.predict_cli",
    "local_grpo.plan",
    "apps.cli",
    "rewards.cli",
    "local_grpo.reward_check_cli",  # adds `rewards check` under the command rewards.cli created
)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit code 2."""

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="local-grpo", description="Teach small language models to reason with GRPO on one machine.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    add_train_command(sub)
    add_doctor_command(sub)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and name.startswith(exc.name):
                continue  # that feature is not part of this install
            raise
        module.register_cli(sub)
    return parser


def add_config_flags(parser: argparse.ArgumentParser, fields: dict | None = None) -> None:
    """One flag per scalar config field (e.g. --num-generations), each overriding the config file."""
    for flag, (section, name, typ, help_text) in (fields or config_mod.override_fields()).items():
        dest = "cfg__" + flag.replace("-", "_")
        if typ is bool:
            parser.add_argument(f"--{flag}", dest=dest, action=argparse.BooleanOptionalAction, default=None,
                                help=f"{section}.{name}: {help_text}")
        else:
            parser.add_argument(f"--{flag}", dest=dest, type=typ, default=None, metavar=typ.__name__.upper(),
                                help=f"{section}.{name}: {help_text}")


def config_from_args(args) -> config_mod.Config:
    """Build the run config: preset < config file < flags."""
    from .presets import apply_preset

    data = config_mod.read_yaml(args.config) if getattr(args, "config", None) else {}
    source = args.config or "flags"
    preset = getattr(args, "preset", None) or data.get("preset")
    if preset:
        data = apply_preset(preset, data, source="--preset" if getattr(args, "preset", None) else source)
    config = config_mod.from_dict(data, source=source)
    overrides = {k[5:].replace("_", "-"): v for k, v in vars(args).items() if k.startswith("cfg__")}
    config_mod.apply_overrides(config, overrides)
    if getattr(args, "backend", None):
        config.backend = args.backend
    if getattr(args, "output", None):
        config.output_dir = args.output
    if getattr(args, "rewards", None):
        import rewards

        try:
            parsed = rewards.parse_reward_list(args.rewards)
        except rewards.RewardSpecError as exc:
            raise UserError(f"--rewards: {exc}") from None
        config.rewards = [config_mod.RewardSpec(name=name, weight=weight) for name, weight in parsed]
    return config


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
    p.add_argument("--force", action="store_true", help="train even when the memory plan says it will not fit")
    p.add_argument("--json", action="store_true", help="print the final summary as one JSON object on stdout")
    add_config_flags(p)
    p.set_defaults(func=run_train)


def run_train(args) -> int:
    from . import train

    config = config_from_args(args)
    if args.resume and not config.output_dir:
        raise UserError("--resume: needs --output RUN_DIR (the run to continue)")
    config = train.fill_defaults(config)
    config_mod.validate(config)
    models.check_name(config.model.name, config.model.gguf_file)
    _preflight(config, args.force)
    summary = train.train(config, resume=args.resume, overwrite=args.overwrite, progress=not args.json)
    if not train.is_main_process():
        return 0  # several processes (accelerate launch): rank 0 prints the summary
    if args.json:
        print(json.dumps(summary))
    else:
        print(train.format_summary(summary))
    return 0


@contextlib.contextmanager
def stdout_to_stderr(enabled: bool = True):
    """Send everything written to stdout (Python and C level) to stderr, so --json stays clean."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _preflight(config, force: bool) -> None:
    """Run the memory plan first when the planner is installed (refuses clear misfits unless --force)."""
    try:
        from . import plan
    except ModuleNotFoundError:
        return
    if hasattr(plan, "preflight"):
        plan.preflight(config, force=force)


# --- doctor -------------------------------------------------------------------------------

def add_doctor_command(sub) -> None:
    p = sub.add_parser("doctor", help="hardware, the backend `auto` picks, and versions")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=run_doctor)


def doctor_report() -> dict:
    from . import backends, models

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
    report["unsloth_installed"] = backends.unsloth_installed()
    report["backend_auto"] = backends.pick_backend("auto")
    try:
        report["embedded_model"] = models.embedded_gguf_path()
    except UserError as exc:
        report["embedded_model"] = None
        report["embedded_model_error"] = str(exc)
    report["cache_dir"] = models.cache_dir()
    return report


def run_doctor(args) -> int:
    report = doctor_report()
    if args.json:
        print(json.dumps(report))
        return 0
    gpu = report["gpu"]
    print(f"python {report['python']}, {report['cpu_count']} CPU cores, {report['ram_gb']} GB RAM")
    print(f"GPU: {gpu['name']} ({gpu['vram_gb']} GB) x{gpu['count']}" if gpu else "GPU: none (training runs on the CPU)")
    why = "Unsloth installed and a GPU present" if report["backend_auto"] == "unsloth" else (
        "no GPU" if report["unsloth_installed"] else "Unsloth not installed")
    print(f"backend auto -> {report['backend_auto']} ({why})")
    print(f"embedded model: {report['embedded_model'] or report.get('embedded_model_error')}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v))
    missing = [k for k, v in report["versions"].items() if v is None and k not in ("vllm",)]
    if missing:
        print("not installed: " + ", ".join(missing))
    return 0


# --- entry point --------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
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
