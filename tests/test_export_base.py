"""Export reproduces what was trained: the run records the base it loaded (RUN_DIR/base_model.json), and
eval and export load that base again — the same files, offline, 4-bit when training was 4-bit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, make_tiny_config
from local_grpo import backends, export, rundir
from local_grpo.rundir import RunDir

pytestmark = pytest.mark.usefixtures("one_torch_thread")

HUB_ID = "tiny-org/tiny-llama-bnb-4bit"  # a "hub id" that exists only in a local Hugging Face cache folder
REVISION = "0123456789abcdef0123456789abcdef01234567"


def train_tiny(model: str, output_dir: str, load_in_4bit: bool, steps: int = 2) -> str:
    from local_grpo import train

    config = make_tiny_config(model, output_dir, steps=steps, save_steps=steps, max_completion_length=8)
    config.model.load_in_4bit = load_in_4bit
    config.grpo.p_ref_prompts = 2  # p_ref runs the 4-bit model in eval mode before training (see test below)
    train.train(config, progress=False)
    return config.output_dir


@pytest.fixture(scope="module")
def four_bit_run(tiny_model_dir, tmp_path_factory) -> str:
    """A 2-step run of the tiny model loaded as bitsandbytes nf4 (quantised on load, HF backend, CPU)."""
    return train_tiny(tiny_model_dir, str(tmp_path_factory.mktemp("four-bit") / "run"), load_in_4bit=True)


def point_hub_cache_at(monkeypatch, cache: str) -> None:
    """HF_HUB_CACHE for this process and its children (huggingface_hub read the variable when imported)."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_CACHE", cache)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", cache)


def build_hub_cache(cache: str, tiny_model_dir: str) -> str:
    """A local Hugging Face cache holding HUB_ID: the tiny model stored pre-quantised (nf4), the way an
    Unsloth -bnb-4bit checkpoint is, in the hub layout models--owner--name/snapshots/<revision> + refs/main."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    repo = os.path.join(cache, "models--" + HUB_ID.replace("/", "--"))
    snapshot = os.path.join(repo, "snapshots", REVISION)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32,
                                                 quantization_config=backends.quantization_config(torch.float32))
    model.save_pretrained(snapshot)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(snapshot)
    os.makedirs(os.path.join(repo, "refs"))
    with open(os.path.join(repo, "refs", "main"), "w") as fh:
        fh.write(REVISION)
    return snapshot


@pytest.fixture(scope="module")
def hub_cache_run(tiny_model_dir, tmp_path_factory) -> tuple[str, str]:
    """A 1-step 4-bit run whose model.name is HUB_ID, loaded offline from a local cache; returns (run, cache)."""
    cache = str(tmp_path_factory.mktemp("hf") / "hub")
    with pytest.MonkeyPatch.context() as monkeypatch:
        point_hub_cache_at(monkeypatch, cache)
        build_hub_cache(cache, tiny_model_dir)
        run = train_tiny(HUB_ID, str(tmp_path_factory.mktemp("hub-run") / "run"), load_in_4bit=True, steps=1)
    return run, cache


# --- what the run records ---------------------------------------------------------------------

def test_a_run_records_the_base_it_loaded(trained_tiny_run, four_bit_run, tiny_model_dir):
    assert RunDir.open(trained_tiny_run).base_model() == {
        "name": tiny_model_dir, "path": os.path.abspath(tiny_model_dir), "snapshot": None, "load_in_4bit": False,
        "dtype": "float32", "backend": "hf"}
    assert RunDir.open(four_bit_run).base_model()["load_in_4bit"] is True


def test_a_hub_base_is_recorded_with_its_cache_folder(hub_cache_run):
    run, cache = hub_cache_run
    record = RunDir.open(run).base_model()
    assert record["name"] == record["path"] == HUB_ID and record["load_in_4bit"] is True
    assert record["snapshot"] == os.path.join(cache, "models--tiny-org--tiny-llama-bnb-4bit", "snapshots", REVISION)


def test_a_run_without_the_record_falls_back_to_model_name(trained_tiny_run, tiny_model_dir):
    config = export.inference_config(make_tiny_config(tiny_model_dir, "unused"))
    assert backends.inference_source(config, None) == (tiny_model_dir, False)
    other = {**RunDir.open(trained_tiny_run).base_model(), "name": "someone/else"}  # eval --run R --model OTHER
    assert backends.inference_source(config, other) == (tiny_model_dir, False)


# --- the 4-bit model computes as training computes ---------------------------------------------

def test_a_4bit_layer_in_eval_mode_computes_with_the_dequantised_weights_and_passes_gradients(tiny_model_dir):
    """bitsandbytes 0.50 on an avx512_bf16 CPU would repack the weights on the first no-grad eval forward and
    compute in bf16 from then on, with no gradient back through the layer; backends turns that off."""
    import bitsandbytes as bnb
    import torch

    config = export.inference_config(make_tiny_config(tiny_model_dir, "unused"))
    config.model.load_in_4bit = True
    model = backends.load_for_inference(config).model
    layer = model.model.layers[1].mlp.down_proj
    assert isinstance(layer, bnb.nn.Linear4bit)
    weight = bnb.functional.dequantize_4bit(layer.weight.data, layer.weight.quant_state)
    x = torch.randn(1, 3, layer.in_features)
    with torch.no_grad():
        assert torch.equal(layer(x), x @ weight.T)
    model.train()
    x.requires_grad_(True)
    layer(x).sum().backward()
    assert torch.allclose(x.grad[0, 0], weight.sum(0), atol=1e-5)


# --- export: which reference, and what merged16 holds -------------------------------------------

def test_a_float32_run_is_checked_against_the_float32_base(trained_tiny_run, tmp_path):
    result = export.export_run(trained_tiny_run, "lora", str(tmp_path / "lora"), verify_prompts=1)
    assert result["reference"] == "the float32 base + adapter" and result["verification"]["failed"] == []
    assert "Reference: the float32 base + adapter." in (tmp_path / "lora" / "README.md").read_text()


def test_4bit_lora_export_is_checked_against_the_4bit_model(four_bit_run, tmp_path):
    out = tmp_path / "lora"
    result = export.export_run(four_bit_run, "lora", str(out), verify_prompts=2)

    assert result["reference"] == "the 4-bit base + adapter as trained and evaluated"
    assert result["verification"]["rule"] == "exact" and result["verification"]["identical"] == 2
    card = (out / "README.md").read_text()
    assert "Reference: the 4-bit base + adapter as trained and evaluated" in card
    assert "trained in 4-bit (bitsandbytes nf4)" in card and "BitsAndBytesConfig(load_in_4bit=True" in card


def test_4bit_merged16_is_the_dequantised_base_plus_the_adapter(four_bit_run, tiny_model_dir, tmp_path):
    import bitsandbytes as bnb
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    out = tmp_path / "merged"
    result = export.export_run(four_bit_run, "merged16", str(out), verify_prompts=4)
    assert result["reference"] == "the 4-bit base + adapter as trained and evaluated"
    assert result["verification"]["rule"] == "horizon" and result["verification"]["failed"] == []
    assert "quantization_config" not in json.loads((out / "config.json").read_text())

    # the tensor written = bitsandbytes' dequantised nf4 base + the LoRA delta, merged in float32, stored in f16
    name = "model.layers.0.self_attn.q_proj"
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32,
                                                quantization_config=backends.quantization_config(torch.float32))
    nf4 = base.get_submodule(name).weight
    dequantised = bnb.functional.dequantize_4bit(nf4.data, nf4.quant_state)
    adapter = load_file(os.path.join(four_bit_run, "adapter", "adapter_model.safetensors"))
    lora = json.loads(open(os.path.join(four_bit_run, "adapter", "adapter_config.json")).read())
    a, b = (adapter[f"base_model.model.{name}.lora_{x}.weight"] for x in "AB")
    delta = (b @ a) * (lora["lora_alpha"] / lora["r"])
    assert delta.abs().max() > 0  # the adapter trained
    written = load_file(str(out / "model.safetensors"))[f"{name}.weight"]
    assert written.dtype == torch.float16
    torch.testing.assert_close(written, (dequantised + delta).half(), rtol=2 ** -10, atol=0)
    original = AutoModelForCausalLM.from_pretrained(tiny_model_dir).get_submodule(name).weight
    assert not torch.allclose(written, (original + delta).half(), rtol=2 ** -10, atol=0)  # not the fp32 base


# --- offline: a hub base from the local cache, and a missing one --------------------------------

def moved_run(run: str, cache: str, tmp_path) -> tuple[str, str]:
    """A copy of the hub run whose recorded cache folder no longer exists (the cache moved, or the run was
    copied to another machine); returns (the copy, a new cache path, not created)."""
    copy = str(tmp_path / "run")
    shutil.copytree(run, copy)
    record = RunDir.open(copy).base_model()
    RunDir(copy).write_json(rundir.BASE_MODEL, {**record, "snapshot": str(tmp_path / "gone" / REVISION)})
    return copy, str(tmp_path / "cache")


def test_export_and_eval_load_a_hub_base_from_the_local_cache_offline(hub_cache_run, tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    from local_grpo.cli.main import main

    run, cache = moved_run(*hub_cache_run, tmp_path)
    shutil.copytree(hub_cache_run[1], cache, symlinks=True)  # the cache now lives elsewhere
    point_hub_cache_at(monkeypatch, cache)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)

    result = export.export_run(run, "merged16", str(tmp_path / "merged"), verify_prompts=2)
    assert result["reference"] == "the 4-bit base + adapter as trained and evaluated"
    assert result["verification"]["failed"] == []

    loads = []  # what eval loaded: the real loader, watched

    def watched(*args, **kwargs):
        loaded = load_for_inference(*args, **kwargs)
        loads.append((kwargs.get("base"), loaded.model.is_loaded_in_4bit))
        return loaded

    load_for_inference = backends.load_for_inference
    monkeypatch.setattr(backends, "load_for_inference", watched)
    assert main(["eval", "--run", run, "--n", "1", "--samples", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["n_prompts"] == 1
    assert loads == [(RunDir.open(run).base_model(), True)]  # eval loaded the run's base, in 4-bit


def test_a_missing_hub_base_is_one_line_and_exit_2(hub_cache_run, tmp_path):
    run, empty = moved_run(*hub_cache_run, tmp_path)
    os.makedirs(empty)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": empty, "PYTHONPATH": REPO}
    done = subprocess.run([sys.executable, "-m", "local_grpo.cli", "export", run, "--format", "merged16",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    line = done.stderr.strip()
    assert f"model: cannot load the run's base {HUB_ID}: it is not in the local Hugging Face cache ({empty})" in line
    assert "needs config.json and model.safetensors" in line
    assert not (tmp_path / "out").exists()
