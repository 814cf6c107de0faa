"""User reward files (`path/to/file.py:function`): checked in this process, run in a child process.

The file is only parsed here (ast), never executed: finding functions, syntax errors with file:line,
and the function's source for the app's editor. The code runs in a rewards.worker.ChildProcess with
a time limit per call (killed and restarted on timeout) and an address-space limit. The file's mtime
is checked at each call; an edit is picked up at once, and an edit that breaks the syntax gives None
scores and a `syntax_error` fault until the file is fixed.
"""

from __future__ import annotations

import ast
import os

from rewards.errors import RewardSpecError
from rewards.safe import SafeReward, note_fault, picklable_kwargs
from rewards.worker import ChildProcess

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MEMORY_MB = 2048
SAFETY_PARAMS = {"timeout_s": DEFAULT_TIMEOUT_S, "memory_mb": DEFAULT_MEMORY_MB}


def is_file_spec(spec: str) -> bool:
    """True for `something.py` or `something.py:function` specs."""
    path = spec.rsplit(":", 1)[0] if not spec.endswith(".py") else spec
    return path.endswith(".py")


def split_file_spec(spec: str) -> tuple[str, str | None]:
    """`path.py:function` → (path, function); `path.py` → (path, None)."""
    if spec.endswith(".py"):
        return spec, None
    path, function = spec.rsplit(":", 1)
    return path, function


class FileSyntaxError(Exception):
    """The user file does not parse; the message is `file:line: what`."""


def parse_file(path: str) -> ast.Module:
    """Read and parse a user file; FileSyntaxError with file:line on a syntax error."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        return ast.parse(text, filename=path)
    except SyntaxError as error:
        raise FileSyntaxError(f"{path}:{error.lineno}: {error.msg}") from None
    except ValueError as error:  # e.g. null bytes
        raise FileSyntaxError(f"{path}:1: {error}") from None


def public_functions(tree: ast.Module) -> list[str]:
    """Names of the public top-level functions defined in the file, in order."""
    return [node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_")]


def defined_names(tree: ast.Module) -> set[str]:
    """Every top-level name the file defines (functions, classes, assignments)."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def function_source(path: str, function: str) -> str:
    """Source of one top-level function of the file, or the whole file when it cannot be isolated."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return ""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
            return ast.get_source_segment(text, node) or text
    return text


def checked_tree(spec: str, path: str) -> ast.Module:
    """The parsed file, or RewardSpecError naming the spec (missing file, syntax error with file:line)."""
    if not os.path.isfile(path):
        raise RewardSpecError(f"reward {spec!r}: file not found: {path}")
    try:
        return parse_file(path)
    except FileSyntaxError as error:
        raise RewardSpecError(f"reward {spec!r}: syntax error at {error}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RewardSpecError(f"reward {spec!r}: cannot read {path}: {error}") from None


def load_file_reward(spec: str, path: str, function: str, params: dict) -> SafeReward:
    """A SafeReward running `function` from the user file in a child process."""
    unknown = sorted(set(params) - set(SAFETY_PARAMS))
    if unknown:
        raise RewardSpecError(f"reward {spec!r}: unknown parameter {unknown[0]!r} "
                              f"(user-file rewards accept: {', '.join(SAFETY_PARAMS)})")
    tree = checked_tree(spec, path)
    if function not in defined_names(tree):
        found = ", ".join(public_functions(tree)) or "none"
        raise RewardSpecError(f"reward {spec!r}: no function {function!r} in {path} (public functions: {found})")
    settings = {**SAFETY_PARAMS, **params}
    runner = UserFileRunner(os.path.abspath(path), function, float(settings["timeout_s"]), int(settings["memory_mb"]))
    return SafeReward(function, runner, source=runner.source, params=settings)


def load_file_rewards(spec: str, path: str, params: dict) -> list[SafeReward]:
    """One SafeReward per public top-level function of the file."""
    tree = checked_tree(spec, path)
    names = public_functions(tree)
    if not names:
        raise RewardSpecError(f"reward {spec!r}: {path} defines no public function")
    return [load_file_reward(f"{path}:{name}", path, name, params) for name in names]


class UserFileRunner:
    """Calls one function of a user file in its own child process; re-checks the file when its mtime changes."""

    def __init__(self, path: str, function: str, timeout_s: float, memory_mb: int):
        self.path = path
        self.function = function
        self.timeout_s = timeout_s
        self.child = ChildProcess(memory_mb, f"reward {function}")
        self._mtime = None
        self._syntax_error: str | None = None
        self._events: list[dict] = []

    def source(self) -> str:
        """The function's current source text."""
        return function_source(self.path, self.function)

    def _check_file(self) -> None:
        """Re-parse the file when its mtime changed; remember a syntax error until it is fixed."""
        mtime = os.stat(self.path).st_mtime_ns
        if mtime == self._mtime:
            return
        reloaded = self._mtime is not None
        self._mtime = mtime
        try:
            parse_file(self.path)
            self._syntax_error = None
        except FileSyntaxError as error:
            self._syntax_error = str(error)
        if reloaded:  # an edit while running: say so in events.jsonl (SafeReward.drain_events collects it)
            state = f"syntax error at {self._syntax_error}" if self._syntax_error else "reloaded"
            self._events.append({"type": "info", "kind": "reward_reloaded", "reward": self.function,
                                 "message": f"reward file {self.path} changed: {state}"})

    def drain_events(self) -> list[dict]:
        """Events since the last call (a `reward_reloaded` info event per detected edit of the file)."""
        events, self._events = self._events, []
        return events

    def __call__(self, completions, **kwargs) -> list:
        """Run the function in the child (time-limited); faults are noted, never raised past SafeReward."""
        count = len(completions)
        try:
            self._check_file()
        except OSError as error:
            note_fault("exception", f"cannot read {self.path}: {error}", count)
            return [None] * count
        if self._syntax_error:
            note_fault("syntax_error", self._syntax_error, count)
            return [None] * count
        message = ("call_file", self.path, self.function, list(completions), picklable_kwargs(kwargs))
        status, value = self.child.request(message, self.timeout_s)
        if status == "error":
            raise UserRewardError(value)
        return value


class UserRewardError(Exception):
    """The user's reward raised in the child; the message is the child's one-line description."""

    from_child = True

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
