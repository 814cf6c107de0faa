"""Scale out: `accelerate launch --num_processes 2` (DDP over gloo, on the CPU) trains the tiny model with
both ranks, and only rank 0 writes the run directory. Plus the shipped accelerate configs and the
one-line refusals of combinations a backend does not support."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import pytest

from local_grpo import cli
from local_grpo.rundir import RunDir

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ACCELERATE_CONFIGS = sorted(glob.glob(os.path.join(REPO, "configs", "accelerate", "*.yaml")))


def accelerate_command():
    found = shutil.which("accelerate", path=os.path.dirname(sys.executable)) or shutil.which("accelerate")
    if not found:
        pytest.skip("accelerate is not installed")
    return found


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_processes_train_and_only_rank_0_writes_the_run_directory(tiny_model_dir, tmp_path):
    # --multi_gpu picks accelerate's torchrun launcher; with no visible GPU, TRL's use_cpu makes it DDP over gloo
    # (accelerate's --cpu flag would start a single process unless MPI is installed).
    command = [accelerate_command(), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
               "-m", "local_grpo.cli", "train", "--model", tiny_model_dir, "--backend", "hf", "--task", "arithmetic",
               "--num-train", "16", "--num-heldout", "4", "--num-generations", "4", "--per-device-train-batch-size", "8",
               "--max-completion-length", "12", "--max-seq-length", "128", "--lora-r", "4", "--lora-alpha", "8",
               "--learning-rate", "0.01", "--max-steps", "2", "--save-steps", "2", "--p-ref-samples", "0",
               "--output", "run", "--json"]
    env = {**os.environ, "PYTHONPATH": REPO, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]

    # both ranks trained to the last step
    for rank in (0, 1):
        assert f"local-grpo: rank {rank} of 2 trained to step 2" in result.stderr, result.stderr[-3000:]
    checkpoint = tmp_path / "run" / "checkpoints" / "checkpoint-2"
    assert (checkpoint / "rng_state_0.pth").exists() and (checkpoint / "rng_state_1.pth").exists()

    # exactly one run directory, written once: rank 0's lines only
    assert sorted(os.listdir(tmp_path)) == ["run"]
    run = RunDir.open(str(tmp_path / "run"))
    assert [m["step"] for m in run.metrics()] == [1, 2]
    completions = run.completions()
    assert len(completions) == 2 * 8  # rank 0's slice: 8 completions per step (rank 1 scores its own 8)
    assert sum("training started" in e["message"] for e in run.events()) == 1
    assert os.path.isfile(os.path.join(run.adapter_dir, "adapter_model.safetensors"))
    assert result.stdout.count('"run_dir"') == 1  # rank 0 alone prints the summary

@pytest.mark.parametrize("path", ACCELERATE_CONFIGS, ids=os.path.basename)
def test_shipped_accelerate_configs_load(path):
    from accelerate.commands.config.config_args import ClusterConfig

    config = ClusterConfig.from_yaml_file(path)
    assert config.distributed_type in ("MULTI_GPU", "DEEPSPEED")
    if config.distributed_type == "DEEPSPEED":
        assert config.deepspeed_config["zero_stage"] in (2, 3)


def test_accelerate_configs_shipped():
    assert {os.path.basename(p) for p in ACCELERATE_CONFIGS} == {"ddp.yaml", "zero2.yaml", "zero3.yaml"}


@pytest.mark.parametrize("args, env, expected", [
    (["--backend", "unsloth"], {"WORLD_SIZE": "2", "RANK": "0"}, "backend: unsloth trains in one process"),
    (["--backend", "unsloth", "--use-vllm", "--vllm-mode", "server"], {}, "grpo.vllm_mode: server mode"),
    (["--backend", "hf", "--eval-steps", "2"], {"WORLD_SIZE": "2", "RANK": "0"}, "grpo.eval_steps: works in single-process"),
])
def test_unsupported_backend_combinations_are_one_line(args, env, expected, tiny_model_dir, tmp_path, capsys,
                                                       monkeypatch):
    import rewards  # noqa: F401  (imported before the env changes: nothing here may start a process group)

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    code = cli.main(["train", "--model", tiny_model_dir, "--output", "run", "--num-heldout", "4", *args])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "run").exists()
