"""The command line layer: argparse, the one flags -> Config builder, and all printing.

    main.py     the `local-grpo` parser, train, doctor and the entry point (one-line errors, exit 2)
    common.py   ArgumentParser, config flags, `config_from_args` (shared by train, plan, eval, app, rewards)
    predict.py, app.py, ...   one module per other command

Feature modules (train, evaluate, export, plan, dynamics, rewards) are library code: they take a
Config or plain arguments, return data, and never parse flags or print results.
"""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
