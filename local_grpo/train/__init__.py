"""GRPO training: `train(config)` runs one GRPO job into a run directory (run.py has the flow)."""

from .run import format_summary, is_main_process, train

__all__ = ["format_summary", "is_main_process", "train"]
