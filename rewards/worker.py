"""Child processes for anything that can hang: user reward files, math-verify, with our own timeouts.

No signal.alarm anywhere: the parent waits on a pipe with select() and a deadline, and kills the
child (SIGKILL) when the deadline passes; the next request starts a fresh child. So the same code
works from the main thread, from any other thread (trainer, Gradio app) and from the CLI.
A child is a plain `python -c` subprocess (not multiprocessing), so the user's main script is never
re-imported. Each ChildProcess serves one request at a time (a lock), from any thread.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

from rewards._child import HEADER

PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
             "TOKENIZERS_PARALLELISM": "false", "PYTHONDONTWRITEBYTECODE": "1"}
LIVE_CHILDREN: "weakref.WeakSet[ChildProcess]" = weakref.WeakSet()


class ChildTimeout(Exception):
    """The child did not answer before its deadline (it has been killed)."""


class ChildDied(Exception):
    """The child exited or closed its pipe (crash, memory limit, os._exit in user code)."""


class ChildProcess:
    """One persistent child process, restarted on demand, with an address-space limit."""

    def __init__(self, memory_mb: int = 2048, label: str = "reward"):
        self.memory_mb = memory_mb
        self.label = label
        self.restarts = 0
        self._proc: subprocess.Popen | None = None
        self._imported: set[str] = set()
        self._buffer = b""
        self._lock = threading.RLock()
        LIVE_CHILDREN.add(self)

    def _start(self) -> subprocess.Popen:
        """Start the child if none is running."""
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        if self._proc is not None:
            self.restarts += 1
        code = f"import sys; sys.path.insert(0, {PACKAGE_PARENT!r}); from rewards._child import main; main({int(self.memory_mb)})"
        self._proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      env={**os.environ, **CHILD_ENV}, bufsize=0)
        self._buffer = b""
        self._imported = set()
        return self._proc

    def kill(self) -> None:
        """Kill the child now (it is restarted by the next request)."""
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc is not None:
                self.restarts += 1
                for stream in (proc.stdin, proc.stdout):
                    try:
                        stream.close()
                    except OSError:
                        pass

    def _send(self, message) -> None:
        """Write one request frame."""
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self._proc.stdin.write(HEADER.pack(len(payload)) + payload)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as error:
            self.kill()
            raise ChildDied(f"{self.label} process is gone ({error})") from error

    def _read_exactly(self, size: int, deadline: float) -> bytes:
        """Read size bytes from the child before the deadline, or kill it and raise."""
        fd = self._proc.stdout.fileno()
        while len(self._buffer) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise ChildTimeout(f"{self.label} took too long")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, max(65536, size - len(self._buffer)))
            if not chunk:
                code = self._proc.poll()
                self.kill()
                raise ChildDied(f"{self.label} process exited (code {code})")
            self._buffer += chunk
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def _receive(self, deadline: float):
        """Read one reply frame before the deadline."""
        (size,) = HEADER.unpack(self._read_exactly(HEADER.size, deadline))
        return pickle.loads(self._read_exactly(size, deadline))

    def request(self, message, timeout_s: float):
        """Send one request and return its reply; ChildTimeout / ChildDied on failure (child killed)."""
        with self._lock:
            self._start()
            self._send(message)
            try:
                return self._receive(time.monotonic() + timeout_s)
            except ChildTimeout:
                raise ChildTimeout(f"{self.label} took longer than {timeout_s:g}s (process killed)") from None

    def warm(self, module: str, timeout_s: float = 60.0) -> None:
        """Start the child and import a module there once (so imports don't count against item timeouts)."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None and module in self._imported:
                return
            self.request(("import", module), timeout_s)
            self._imported.add(module)

    def map(self, module: str, function: str, items: list, item_timeout_s: float) -> list[tuple[str, object]]:
        """Apply module.function to each item in the child: one ("ok"|"error"|"timeout", value) per item.

        Each item has its own deadline; on a timeout the child is killed, that item is marked
        "timeout", and the remaining items go to a fresh child.
        """
        results: list[tuple[str, object]] = []
        with self._lock:
            while len(results) < len(items):
                pending = items[len(results):]
                try:
                    self.warm(module)
                    self._send(("map", module, function, pending))
                    for _ in pending:
                        status, value = self._receive(time.monotonic() + item_timeout_s)
                        results.append((status, value))
                    self._receive(time.monotonic() + item_timeout_s)  # ("done",)
                except ChildTimeout:
                    results.append(("timeout", f"took longer than {item_timeout_s:g}s"))
                except ChildDied as error:
                    results.append(("error", str(error)))
        return results


class ChildPool:
    """A few ChildProcess workers sharing batch jobs (map) by splitting items into chunks."""

    def __init__(self, size: int, module: str, memory_mb: int = 4096, label: str = "worker",
                 warm_call: tuple[str, list] | None = None):
        self.module = module
        self.warm_call = warm_call
        self.children = [ChildProcess(memory_mb, f"{label} {i}") for i in range(max(1, size))]
        self._threads = ThreadPoolExecutor(max_workers=len(self.children), thread_name_prefix="rewards-pool")
        self._lock = threading.Lock()

    def warm(self, timeout_s: float = 60.0) -> None:
        """Start every child, import the pool's module there and run warm_call (function, items), in parallel."""
        if self.warm_call:
            function, items = self.warm_call
            futures = [self._threads.submit(child.map, self.module, function, items, timeout_s) for child in self.children]
        else:
            futures = [self._threads.submit(child.warm, self.module, timeout_s) for child in self.children]
        for future in futures:
            future.result()

    def map(self, function: str, items: list, item_timeout_s: float) -> list[tuple[str, object]]:
        """Like ChildProcess.map, spread over the pool's children; results keep the items' order."""
        if not items:
            return []
        with self._lock:
            count = min(len(self.children), len(items))
            chunks = [items[i::count] for i in range(count)]
            futures = [self._threads.submit(child.map, self.module, function, chunk, item_timeout_s)
                       for child, chunk in zip(self.children, chunks)]
            chunk_results = [f.result() for f in futures]
        results: list = [None] * len(items)
        for offset, chunk_result in enumerate(chunk_results):
            results[offset::count] = chunk_result
        return results


def kill_all_children() -> None:
    """Kill every child started by this process (at interpreter exit)."""
    for child in list(LIVE_CHILDREN):
        child.kill()


atexit.register(kill_all_children)
