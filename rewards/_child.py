"""The child-process side of rewards.worker: runs user reward files, a task's tools and batch jobs under limits.

Started by rewards.worker.ChildProcess as `python -c ... main(memory_mb)`. Reads length-prefixed
pickled requests on stdin, answers on a private copy of stdout; whatever the user code prints goes
to stderr. Exits when stdin closes or when the parent process disappears. Never imported by the
parent for anything but its frame helpers.
"""

from __future__ import annotations

import importlib
import importlib.util
import numbers
import os
import pickle
import struct
import sys
import threading
import time

HEADER = struct.Struct("!Q")


def write_frame(stream, message) -> None:
    """Write one pickled message with its length header."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(payload)) + payload)
    stream.flush()


def read_frame(stream):
    """Read one message, or None at end of input."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    payload = stream.read(size)
    if len(payload) < size:
        return None
    return pickle.loads(payload)


def apply_limits(memory_mb: int) -> None:
    """Cap this process's address space (RLIMIT_AS) and file writes (RLIMIT_FSIZE)."""
    import resource

    if memory_mb > 0:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024 * 1024, 64 * 1024 * 1024))


def exit_when_orphaned(parent_pid: int) -> None:
    """Background thread: leave at once if the parent process is gone (even while user code loops)."""

    def watch():
        while True:
            if os.getppid() != parent_pid:
                os._exit(0)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()


def one_line(error: BaseException) -> str:
    """A short one-line description of an exception."""
    text = f"{type(error).__name__}: {error}".replace("\n", " ").strip()
    return text[:300]


FILE_CACHE: dict[str, tuple[float, dict]] = {}


def load_file_namespace(path: str) -> dict:
    """Execute a user reward file (again only when its mtime changed) and return its globals."""
    mtime = os.stat(path).st_mtime_ns
    cached = FILE_CACHE.get(path)
    if cached and cached[0] == mtime:
        return cached[1]
    module_name = "user_reward_" + str(abs(hash(path)))
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.insert(0, directory)
    spec.loader.exec_module(module)
    FILE_CACHE[path] = (mtime, vars(module))
    return vars(module)


def plain_scores(result):
    """The reward's return value made picklable: a list of float/None/"<type>" markers, or a "<type>" marker."""
    if hasattr(result, "tolist") and not isinstance(result, (str, bytes)):
        result = result.tolist()
    if not isinstance(result, (list, tuple)):
        return f"<{type(result).__name__}>"
    return [plain_value(v) for v in result]


def plain_value(value):
    """One score made picklable: None, a float, or a "<type>" marker for anything non-numeric."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        return f"<{type(value).__name__}>"
    if isinstance(value, numbers.Real) or hasattr(value, "__float__"):
        try:
            return float(value)
        except Exception:
            pass
    return f"<{type(value).__name__}>"


def handle_call_file(message):
    """("call_file", path, function, completions, kwargs) → ("ok", scores) | ("error", text)."""
    _, path, function_name, completions, kwargs = message
    from rewards import sandbox  # a Python-level file guard, not a security boundary (see its docstring)

    sandbox.install(extra_read=[os.path.dirname(os.path.abspath(path))])
    namespace = load_file_namespace(path)
    function = namespace.get(function_name)
    if not callable(function):
        return ("error", f"{path}: no function {function_name!r}")
    return ("ok", plain_scores(function(completions, **kwargs)))


def handle_call_tool(message):
    """("call_tool", (kind, where, folder), function, arguments) → ("ok", text) | ("error", text).

    A tool the model called: `where` is a module importable from `folder` (kind "module") or a user's
    file (kind "file"); the function runs under the file guard, which may read `folder`, with the model's
    arguments as keyword arguments (a coroutine is run to its end); its return value comes back as text.
    """
    import asyncio
    import inspect

    _, (kind, where, folder), function_name, arguments = message
    from rewards import sandbox

    sandbox.install(extra_read=[folder])
    if kind == "file":
        namespace = load_file_namespace(where)
    else:
        if folder not in sys.path:
            sys.path.insert(0, folder)
        namespace = vars(importlib.import_module(where))
    function = namespace.get(function_name)
    if not callable(function):
        return ("error", f"{where}: no function {function_name!r}")
    result = function(**arguments)
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    return ("ok", result if isinstance(result, str) else str(result))


def handle_map(message, out) -> None:
    """("map", module, function, items): answer ("ok"|"error", value) per item, then ("done",)."""
    _, module_name, function_name, items = message
    function = getattr(importlib.import_module(module_name), function_name)
    for item in items:
        try:
            write_frame(out, ("ok", function(item)))
        except Exception as error:
            write_frame(out, ("error", one_line(error)))
    write_frame(out, ("done",))


def main(memory_mb: int = 0) -> None:
    """Serve requests until stdin closes."""
    requests = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    exit_when_orphaned(os.getppid())
    apply_limits(int(memory_mb))
    while True:
        message = read_frame(requests)
        if message is None:
            return
        kind = message[0]
        try:
            if kind == "map":
                handle_map(message, out)
                continue
            if kind == "import":
                importlib.import_module(message[1])
                reply = ("ok", None)
            elif kind == "call_file":
                reply = handle_call_file(message)
            elif kind == "call_tool":
                reply = handle_call_tool(message)
            else:
                reply = ("error", f"unknown request {kind!r}")
        except BaseException as error:  # the user's code may raise anything, even SystemExit
            reply = ("error", one_line(error))
        try:
            write_frame(out, reply)
        except Exception as error:
            write_frame(out, ("error", one_line(error)))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
