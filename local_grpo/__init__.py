"""local-grpo: teach small language models to reason with GRPO on one machine."""

__version__ = "0.1.0"
