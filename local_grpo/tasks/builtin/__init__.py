"""The built-in tasks, one module each; a module's `task` object is the whole task.

Adding a built-in task is adding one module here that defines `task = Task(...)` (local_grpo/tasks/registry.py
finds it); a user task file looks the same (docs/tasks.md).
"""
