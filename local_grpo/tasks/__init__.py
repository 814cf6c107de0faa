"""Tasks: each task is one `Task` object (data, prompt, answer parser, rubric, verifier, tools).

    from local_grpo import tasks
    task = tasks.task_for(config)          # the config's task: a built-in or `path/to/file.py:NAME`
    tasks.fill_defaults(config)            # rewards, success reward and output dir from the task
    reward_set = tasks.build_reward_set(config)   # the rewards, under unique keys, with the success rule

The built-in tasks are local_grpo/tasks/builtin/*.py, one module each; docs/tasks.md shows how to write
one in a file of your own (examples/custom_task.py). No torch or transformers here.
"""

from ..config import RewardSpec
from .registry import (DATASET, FILE_FORM, builtin_names, builtin_tasks, fill_defaults, get_task, is_task_file,
                       known_tasks, task_for)
from .reward_set import RewardSet, build_reward_set
from .task import Rubric, Source, Task, Verifier

__all__ = ["DATASET", "FILE_FORM", "RewardSet", "RewardSpec", "Rubric", "Source", "Task", "Verifier",
           "build_reward_set", "builtin_names", "builtin_tasks", "fill_defaults", "get_task", "is_task_file",
           "known_tasks", "task_for"]
