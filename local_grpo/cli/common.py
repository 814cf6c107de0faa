"""What every command shares: one-line argparse errors, config flags, and the one flags -> Config builder.

`config_from_args` is the only place flags become a Config (train, plan, eval and the rewards check
use it; the studio starts `local-grpo train` with flags). Precedence: preset < config file (or a
run's config.yaml) < flags.
"""

from __future__ import annotations

import argparse
import json
import sys

from .. import config as config_mod
from ..errors import UserError


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit code 2."""

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def add_config_flags(parser: argparse.ArgumentParser, only: tuple[str, ...] | None = None) -> None:
    """One flag per scalar config field (e.g. --num-generations), each overriding the config file.

    `only` limits them to these flag names (plan and eval take a few).
    """
    table = config_mod.override_fields()
    for flag in only or tuple(table):
        section, name, typ, help_text = table[flag]
        dest = "cfg__" + flag.replace("-", "_")
        if typ is bool:
            parser.add_argument(f"--{flag}", dest=dest, action=argparse.BooleanOptionalAction, default=None,
                                help=f"{section}.{name}: {help_text}")
        else:
            parser.add_argument(f"--{flag}", dest=dest, type=typ, default=None, metavar=typ.__name__.upper(),
                                help=f"{section}.{name}: {help_text}")


def config_from_args(args, base: str | None = None) -> config_mod.Config:
    """The run config from flags: preset < config file (`base`, e.g. a run's config.yaml, else --config) < flags."""
    from ..presets import apply_preset

    path = base or getattr(args, "config", None)
    data = config_mod.read_yaml(path, flag="--run" if base else "--config") if path else {}
    source = path or "flags"
    preset = getattr(args, "preset", None) or data.get("preset")
    if preset:
        data = apply_preset(preset, data, source="--preset" if getattr(args, "preset", None) else source)
    config = config_mod.from_dict(data, source=source)
    task_before = config.data.task
    overrides = {k[5:].replace("_", "-"): v for k, v in vars(args).items() if k.startswith("cfg__")}
    config_mod.apply_overrides(config, overrides)
    if getattr(args, "cfg__task", None):
        if getattr(args, "cfg__dataset", None):
            raise UserError("--task: give --task or --dataset, not both")
        config.data.dataset = None  # the flag names a built-in task instead of the config file's (or run's) dataset
        if config.data.task != task_before:  # the file's options were another task's
            config.data.task_options = {}
    if getattr(args, "backend", None):
        config.backend = args.backend
    if getattr(args, "output", None):
        config.output_dir = args.output
    if getattr(args, "task_options", None):
        config.data.task_options = task_options(args.task_options)
    if getattr(args, "trl", None):
        config.grpo.trl = {**config.grpo.trl, **trl_overrides(args.trl)}
    if getattr(args, "rewards", None):
        import rewards

        try:
            parsed = rewards.parse_reward_list(args.rewards)
        except rewards.RewardSpecError as exc:
            raise UserError(f"--rewards: {exc}") from None
        config.rewards = [config_mod.RewardSpec(name=name, weight=weight) for name, weight in parsed]
    return config


def trl_overrides(items: list[str]) -> dict:
    """{key: value} from --trl KEY=VALUE flags, each value read as YAML."""
    import yaml

    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--trl: expected KEY=VALUE (a GRPOConfig field), got {item!r}")
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError:
            raise UserError(f"--trl: {key.strip()}: cannot read the value {text!r}") from None
    return out


def task_options(text: str) -> dict:
    """--task-options as a JSON object."""
    try:
        options = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"--task-options: not valid JSON ({exc.msg})") from None
    if not isinstance(options, dict):
        raise UserError("--task-options: expected a JSON object, e.g. '{\"path\": \"test.jsonl\"}'")
    return options
