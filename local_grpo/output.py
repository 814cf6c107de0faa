"""Where text goes: stdout carries a command's result (one JSON object with --json), stderr everything else.

Libraries print to stdout on their own (Unsloth's banners and config notices, C extensions): code that
calls them wraps the call in `stdout_to_stderr()` so a `--json` command's stdout stays one object.
Library notices that say nothing about the user's run are silenced once per process, each at its
source, by `quiet_library_notices()` (the CLI calls it first); every other warning stays visible.
This module imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

# Log records that say nothing about the user's run, by logger: the start of each one's format string.
# Matched on the unformatted message, so every other record of these loggers still shows.
QUIET_LOG_RECORDS = {
    # torch 2.14 calls torchao's pytree registration of its enums deprecated (torchao is imported with
    # transformers and peft, so this came on every train, eval and export)
    "torch.utils._pytree": ("%s is an Enum subclass and is now natively supported by torch.compile",),
    # bitsandbytes looks for the optional `kernels` package, which would fetch a CPU kernel from the hub;
    # without it bitsandbytes uses its own CPU kernels
    "bitsandbytes.backends.cpu.ops": ("Failed to load CPU gemm_4bit_forward from kernels-community",),
}


class _DropRecords(logging.Filter):
    """Drops the records whose format string starts with one of `prefixes`."""

    def __init__(self, prefixes: tuple[str, ...]):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self.prefixes))


def quiet_library_notices() -> None:
    """Silence, for this process, the library notices of `QUIET_LOG_RECORDS` and transformers' weight bars.

    Call it before torch, transformers or bitsandbytes are imported: some notices come at import.
    transformers' own bars ("Loading weights", "Writing model shards") count the tensors of local files
    and end in seconds; huggingface_hub's download bars, which count bytes, stay on.
    HF_HUB_DISABLE_PROGRESS_BARS, when set, decides every bar instead. Calling it again changes nothing.
    """
    for name, prefixes in QUIET_LOG_RECORDS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropRecords) for f in logger.filters):
            logger.addFilter(_DropRecords(prefixes))
    if os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS") is None:
        from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

        # transformers reads the global switch once, when it is imported; the hub's own bars are the
        # group "huggingface_hub.*" and are switched back on
        disable_progress_bars()
        enable_progress_bars("huggingface_hub")


@contextlib.contextmanager
def stdout_to_stderr(enabled: bool = True):
    """Send everything written to stdout to stderr while the block runs: Python prints and C-level writes.

    Two layers: `sys.stdout` is pointed at `sys.stderr` (catches prints even where sys.stdout is not
    file descriptor 1, e.g. under pytest's capture), and descriptor 1 is duplicated onto descriptor 2
    (catches writes from C extensions and subprocesses that inherit it). Nesting is safe.
    """
    if not enabled:
        yield
        return
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no descriptor 1 (a closed stdout): the Python layer alone
        saved = None
    if saved is not None:
        os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def notice(message: str) -> None:
    """One line for the user on stderr (e.g. a backend choice made for them)."""
    print(f"local-grpo: {message}", file=sys.stderr, flush=True)
