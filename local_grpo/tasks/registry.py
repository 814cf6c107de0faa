"""Which task a config means: a built-in name, or a user's task file `path/to/file.py:NAME`; and its defaults.

The built-ins are the modules of local_grpo/tasks/builtin (each defines `task`). A task file is a Python
file the user names; it is imported in this process (it is the user's own code, like a config) and must
hold a `Task` under NAME (`task` when only the path is given). The rewards it names run sandboxed like
any reward (rewards/userfile.py). Every bad name or file is one UserError line naming the known tasks.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import pkgutil
import sys
import time
import traceback

from ..config import Config
from ..errors import UserError
from . import builtin
from .task import Task

DATASET = "dataset"  # the task of data.dataset; not chosen by name
DEFAULT_TASK = "arithmetic"
FILE_FORM = "path/to/file.py:NAME"
DEFAULT_OBJECT = "task"
_FILE_CACHE: dict[str, tuple[int, object]] = {}


@functools.lru_cache(maxsize=1)
def builtin_tasks() -> dict[str, Task]:
    """Every built-in task by name (one module of local_grpo/tasks/builtin each)."""
    tasks = {}
    for info in sorted(pkgutil.iter_modules(builtin.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{builtin.__name__}.{info.name}")
        task = getattr(module, "task", None)
        if isinstance(task, Task):
            tasks[task.name] = task
    return tasks


def builtin_names() -> list[str]:
    """The built-in tasks a config or `--task` can name (the dataset task is chosen by data.dataset)."""
    return [name for name in builtin_tasks() if name != DATASET]


def known_tasks() -> str:
    """The one line every task error ends with."""
    return f"a task is one of {', '.join(builtin_names())}, or a file {FILE_FORM} holding a local_grpo.tasks.Task"


def is_task_file(ref: str | None) -> bool:
    """True for `something.py` and `something.py:NAME`."""
    return isinstance(ref, str) and (ref.endswith(".py") or ".py:" in ref)


def split_task_file(ref: str) -> tuple[str, str]:
    """`path.py:NAME` → (path, NAME); `path.py` → (path, "task")."""
    if ref.endswith(".py"):
        return ref, DEFAULT_OBJECT
    path, name = ref.rsplit(":", 1)
    return path, name


def get_task(ref: str, field: str = "data.task") -> Task:
    """The Task a name or file reference means; UserError (one line, `field` first) otherwise."""
    if not isinstance(ref, str) or not ref.strip():
        raise UserError(f"{field}: must name a task ({known_tasks()})")
    ref = ref.strip()
    if is_task_file(ref):
        return load_task_file(ref, field)
    tasks = builtin_tasks()
    if ref not in tasks or ref == DATASET:
        raise UserError(f"{field}: unknown task {ref!r}; {known_tasks()}")
    return tasks[ref]


def task_for(config: Config) -> Task:
    """The config's task: the dataset task when data.dataset is set, else data.task (default arithmetic)."""
    if config.data.dataset:
        return builtin_tasks()[DATASET]
    return get_task(config.data.task or DEFAULT_TASK)


def fill_defaults(config: Config) -> Config:
    """Resolve the 'task default' fields from the task: rewards, success reward, output dir (in place)."""
    task = task_for(config)
    if not config.rewards:
        config.rewards = task.rubric.specs()
    if not config.success_reward:
        config.success_reward = task.rubric.success_reward()
    if not config.output_dir:
        config.output_dir = os.path.join("runs", f"{task.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    return config


def load_task_file(ref: str, field: str = "data.task") -> Task:
    """The Task object NAME of `path/to/file.py:NAME`, the file imported once per version (mtime)."""
    path, name = split_task_file(ref)
    if not os.path.isfile(path):
        raise UserError(f"{field}: task file not found: {path}; {known_tasks()}")
    module = _import_file(path, field)
    task = getattr(module, name, None)
    if task is None:
        found = [key for key, value in vars(module).items() if isinstance(value, Task)]
        raise UserError(f"{field}: {path} defines no {name!r} (Task objects in it: {', '.join(found) or 'none'}); "
                        f"{known_tasks()}")
    if not isinstance(task, Task):
        raise UserError(f"{field}: {path}:{name} is a {type(task).__name__}, not a local_grpo.tasks.Task; {known_tasks()}")
    return task


def _import_file(path: str, field: str):
    """Execute a task file as a module (again only when its mtime changed); UserError with file:line when it raises."""
    path = os.path.abspath(path)
    mtime = os.stat(path).st_mtime_ns
    cached = _FILE_CACHE.get(path)
    if cached and cached[0] == mtime:
        return cached[1]
    module_name = "local_grpo_task_file_" + str(abs(hash(path)))
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    directory = os.path.dirname(path)
    if directory not in sys.path:
        sys.path.insert(0, directory)  # the file may import its neighbours
    sys.modules[module_name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except UserError as error:
        raise UserError(f"{field}: {path}: {error}") from None
    except BaseException as error:  # the user's code may raise anything, SystemExit included
        sys.modules.pop(module_name, None)
        frames = [f for f in traceback.extract_tb(error.__traceback__) if os.path.abspath(f.filename) == path]
        where = f"{path}:{frames[-1].lineno}" if frames else path
        detail = " ".join(str(error).split())[:200]
        raise UserError(f"{field}: {where}: {type(error).__name__}{': ' + detail if detail else ''}") from None
    _FILE_CACHE[path] = (mtime, module)
    return module
