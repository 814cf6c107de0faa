"""A Python-level file guard for user reward code, installed in the reward child process.

NOT a security boundary. It is an audit hook (`sys.addaudithook`): it stops the ordinary ways a
reward file reads or writes files and starts programs (open, os.listdir/scandir, os.remove/rename,
subprocess, os.system, os.exec*, fork), so a reward that wanders off (or a copied snippet that
reads ~/.ssh) fails with a clear PermissionError, recorded as a reward fault. Code that uses
ctypes, a C extension, or an already-open file descriptor is not seen by audit hooks and can do
anything the user running local-grpo can. Network access is not restricted (a reward may call a
local judge server). For untrusted code use a container or another user account.

What the child may read: Python's own installation (stdlib, site-packages), the rewards/local_grpo
packages, the folder of each reward file (and below), its private temporary folder, /dev/null and
/dev/urandom, and the folders in LOCAL_GRPO_REWARD_READ_PATHS (os.pathsep-separated).
What it may write: only its private temporary folder (the child's working directory), each file
under the RLIMIT_FSIZE cap set by rewards._child.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
import tempfile
import threading

READ_PATHS_ENV = "LOCAL_GRPO_REWARD_READ_PATHS"
SPAWN_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                "os.forkpty", "pty.spawn")
CHANGE_EVENTS = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "shutil.rmtree", "os.chmod", "os.chown",
                 "os.truncate", "os.symlink", "os.link", "os.utime")
LIST_EVENTS = ("os.listdir", "os.scandir")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

_state = {"installed": False, "read_roots": [], "write_root": None}
_busy = threading.local()


def default_read_roots() -> list[str]:
    """Python's installation, site-packages and our own packages."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(path)
    try:
        roots.update(site.getsitepackages())
    except AttributeError:
        pass
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    roots.update(os.path.join(package_parent, name) for name in ("rewards", "local_grpo"))
    roots.update(p for p in os.environ.get(READ_PATHS_ENV, "").split(os.pathsep) if p)
    return sorted(os.path.realpath(r) for r in roots)


def install(extra_read: list[str] = ()) -> str:
    """Install the guard once (it cannot be removed), chdir into a private temp folder; returns that folder."""
    if _state["installed"]:
        allow_read(*extra_read)
        return _state["write_root"]
    work = os.path.realpath(tempfile.mkdtemp(prefix="local-grpo-reward-"))
    os.chdir(work)
    tempfile.tempdir = work
    _state.update(installed=True, write_root=work, read_roots=default_read_roots() + [work])
    allow_read(*extra_read)
    sys.addaudithook(_hook)
    return work


def allow_read(*paths: str) -> None:
    for path in paths:
        real = os.path.realpath(path)
        if real not in _state["read_roots"]:
            _state["read_roots"].append(real)


def _inside(path: str, roots) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def _real(path) -> str | None:
    if isinstance(path, int) or path is None:
        return None  # an already-open descriptor
    try:
        path = os.fsdecode(os.fspath(path))
    except TypeError:
        return None
    return os.path.realpath(path)


def check_read(path) -> None:
    real = _real(path)
    if real is None or real in ("/dev/null", "/dev/urandom", "/dev/random"):
        return
    if not _inside(real, _state["read_roots"]):
        raise PermissionError(f"reward sandbox: reading {real} is not allowed (allowed: the reward file's folder, "
                              f"Python's packages, the temp folder; add folders with {READ_PATHS_ENV})")


def check_write(path) -> None:
    real = _real(path)
    if real is None or real == "/dev/null":
        return
    if not _inside(real, [_state["write_root"]]):
        raise PermissionError(f"reward sandbox: writing {real} is not allowed (only the temp folder "
                              f"{_state['write_root']}, the working directory)")


def _is_write(mode, flags) -> bool:
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & WRITE_FLAGS)


def _hook(event: str, args: tuple) -> None:
    if getattr(_busy, "on", False):
        return
    _busy.on = True
    try:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            if _is_write(mode, flags):
                check_write(path)
            else:
                check_read(path)
        elif event in LIST_EVENTS:
            check_read(args[0] if args else ".")
        elif event in CHANGE_EVENTS:
            for path in args[:2]:
                if isinstance(path, (str, bytes, os.PathLike)):
                    check_write(path)
        elif event.startswith(SPAWN_EVENTS):
            raise PermissionError(f"reward sandbox: starting programs is not allowed ({event})")
    finally:
        _busy.on = False
