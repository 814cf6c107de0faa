"""Bad input, table-driven: each case is one `local-grpo` command line that must fail cleanly.

Every case gives exactly one line on stderr that names the field, flag or file, exit code 2, no
traceback, and writes nothing anywhere in the workspace (an existing run directory and an existing
export folder included: the whole workspace is snapshotted before and after). Cases run in-process
(`local_grpo.cli.main`) for speed; a few run as real subprocesses to prove no traceback reaches stderr.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
import yaml

from local_grpo import cli
from local_grpo.config import Config, to_dict

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NEW_RUN = "new-run"  # every train case points --output here; it must never appear


def _write(path, content, mode="w"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as fh:
        fh.write(content)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tiny_model_dir):
    """Inputs for every case: broken configs, datasets and reward files, a finished run, an export."""
    ws = str(tmp_path_factory.mktemp("bad-input"))
    j = lambda *parts: os.path.join(ws, *parts)  # noqa: E731
    # configs
    _write(j("cfg", "invalid.yaml"), "grpo: [num_generations: 4\n")
    _write(j("cfg", "unknown_key.yaml"), "grpoo:\n  num_generations: 4\n")
    _write(j("cfg", "wrong_type.yaml"), "grpo:\n  num_generations: four\n")
    _write(j("cfg", "old_schema.yaml"), "schema_version: 0\nmodel:\n  name: embedded\n")
    _write(j("cfg", "list.yaml"), "- a\n- b\n")
    _write(j("cfg", "latin1.yaml"), "model:\n  name: caf\xe9\n".encode("latin-1"), mode="wb")
    _write(j("cfg", "unknown_section_key.yaml"), "lora:\n  rank: 8\n")
    # datasets
    good = [{"question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(10)]
    _write(j("data", "no_answer.jsonl"), "".join(json.dumps({"question": r["question"]}) + "\n" for r in good))
    _write(j("data", "empty.jsonl"), "")
    _write(j("data", "wrong_types.jsonl"), "".join(json.dumps({"question": r["question"], "answer": [1, 2]}) + "\n" for r in good))
    _write(j("data", "latin1.jsonl"), ('{"question": "caf\xe9?", "answer": "1"}\n').encode("latin-1"), mode="wb")
    _write(j("data", "huge_line.jsonl"), json.dumps({"question": "x" * 1_100_000, "answer": "1"}) + "\n")
    _write(j("data", "bad_json.jsonl"), json.dumps(good[0]) + "\n{not json\n" + json.dumps(good[1]) + "\n")
    _write(j("data", "notes.txt"), "question,answer\n")
    _write(j("data", "numbers.jsonl"), "[1, 2, 3]\n")
    _write(j("data", "too_few.jsonl"), json.dumps(good[0]) + "\n")
    os.makedirs(j("data", "a_folder.jsonl"))
    # reward files
    _write(j("rewards", "broken.py"), "def score(completions, **kwargs)\n    return [1.0] * len(completions)\n")
    _write(j("rewards", "ok.py"), "def score(completions, **kwargs):\n    return [1.0] * len(completions)\n")
    # a finished run (config + adapter) and an existing export folder
    config = Config()
    config.model.name = tiny_model_dir
    _write(j("run", "config.yaml"), yaml.safe_dump(to_dict(config), sort_keys=False))
    _write(j("run", "metrics.jsonl"), json.dumps({"step": 1, "reward": 0.5}) + "\n")
    _write(j("run", "adapter", "adapter_config.json"), "{}")
    old = to_dict(config)
    old["schema_version"] = 0
    _write(j("old_run", "config.yaml"), yaml.safe_dump(old, sort_keys=False))
    _write(j("export", "adapter_model.safetensors"), "precious")
    _write(j("a_file"), "not a folder")
    return ws


def train(*args):
    return ["train", "--output", NEW_RUN, *args]


def tiny(*args):
    return ["--model", "{tiny}", *args]


# (case id, argv with {ws}/{tiny} placeholders, text the one stderr line must contain)
CASES = [
    # config files
    ("config-missing", train("--config", "cfg/missing.yaml"), "--config: file not found"),
    ("config-invalid-yaml", train("--config", "cfg/invalid.yaml"), "invalid YAML"),
    ("config-unknown-key", train("--config", "cfg/unknown_key.yaml"), "unknown key 'grpoo'"),
    ("config-unknown-section-key", train("--config", "cfg/unknown_section_key.yaml"), "lora.rank"),
    ("config-wrong-type", train("--config", "cfg/wrong_type.yaml"), "grpo.num_generations"),
    ("config-old-schema", train("--config", "cfg/old_schema.yaml"), "schema_version 0"),
    ("config-not-a-mapping", train("--config", "cfg/list.yaml"), "expected a mapping"),
    ("config-not-utf8", train("--config", "cfg/latin1.yaml"), "not a UTF-8"),
    # CLI flags
    ("flag-num-generations", train("--num-generations", "1"), "grpo.num_generations"),
    ("flag-loss-type", train("--loss-type", "grpoo"), "grpo.loss_type"),
    ("flag-not-an-int", train("--max-steps", "ten"), "--max-steps"),
    ("flag-learning-rate", train("--learning-rate", "5"), "grpo.learning_rate"),
    ("flag-preset", train("--preset", "3gb"), "preset"),
    ("flag-batch-not-multiple", train("--per-device-train-batch-size", "6", "--num-generations", "4"),
     "grpo.per_device_train_batch_size"),
    ("flag-temperature", train("--temperature", "0"), "grpo.temperature"),
    ("flag-backend-choice", train("--backend", "torch"), "--backend"),
    ("flag-unknown", train("--num-generationz", "4"), "--num-generationz"),
    ("flag-vllm-port", train("--vllm-server-port", "70000"), "grpo.vllm_server_port"),
    ("flag-completion-too-long", train("--max-completion-length", "600", "--max-seq-length", "512"),
     "grpo.max_completion_length"),
    ("flag-resume-needs-output", ["train", "--resume"], "--resume"),
    # model paths
    ("model-missing-folder", train("--model", "./no/such/folder"), "model: no such folder"),
    ("model-folder-without-config", train("--model", "data"), "no config.json"),
    ("model-gguf-missing", train("--model", "nothing.gguf"), "GGUF file not found"),
    ("model-bad-name", train("--model", "just-a-word"), "model:"),
    # datasets
    ("dataset-missing", train(*tiny("--dataset", "data/missing.jsonl")), "file not found"),
    ("dataset-missing-column", train(*tiny("--dataset", "data/no_answer.jsonl")), "data.answer_column"),
    ("dataset-empty", train(*tiny("--dataset", "data/empty.jsonl")), "is empty"),
    ("dataset-wrong-types", train(*tiny("--dataset", "data/wrong_types.jsonl")), "column 'answer'"),
    ("dataset-not-utf8", train(*tiny("--dataset", "data/latin1.jsonl")), "not UTF-8"),
    ("dataset-huge-line", train(*tiny("--dataset", "data/huge_line.jsonl")), "longer than"),
    ("dataset-invalid-json", train(*tiny("--dataset", "data/bad_json.jsonl")), "line 2: invalid JSON"),
    ("dataset-not-objects", train(*tiny("--dataset", "data/numbers.jsonl")), "expected a JSON object"),
    ("dataset-unsupported-type", train(*tiny("--dataset", "data/notes.txt")), "unsupported file type"),
    ("dataset-is-a-folder", train(*tiny("--dataset", "data/a_folder.jsonl")), "is a directory"),
    ("dataset-too-few-rows", train(*tiny("--dataset", "data/too_few.jsonl")), "num_heldout"),
    ("column-name-wrong", train(*tiny("--dataset", "data/too_few.jsonl", "--prompt-column", "q")), "data.prompt_column"),
    # reward specs
    ("reward-unknown", train(*tiny("--rewards", "nope")), "rewards[0]"),
    ("reward-file-missing", train(*tiny("--rewards", "rewards/none.py:score")), "file not found"),
    ("reward-function-missing", train(*tiny("--rewards", "rewards/ok.py:nothing")), "no function 'nothing'"),
    ("reward-syntax-error", train(*tiny("--rewards", "rewards/broken.py:score")), "broken.py:1"),
    ("reward-weight-inf", train(*tiny("--rewards", "correct_numeric:inf")), "finite"),
    ("reward-empty-entry", train(*tiny("--rewards", "correct_numeric,,format_soft")), "--rewards"),
    # run directories
    ("output-existing-run", ["train", *tiny("--output", "run")], "already exists"),
    ("output-under-a-file", ["train", *tiny("--output", "a_file/run")], "--output: cannot write"),
    ("output-in-proc", ["train", *tiny("--output", "/proc/1/local-grpo-run")], "--output: cannot write"),
    ("resume-not-a-run", ["train", "--resume", *tiny("--output", "data")], "no config.yaml"),
    ("resume-old-schema", ["train", "--resume", *tiny("--output", "old_run")], "schema_version 0"),
    # export targets
    ("export-out-exists", ["export", "run", "--format", "lora", "--out", "export"], "--out"),
    ("export-not-a-run", ["export", "data", "--format", "lora", "--out", "new-export"], "no config.yaml"),
    ("export-format", ["export", "run", "--format", "zip", "--out", "new-export"], "--format"),
    ("export-into-run", ["export", "run", "--format", "lora", "--out", "run/adapter"], "--out"),
    # eval / predict / plan / rewards / app flags
    ("eval-run-missing", ["eval", "--run", "no-such-run"], "no-such-run"),
    ("eval-k", ["eval", "--run", "run", "--k", "0"], "--k"),
    ("predict-p-ref", ["predict", "--p-ref", "1.5", "--beta", "0.1"], "--p-ref"),
    ("predict-from-run-missing", ["predict", "--from-run", "no-such-run"], "--from-run"),
    ("plan-num-generations", ["plan", "--num-generations", "0"], "num_generations"),
    ("plan-vram", ["plan", "--vram", "-3"], "--vram"),
    ("rewards-score-missing-file", ["rewards", "score", "--rewards", "correct_numeric", "--completions", "none.jsonl"],
     "--completions"),
    ("app-port", ["app", "--port", "70000", "--runs", "runs-folder"], "--port"),
]


def snapshot(root: str) -> dict:
    """path -> (size, mtime_ns, sha1) of every file and folder under root."""
    state = {}
    for current, dirs, files in os.walk(root):
        for name in dirs:
            state[os.path.relpath(os.path.join(current, name), root)] = "dir"
        for name in files:
            path = os.path.join(current, name)
            st = os.stat(path)
            with open(path, "rb") as fh:
                digest = hashlib.sha1(fh.read()).hexdigest()
            state[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns, digest)
    return state


def argv_for(args, workspace, tiny_model_dir):
    return [a.replace("{tiny}", tiny_model_dir) for a in args]


def assert_one_clean_line(stderr: str, expected: str):
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one stderr line, got:\n{stderr}"
    assert "Traceback" not in stderr
    assert expected in lines[0], f"{expected!r} not in {lines[0]!r}"


@pytest.mark.parametrize("case, args, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_with_one_line_and_writes_nothing(case, args, expected, workspace, tiny_model_dir,
                                                          capsys, monkeypatch):
    monkeypatch.chdir(workspace)
    import local_grpo.backends

    def no_model_loading(*args, **kwargs):
        raise AssertionError("bad input reached model loading")

    monkeypatch.setattr(local_grpo.backends, "load", no_model_loading)
    monkeypatch.setattr(local_grpo.backends, "load_for_inference", no_model_loading)
    before = snapshot(workspace)
    try:
        code = cli.main(argv_for(args, workspace, tiny_model_dir))
    except SystemExit as exc:  # argparse errors
        code = exc.code
    captured = capsys.readouterr()
    assert code == 2, f"exit code {code}; stderr: {captured.err}"
    assert_one_clean_line(captured.err, expected)
    assert snapshot(workspace) == before, "the command wrote into the workspace"


def test_there_are_at_least_25_cases():
    assert len(CASES) >= 25
    kinds = {case.split("-")[0] for case, _, _ in CASES}
    assert kinds >= {"config", "flag", "model", "dataset", "reward", "output", "export", "eval", "predict", "plan"}


SUBPROCESS_CASES = ["config-invalid-yaml", "dataset-not-utf8", "export-out-exists", "reward-syntax-error"]


def test_no_traceback_reaches_stderr_in_a_real_process(workspace, tiny_model_dir):
    """The same cases through `python -m local_grpo.cli` (one process per case)."""
    env = {**os.environ, "PYTHONPATH": REPO, "HF_HUB_OFFLINE": "1"}
    table = {c[0]: c for c in CASES}
    before = snapshot(workspace)
    for name in SUBPROCESS_CASES:
        _, args, expected = table[name]
        result = subprocess.run([sys.executable, "-m", "local_grpo.cli", *argv_for(args, workspace, tiny_model_dir)],
                                cwd=workspace, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 2, (name, result.stderr)
        assert_one_clean_line(result.stderr, expected)
        assert result.stdout == "", (name, result.stdout)
    assert snapshot(workspace) == before
