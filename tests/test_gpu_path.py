"""The GPU path's decisions, pinned on the CPU: where models are placed, which backend and dtype are
chosen, what is refused up front, that LoRA stays fp32 on a 4-bit base, and that --json stdout stays
one object. What only a GPU can show is measured by bench/gpu_plan_check.py."""

from __future__ import annotations

import json
import os
import shutil
import textwrap

import pytest
import torch
from safetensors.torch import load_file

from local_grpo import backends, export, plan
from local_grpo.cli import main
from local_grpo.config import Config
from local_grpo.errors import UserError
from local_grpo.output import stdout_to_stderr
from local_grpo.train import p_ref


def gpu_config(**grpo) -> Config:
    config = Config()
    config.model.name = "Qwen/Qwen2.5-0.5B-Instruct"
    for key, value in grpo.items():
        setattr(config.grpo, key, value)
    return config


@pytest.fixture
def cuda_visible(monkeypatch):
    """This process believes a CUDA GPU is present (nothing may actually touch it)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    return monkeypatch


# --- placement (issue 16 items 1, 8, 9) ---------------------------------------------------------

def test_device_map_puts_the_model_on_this_ranks_gpu(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", raising=False)
    assert backends.device_map(on_cuda=False) is None
    assert backends.device_map(on_cuda=True) == {"": 0}
    monkeypatch.setenv("LOCAL_RANK", "3")  # rank 3 of a DDP launch loads onto its own GPU
    assert backends.device_map(on_cuda=True) == {"": 3}
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")  # ZeRO-3 refuses a device_map
    assert backends.device_map(on_cuda=True) is None


@pytest.mark.parametrize("four_bit", [True, False])
def test_hf_backend_places_both_4bit_and_16bit_models_at_load(monkeypatch, four_bit):
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    config = gpu_config()
    config.model.load_in_4bit = four_bit
    kwargs = backends.hf_load_kwargs(config, on_cuda=True)
    assert kwargs["device_map"] == {"": 1} and kwargs["dtype"] == torch.bfloat16
    assert ("quantization_config" in kwargs) is four_bit
    assert "device_map" not in backends.hf_load_kwargs(config, on_cuda=False)


def test_export_device_is_one_device_for_every_model():
    params = 500_000_000  # 2 GB in float32
    assert export.export_device(params, cuda_free_bytes=None) == "cpu"
    assert export.export_device(params, cuda_free_bytes=2 * 2**30) == "cpu"  # no room for the headroom
    assert export.export_device(params, cuda_free_bytes=16 * 2**30) == "cuda"


def test_export_runs_on_the_cpu_while_cuda_is_visible(trained_tiny_run, tmp_path, cuda_visible):
    """Before the fix, export loaded with device_map {"": 0} whenever CUDA was visible."""
    cuda_visible.setattr(torch.cuda, "mem_get_info", lambda device=None: (0, 0))  # no room on the "GPU"
    cuda_visible.setattr(torch.cuda, "empty_cache", lambda: None)
    run = tmp_path / "run"
    shutil.copytree(trained_tiny_run, run)
    result = export.export_run(str(run), "merged16", str(tmp_path / "merged"), verify_prompts=1)
    assert result["verification"]["failed"] == [] and result["verification"]["rule"] == "horizon"


# --- dtype and backend choice (item 6, risk: emulated bf16) -------------------------------------

def test_pre_ampere_gpus_get_float16_not_emulated_bf16(monkeypatch):
    # torch's default counts emulation; a T4/V100 only has it emulated
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    assert backends.compute_dtype(gpu_config(), on_cuda=True) == torch.float16
    assert backends.compute_dtype(gpu_config(), on_cuda=False) == torch.float32


@pytest.fixture
def unsloth_gpu_machine(monkeypatch):
    monkeypatch.setattr(backends, "unsloth_installed", lambda: True)
    monkeypatch.setattr(backends, "cuda_available", lambda: True)


@pytest.mark.parametrize("kl", ["mirror", "both"])
def test_auto_resolves_to_hf_for_kl_mirror_and_says_so(unsloth_gpu_machine, capsys, kl):
    config = gpu_config(beta=0.04, kl=kl)
    assert backends.resolve_backend(config) == "hf"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "grpo.kl" in err[0] and "hf" in err[0]
    assert backends.resolve_backend(gpu_config(beta=0.04, kl="ref")) == "unsloth"


def test_explicit_unsloth_with_kl_mirror_is_refused_before_loading(unsloth_gpu_machine):
    config = gpu_config(beta=0.04, kl="mirror")
    config.backend = "unsloth"
    with pytest.raises(UserError, match="^grpo.kl: mirror needs the hf backend"):
        backends.resolve_backend(config)


# --- vLLM up front (item 5) ---------------------------------------------------------------------

def test_use_vllm_without_a_gpu_or_vllm_is_one_line_naming_the_field(monkeypatch):
    config = gpu_config(use_vllm=True)
    monkeypatch.setattr(backends, "cuda_available", lambda: False)
    with pytest.raises(UserError, match="^grpo.use_vllm: .*CUDA GPU"):
        backends.check_vllm(config)
    monkeypatch.setattr(backends, "cuda_available", lambda: True)
    monkeypatch.setattr(backends.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match="^grpo.use_vllm: the vllm package is not installed"):
        backends.check_vllm(config)
    backends.check_vllm(gpu_config(use_vllm=False))


def test_train_with_use_vllm_exits_2_before_writing_anything(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--model", tiny_model_dir, "--backend", "hf", "--use-vllm", "--output", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "grpo.use_vllm" in err[0]
    assert not out.exists()


# --- hub models outside the planner's table (item 2) ---------------------------------------------

def test_train_goes_past_the_planner_for_a_hub_model_it_does_not_know(tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = main(["train", "--model", "Qwen/Qwen3-4B-Instruct-2507", "--backend", "hf", "--output", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert "memory plan skipped" in err  # the planner warns once instead of refusing ...
    assert "model: cannot load Qwen/Qwen3-4B-Instruct-2507" in err  # ... and loading is what fails offline


def test_doctor_says_which_name_unsloth_fetches_in_4bit(tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    if not backends.unsloth_installed():
        pytest.skip("needs unsloth installed (its name table)")
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B-Instruct" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("abc")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert main(["doctor", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--json"]) == 0
    fetch = json.loads(capsys.readouterr().out)["unsloth_fetch"]
    assert fetch["cached"] is True  # what the user downloaded ...
    assert fetch["4bit"] == {"name": "unsloth/Qwen2.5-0.5B-Instruct-unsloth-bnb-4bit", "cached": False}  # ... is not what Unsloth loads


# --- p_ref and eval sample within the training generation batch (risk) ---------------------------

def test_p_ref_and_eval_generate_no_more_than_the_training_generation_batch():
    config = gpu_config(per_device_train_batch_size=4, gradient_accumulation_steps=2)  # the 8gb preset: 8
    assert plan.sampling_batch_limit(config) == 8
    assert p_ref.generation_limit(config, "cuda") == 8
    assert p_ref.generation_limit(config, "cpu") == p_ref.GENERATION_BATCH
    assert plan.prompts_per_generate(8, samples=4) == 2  # p_ref: 2 prompts x 4 samples
    assert plan.prompts_per_generate(8, samples=8, requested=8) == 1  # eval --batch-size 8 --samples 8
    assert plan.prompts_per_generate(8, samples=16) == 1  # one prompt's samples stay together ...
    config.grpo.p_ref_samples = 16
    assert plan.settings_of(config).generation_sequences == 16  # ... and the plan counts them


# --- LoRA stays fp32 on an HF 4-bit base, and --json stdout stays clean (items 4, 7) --------------

LENGTH_REWARD = textwrap.dedent('''
    def length_reward(completions, **kwargs):
        """Characters in the completion: graded, so every group has a non-zero advantage."""
        return [float(len(c[-1]["content"] if isinstance(c, list) else c)) for c in completions]
''')


def test_hf_4bit_run_trains_lora_a_in_fp32_and_json_stdout_is_one_object(tiny_model_dir, tmp_path, capfd, monkeypatch):
    import trl

    real_post_init = trl.GRPOConfig.__post_init__

    def post_init_printing_like_unsloth(self):  # Unsloth's GRPOConfig prints its notices like this
        print("Unsloth: The DAPO paper recommends `mask_truncated_completions = True` - we will set it.")
        real_post_init(self)

    real_load_hf = backends._load_hf

    def loader_writing_to_fd1(config):  # C extensions write to file descriptor 1 directly
        os.write(1, b"bitsandbytes: a C-level banner\n")
        return real_load_hf(config)

    monkeypatch.setattr(trl.GRPOConfig, "__post_init__", post_init_printing_like_unsloth)
    monkeypatch.setattr(backends, "_load_hf", loader_writing_to_fd1)
    reward_file = tmp_path / "length.py"
    reward_file.write_text(LENGTH_REWARD)
    run = tmp_path / "run"
    code = main(["train", "--model", tiny_model_dir, "--backend", "hf", "--load-in-4bit", "--task", "arithmetic",
                 "--num-train", "16", "--num-heldout", "4", "--num-generations", "4", "--per-device-train-batch-size", "8",
                 "--max-steps", "2", "--save-steps", "1", "--max-completion-length", "12", "--max-seq-length", "128",
                 "--lora-r", "4", "--lora-alpha", "8", "--learning-rate", "5e-6", "--p-ref-samples", "0",
                 "--rewards", f"{reward_file}:length_reward", "--output", str(run), "--json"])
    out, err = capfd.readouterr()
    assert code == 0, err[-3000:]
    assert json.loads(out)["steps"] == 2  # the whole of stdout is one JSON object
    assert "DAPO paper" in err and "C-level banner" in err

    # LoRA B starts at zero, so A gets its first gradient in step 2; at lr 5e-6 a bf16 A would round it away
    before = load_file(os.path.join(run, "checkpoints", "checkpoint-1", "adapter_model.safetensors"))
    after = load_file(os.path.join(run, "adapter", "adapter_model.safetensors"))
    lora_a = [name for name in after if "lora_A" in name]
    assert lora_a and all(after[name].dtype == torch.float32 for name in lora_a)
    moved = sum(int((after[n] != before[n]).sum()) for n in lora_a) / sum(after[n].numel() for n in lora_a)
    assert moved > 0.9, f"only {moved:.1%} of lora_A entries moved"


def test_stdout_to_stderr_catches_python_and_file_descriptor_writes(capfd):
    with stdout_to_stderr():
        print("from python")
        os.write(1, b"from C\n")
    print("after")
    out, err = capfd.readouterr()
    assert out == "after\n" and "from python" in err and "from C" in err
