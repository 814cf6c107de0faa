"""The maths tasks' audit verifier: math-verify called directly, on the tasks' own answer parser, in a child process.

Independent of the reward library by construction: the answer comes from local_grpo/tasks/answers.py
(not rewards/extract.py), the gold and the answer are parsed with math-verify's own extraction (not
rewards/mathcheck.py's configuration), and the child process is this module's own (not rewards/worker.py).
math-verify's timeouts use signal.alarm, which fails off the main thread, so they are off
(parsing_timeout=None, timeout_seconds=None) and each item has a deadline here instead: the parent waits
on the child's pipe with select() and kills it when the deadline passes (the item is then None, "cannot
judge"); the next item starts a fresh child. The child runs this file as a script and imports no local_grpo.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import subprocess
import sys
import threading
import time

ITEM_TIMEOUT_S = 5.0
STARTUP_TIMEOUT_S = 120.0  # importing sympy and math-verify on a busy machine
MEMORY_MB = 4096
WORDS = re.compile(r"[A-Za-z]{2,}")


class MathVerifyChild:
    """One persistent child that judges (gold, answer) pairs; killed and restarted when an item overruns."""

    def __init__(self, item_timeout_s: float = ITEM_TIMEOUT_S, memory_mb: int = MEMORY_MB):
        self.item_timeout_s = item_timeout_s
        self.memory_mb = memory_mb
        self.timeouts = 0
        self._proc: subprocess.Popen | None = None
        self._buffer = b""
        self._lock = threading.Lock()

    def verdicts(self, pairs: list[tuple[str, str]]) -> list[bool | None]:
        """True/False per (gold, answer) pair; None when the gold is not maths, the child failed or timed out."""
        with self._lock:
            return [self._ask(gold, answer) for gold, answer in pairs]

    def _ask(self, gold: str, answer: str) -> bool | None:
        try:
            proc = self._running()
            proc.stdin.write(json.dumps([gold, answer]).encode() + b"\n")
            proc.stdin.flush()
            line = self._read_line(self.item_timeout_s)
        except (OSError, ValueError):
            line = None
        if line is None:
            self.timeouts += 1
            self.kill()
            return None
        return json.loads(line)

    def _running(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self._buffer = b""
            self._proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), str(self.memory_mb)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          env={**os.environ, "OMP_NUM_THREADS": "1"})
            if self._read_line(STARTUP_TIMEOUT_S) != b'"ready"':
                self.kill()
                raise OSError("the math-verify child did not start")
        return self._proc

    def _read_line(self, timeout_s: float) -> bytes | None:
        deadline = time.monotonic() + timeout_s
        stdout = self._proc.stdout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([stdout], [], [], left)[0]:
                return None
            chunk = os.read(stdout.fileno(), 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def kill(self) -> None:
        """Stop the child now (the next item starts a new one)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


_CHILD: MathVerifyChild | None = None
_CHILD_LOCK = threading.Lock()


def shared_child() -> MathVerifyChild:
    """The process's math-verify child (started on first use, stopped at exit)."""
    global _CHILD
    with _CHILD_LOCK:
        if _CHILD is None:
            _CHILD = MathVerifyChild()
            atexit.register(_CHILD.kill)
        return _CHILD


# --- the child side (this file run as a script) ----------------------------------------------

def as_latex(text: str) -> str:
    """Text in $…$ unless it already has math delimiters or a \\boxed{} (math-verify's LaTeX extraction needs them)."""
    return text if "$" in text or "\\boxed" in text or "\\(" in text or "\\[" in text else f"${text}$"


def judge(gold: str, answer: str) -> bool | None:
    """Child side: math-verify's verdict of the stated answer against the gold; None when the gold is words or no maths."""
    from math_verify import parse, verify

    gold = " ".join(str(gold).split())
    if not gold or (WORDS.search(gold) and "\\" not in gold):
        return None  # "Paris", "forty two": not maths (read as LaTeX it would be a product of letters)
    gold_parsed = parse(as_latex(gold), parsing_timeout=None)
    if not any(not isinstance(item, str) for item in gold_parsed):
        return None
    # an answer in words ("18 dollars") is left to math-verify's own extraction; bare LaTeX gets delimiters
    answer_parsed = parse(answer if WORDS.search(answer) else as_latex(answer), parsing_timeout=None)
    return bool(verify(gold_parsed, answer_parsed, timeout_seconds=None))


def serve(memory_mb: int) -> None:
    """Answer one JSON verdict line per [gold, answer] line on stdin until stdin closes."""
    import logging
    import resource

    if memory_mb > 0:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    logging.disable(logging.WARNING)
    import math_verify  # noqa: F401 - imported before "ready", so the first item's deadline is the item's own

    out = sys.stdout.buffer
    out.write(b'"ready"\n')
    out.flush()
    for line in sys.stdin.buffer:
        try:
            gold, answer = json.loads(line)
            verdict = judge(gold, answer)
        except Exception:  # a parse math-verify cannot handle: cannot judge
            verdict = None
        out.write(json.dumps(verdict).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else MEMORY_MB)
