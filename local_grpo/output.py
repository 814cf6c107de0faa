"""Where text goes: stdout carries a command's result (one JSON object with --json), stderr everything else.

Libraries print to stdout on their own (Unsloth's banners and config notices, C extensions): code that
calls them wraps the call in `stdout_to_stderr()` so a `--json` command's stdout stays one object.
This module imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import os
import sys


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
