"""The backend is decided in one place (backends.choose_backend) and resolved once per command: each rule on
machines described by their facts (GPU, Unsloth installed, processes), and a real tiny training run that
resolves it exactly once while the plan, the GRPOConfig and the loader read the stored value."""

from __future__ import annotations

import pytest
import yaml

from conftest import make_tiny_config
from local_grpo import backends, plan
from local_grpo import config as config_mod
from local_grpo.backends import Machine, choose_backend
from local_grpo.cli import main
from local_grpo.config import Config
from local_grpo.errors import UserError

UNSLOTH_GPU = Machine(gpu=True, unsloth=True)
UNSLOTH_NO_GPU = Machine(gpu=False, unsloth=True)
BARE_CPU = Machine(gpu=False, unsloth=False)


def config_with(backend="auto", kl=None, use_vllm=False, vllm_mode="colocate") -> Config:
    config = Config()
    config.backend, config.grpo.use_vllm, config.grpo.vllm_mode = backend, use_vllm, vllm_mode
    if kl:
        config.grpo.kl, config.grpo.beta = kl, 0.04
    return config


@pytest.mark.parametrize("machine, expected", [(UNSLOTH_GPU, "unsloth"), (UNSLOTH_NO_GPU, "hf"), (BARE_CPU, "hf"),
                                               (Machine(gpu=True, unsloth=False), "hf")])
def test_auto_is_unsloth_only_where_it_is_installed_and_a_gpu_is_present(machine, expected):
    assert choose_backend(config_with(), machine) == backends.BackendChoice(expected, None)
    assert choose_backend(config_with("hf"), machine).backend == "hf"


@pytest.mark.parametrize("kl", ["mirror", "both"])
def test_kl_mirror_resolves_auto_to_hf_with_a_note_and_refuses_unsloth(kl):
    choice = choose_backend(config_with(kl=kl), UNSLOTH_GPU)
    assert choice.backend == "hf" and choice.note.startswith(f"backend auto -> hf: grpo.kl {kl} needs the hf backend")
    assert choose_backend(config_with(kl=kl), BARE_CPU) == backends.BackendChoice("hf", None)  # hf anyway: no note
    with pytest.raises(UserError, match=f"^grpo.kl: {kl} needs the hf backend"):
        choose_backend(config_with("unsloth", kl=kl), UNSLOTH_GPU)
    assert choose_backend(config_with(kl="ref"), UNSLOTH_GPU).backend == "unsloth"


def test_vllm_server_mode_trains_on_hf():
    server = config_with(use_vllm=True, vllm_mode="server")
    choice = choose_backend(server, UNSLOTH_GPU)
    assert choice.backend == "hf" and "vllm_mode server" in choice.note
    with pytest.raises(UserError, match="^grpo.vllm_mode: server mode"):
        choose_backend(config_with("unsloth", use_vllm=True, vllm_mode="server"), UNSLOTH_GPU)
    assert choose_backend(config_with(use_vllm=True), UNSLOTH_GPU).backend == "unsloth"  # colocate: Unsloth's vLLM


def test_a_multi_process_launch_trains_on_hf():
    launch = Machine(gpu=True, unsloth=True, processes=4)
    choice = choose_backend(config_with(), launch)
    assert choice.backend == "hf" and "4-process launch" in choice.note
    with pytest.raises(UserError, match="^backend: unsloth trains in one process"):
        choose_backend(config_with("unsloth"), launch)


def test_unsloth_asked_where_it_is_not_installed():
    with pytest.raises(UserError, match="^backend: unsloth is not installed"):
        choose_backend(config_with("unsloth"), BARE_CPU)
    assert choose_backend(config_with("unsloth"), UNSLOTH_NO_GPU).backend == "unsloth"  # Unsloth's CPU fallback


def test_inference_loads_an_unsloth_run_with_hf_where_unsloth_is_absent_and_ignores_the_training_rules():
    choice = choose_backend(config_with("unsloth", kl="mirror"), BARE_CPU, training=False)
    assert choice.backend == "hf" and choice.note.startswith("backend unsloth -> hf")
    assert choose_backend(config_with(), UNSLOTH_NO_GPU, training=False).backend == "hf"  # auto needs a GPU
    # the KL term, the launch and vLLM server mode concern training; loading an adapter does not depend on them
    assert choose_backend(config_with(kl="mirror"), Machine(gpu=True, unsloth=True, processes=2),
                          training=False).backend == "unsloth"


def test_resolving_stores_the_backend_prints_the_note_once_and_keeps_the_request_in_yaml(capsys):
    config = config_with(kl="mirror")
    assert backends.resolve_backend(config, machine=UNSLOTH_GPU) == "hf"
    assert config.resolved_backend == "hf" and config.backend == "auto"
    assert backends.backend_of(config) == "hf"  # read, not resolved again
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "backend auto -> hf: grpo.kl mirror" in err[0]
    saved = yaml.safe_load(config_mod.to_yaml(config))
    assert saved["backend"] == "auto" and "resolved_backend" not in saved
    with pytest.raises(UserError, match="unknown key 'resolved_backend'"):
        config_mod.from_dict({"resolved_backend": "hf"})


def test_the_plan_reads_the_resolved_backend_and_plans_for_a_gpu_without_one():
    config = config_with()
    config.model.name = "Qwen/Qwen2.5-0.5B-Instruct"
    config.resolved_backend = "hf"
    assert plan.settings_of(config).backend == "hf"
    config.resolved_backend = "unsloth"
    assert plan.settings_of(config).backend == "unsloth"
    asked = config_with("unsloth")  # no run resolved it: the plan is for a GPU machine where Unsloth is there
    assert plan.settings_of(asked).backend == "unsloth" and plan.settings_of(asked, device="cpu").backend == "unsloth"
    with pytest.raises(UserError, match="^grpo.kl: mirror needs the hf backend"):
        plan.settings_of(config_with("unsloth", kl="mirror"))


def test_unsloth_with_kl_mirror_is_one_line_and_exit_2_before_anything_is_written(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--model", tiny_model_dir, "--backend", "unsloth", "--kl", "mirror", "--beta", "0.04",
                 "--output", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "grpo.kl: mirror needs the hf backend" in err[0]
    assert not out.exists()


def test_a_training_run_resolves_its_backend_once(tiny_model_dir, tmp_path, monkeypatch, one_torch_thread):
    choose = backends.choose_backend
    auto_here = choose(config_with(), Machine.here()).backend
    if auto_here == "unsloth":
        pytest.skip("auto is Unsloth on this machine, and Unsloth must not enter the test process")
    calls = []

    def counted(config, machine, training=True):
        calls.append((config.backend, training))
        return choose(config, machine, training)

    monkeypatch.setattr(backends, "choose_backend", counted)
    config = make_tiny_config(tiny_model_dir, str(tmp_path / "run"), steps=1)
    config.backend = "auto"
    from local_grpo import train

    summary = train.train(config, progress=False)
    assert calls == [("auto", True)]  # the check; the plan, the GRPOConfig and the loader read what it stored
    assert summary["backend"] == auto_here
    saved = yaml.safe_load(open(tmp_path / "run" / "config.yaml"))
    assert saved["backend"] == "auto" and "resolved_backend" not in saved  # the request, as the user gave it
