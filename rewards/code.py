"""code_tests: run the completion's Python against the `tests` column in a sandboxed child process.

Each completion runs in its own `python -I -S` subprocess in a temporary directory with limits on
time, address space, file size and processes, sockets disabled, and its output discarded. The
score is the fraction of tests that pass. Importing a forbidden module gives forbidden_score and a
`forbidden_import` fault event. The model's code never runs in this process.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from rewards.correctness import column
from rewards.extract import completion_texts
from rewards.safe import note_fault

FORBIDDEN_MODULES = ("os", "sys", "subprocess", "socket", "shutil", "ctypes", "multiprocessing", "threading",
                     "signal", "resource", "importlib", "builtins", "pathlib", "requests", "urllib", "http")
CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)

RUNNER = r'''
import json, resource, socket, sys
limit = {memory} * 1024 * 1024
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
def _no_network(*args, **kwargs):
    raise OSError("network disabled in the reward sandbox")
socket.socket = _no_network
socket.create_connection = _no_network
job = json.load(open(sys.argv[1]))
results = []
namespace = {{"__name__": "solution"}}
try:
    exec(compile(job["code"], "solution.py", "exec"), namespace)
    loaded = True
except BaseException:
    loaded = False
for test in job["tests"]:
    ok = False
    if loaded:
        try:
            exec(compile(test, "test.py", "exec"), dict(namespace))
            ok = True
        except BaseException:
            ok = False
    results.append(ok)
    with open(sys.argv[2], "w") as out:
        json.dump(results, out)
'''


def extract_code(text: str) -> str | None:
    """The last ```python fenced block of the completion (or the whole text if it parses as Python and has a def)."""
    blocks = CODE_BLOCK.findall(text)
    if blocks:
        return blocks[-1]
    if "def " in text:
        try:
            ast.parse(text)
            return text
        except (SyntaxError, ValueError):
            return None
    return None


def imported_modules(code: str) -> set[str]:
    """Top-level module names the code imports (static), including __import__("x") calls."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value.split(".")[0])
    return names


def test_list(tests) -> list[str]:
    """Tests as a list of code snippets: a list is used as is, a string is split into its assert lines."""
    if isinstance(tests, str):
        lines = [line for line in tests.splitlines() if line.strip()]
        return lines if all(line.lstrip().startswith("assert") for line in lines) else [tests]
    return [str(t) for t in tests]


def run_tests(code: str, tests: list[str], timeout_s: float, memory_mb: int) -> float:
    """Fraction of tests passing for the code, run in a fresh sandboxed interpreter (0.0 on timeout)."""
    if not tests:
        return 0.0
    with tempfile.TemporaryDirectory(prefix="reward-code-") as folder:
        job, result, runner = (os.path.join(folder, n) for n in ("job.json", "result.json", "runner.py"))
        with open(job, "w") as handle:
            json.dump({"code": code, "tests": tests}, handle)
        with open(runner, "w") as handle:
            handle.write(RUNNER.format(memory=int(memory_mb)))
        try:
            subprocess.run([sys.executable, "-I", "-S", runner, job, result], cwd=folder, timeout=timeout_s,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"})
        except subprocess.TimeoutExpired:
            pass
        try:
            with open(result) as handle:
                passed = json.load(handle)
        except (OSError, ValueError):
            return 0.0
    return sum(1 for ok in passed if ok is True) / len(tests)


def code_tests(timeout_s: float = 5.0, memory_mb: int = 512, forbidden=FORBIDDEN_MODULES,
               forbidden_score: float = -1.0, workers: int = 2):
    """Fraction of the `tests` column's asserts the completion's Python passes, sandboxed. Range [min(forbidden_score, 0), 1]."""
    forbidden_set = set(forbidden.split(",") if isinstance(forbidden, str) else forbidden)
    if float(timeout_s) <= 0 or int(memory_mb) < 64:
        raise ValueError("need timeout_s > 0 and memory_mb >= 64")

    def job(text: str, tests) -> tuple[str, list[str]] | float:
        """(code, tests) to run, or the final score when nothing needs running (checked in the caller's thread)."""
        code = extract_code(text)
        if code is None:
            return 0.0
        bad = sorted(imported_modules(code) & forbidden_set)
        if bad:
            note_fault("forbidden_import", f"completion imports {', '.join(bad)}", 1)
            return float(forbidden_score)
        return code, test_list(tests)

    def run(item) -> float:
        return item if isinstance(item, float) else run_tests(item[0], item[1], float(timeout_s), int(memory_mb))

    def code_tests_reward(completions, **kwargs):
        tests = column(kwargs, "tests", len(completions))
        jobs = [job(text, t) for text, t in zip(completion_texts(completions), tests)]
        with ThreadPoolExecutor(max_workers=max(1, int(workers))) as threads:
            return list(threads.map(run, jobs))

    return code_tests_reward
