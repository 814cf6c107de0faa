"""bench/gpu_plan_check.py on the CPU: its dry run (items, commands, caps, plans, configs), the budget and
source rules, the judgement of train and export items, the packing step's file selection and the
device-side lookup of what it packs; with SmolLM2's tokenizer (e2e), the check's true Qwen2 / Qwen3 model
folders at a tiny shape; marked slow, the Qwen3 4-bit train item and its three exports run for real, each
in its own child process as on the device."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILLERS = 64  # the tiny shapes' vocabulary: SmolLM2's 49152 tokens + this many fillers


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("gpu_plan_check", os.path.join(REPO, "bench", "gpu_plan_check.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def tiny_shape(vocab_size: int, head_dim: int = 16):
    """A few-MB shape of the check's families (GQA, explicit head_dim) over SmolLM2's vocabulary + fillers."""
    from local_grpo.plan import Shape

    return Shape("tiny", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=head_dim,
                 intermediate_size=128, vocab_size=vocab_size, tie_embeddings=True)


def test_dry_run_plans_every_item_of_the_issue(check, tmp_path):
    out = tmp_path / "report.json"
    assert check.main(["--dry-run", "--out", str(out), "--workdir", str(tmp_path / "work")]) == 0
    report = json.loads(out.read_text())
    items = {row["item"]: row for row in report["items"]}
    # most valuable first: Unsloth's trainer on 4-bit Qwen3, hf on 4-bit Qwen2.5 and Qwen3, then one run's exports
    assert [row["item"] for row in report["items"][:6]] == [
        "train-unsloth-qwen3-4bit", "train-hf-qwen2.5-4bit", "train-hf-qwen3-4bit",
        "export-lora", "export-merged16", "export-gguf"]
    assert items["train-unsloth-qwen3-4bit"]["backend"] == "unsloth" and items["train-hf-qwen3-4bit"]["backend"] == "hf"
    assert {row["format"] for row in report["items"] if row["kind"] == "export"} == {"lora", "merged16", "gguf"}
    assert all(items[name]["source"] == "train-hf-qwen3-4bit" for name in ("export-lora", "export-merged16", "export-gguf"))
    assert "--quant f16" in items["export-gguf"]["command"]
    assert {row["cap_gb"] for row in report["items"]} == {8, 16}
    assert all(row["command"].startswith("local-grpo ") and row["command"].endswith("--json") for row in report["items"])
    for row in report["items"]:
        if row["kind"] == "train" and row["four_bit"]:
            assert row["plan"]["fits"] and row["plan"]["total_gb"] < 8, row["item"]  # the 8gb recipe, 0.5B/0.6B shapes

    models = report["prepared"]["models"]
    assert {f: m["architecture"] for f, m in models.items()} == {"qwen2.5": "Qwen2Config", "qwen3": "Qwen3Config"}
    assert models["qwen3"]["shape"]["head_dim"] == 128 and models["qwen2.5"]["shape"]["num_heads"] == 14
    assert {m["vocabulary"]["size"] for m in models.values()} == {151936}  # Qwen's, SmolLM2's tokenizer padded

    work = tmp_path / "work"
    config = (work / "configs" / "train-hf-kl-mirror-qwen2.5-4bit.yaml").read_text()
    assert "kl: mirror" in config and "preset: 8gb" in config and f"name: {work / 'models' / 'qwen2.5'}" in config
    unsloth = (work / "configs" / "train-unsloth-qwen3-4bit.yaml").read_text()
    assert f"name: {work / 'models' / 'qwen3'}" in unsloth
    assert "max_completion_length: 256" in unsloth and "max_seq_length: 576" in unsloth  # the recipe's 320-token prompts
    data = [json.loads(line) for line in open(work / "gsm8k-tiny.jsonl")]
    assert len(data) >= 56 and all("####" in row["answer"] for row in data)  # num_train 48 + num_heldout 8
    assert not (work / "models" / "qwen3").exists()  # a dry run builds nothing


def test_budget_and_item_selection(check, tmp_path, monkeypatch):
    args = check.parse_args(["--items", "train-hf-qwen3-4bit,export-lora,export-merged16-unsloth-run", "--budget-s", "0",
                             "--workdir", str(tmp_path)])
    monkeypatch.setattr(check, "prepare", lambda *a, **k: {"models": {}})
    monkeypatch.setattr(check, "environment", lambda: {})
    report = check.run_check(args)
    statuses = {r["item"]: r["status"] for r in report["items"]}
    assert statuses == {"train-hf-qwen3-4bit": "skipped (time budget)",  # nothing starts once the budget is spent
                        "export-lora": "skipped (its source run train-hf-qwen3-4bit did not pass)",
                        "export-merged16-unsloth-run": "skipped (its source run train-unsloth-qwen3-4bit did not pass)"}
    assert report["summary"]["skipped"] == 3
    with pytest.raises(SystemExit):
        check.parse_args(["--items", "train-everything"])


def test_an_export_item_runs_in_a_child_and_is_judged(check, trained_tiny_run, tmp_path):
    workdir = tmp_path / "work"
    shutil.copytree(trained_tiny_run, check.run_dir("train-hf-qwen3-4bit", str(workdir)))
    os.makedirs(workdir / "measure")
    item = check.ITEM_BY_NAME["export-lora"]
    row = check.judge(item, check.run_item(item, str(workdir), timeout_s=600), str(workdir))
    assert row["rc"] == 0, row.get("stderr_tail")
    assert row["stdout_is_one_json_object"] and row["passed"] and row["verification"]["failed"] == []
    assert row["measured"]["cap_gb"] == 16 and row["measured"]["rc"] == 0


def test_a_train_item_is_judged_from_its_run_directory(check, trained_tiny_run, tmp_path):
    workdir = tmp_path / "work"
    for name in ("train-hf-qwen3-4bit", "train-unsloth-qwen3-4bit"):
        shutil.copytree(trained_tiny_run, check.run_dir(name, str(workdir)))
    summary = json.loads((workdir / "runs" / "train-hf-qwen3-4bit" / "summary.json").read_text())
    assert summary["backend"] == "hf"
    measured = {"peak_reserved_gb": 2.0, "trl_grpo_trainer": "trl.trainer.grpo_trainer.GRPOTrainer"}
    row = {"rc": 0, "stdout_is_one_json_object": True, "stdout_json": summary, "measured": measured}
    judged = check.judge(check.ITEM_BY_NAME["train-hf-qwen3-4bit"], dict(row), str(workdir))
    assert judged["passed"] and judged["steps"] == 2 and judged["step_seconds"] > 0
    assert judged["plan"]["total_gb"] > 0 and judged["plan_over_measured"] > 0
    assert judged["trainer"] == "trl.trainer.grpo_trainer.GRPOTrainer"
    # an unsloth item passes only when Unsloth trained with its own GRPOTrainer, not TRL's left in place
    unsloth = check.ITEM_BY_NAME["train-unsloth-qwen3-4bit"]
    assert not check.judge(unsloth, dict(row), str(workdir))["passed"]
    as_unsloth = {**row, "stdout_json": {**summary, "backend": "unsloth"},
                  "measured": {**measured, "trl_grpo_trainer": "unsloth_compiled_cache.UnslothGRPOTrainer.UnslothGRPOTrainer"}}
    assert check.judge(unsloth, as_unsloth, str(workdir))["passed"]


def test_packing_keeps_what_a_cuda_13_run_loads(check):
    assert check.kept("bitsandbytes/libbitsandbytes_cuda130.so") and check.kept("bitsandbytes/libbitsandbytes_cpu.so")
    assert check.kept("unsloth/models/qwen3.py") and check.kept("trl/chat_templates/qwen3.jinja")
    for dropped in ("bitsandbytes/libbitsandbytes_cuda128.so", "bitsandbytes/libbitsandbytes_cuda118.so",
                    "bitsandbytes/libbitsandbytes_rocm72.so", "studio/frontend/index.html", "dill/tests/test_abc.py",
                    "local-grpo-gpu-check/llama.cpp/conversion/__pycache__/base.cpython-311.pyc"):
        assert not check.kept(dropped), dropped
    assert all(spec.count("==") == 1 for spec in check.WHEELS)  # pinned


def test_packed_converter_and_tokenizer_are_found_on_the_device(check, tmp_path):
    """The zip's assets, as asset_files selects them, unpacked by --install, are what the check finds in the site."""
    converter, tokenizer = tmp_path / "llama.cpp", tmp_path / "tokenizer"
    for path in (converter / "convert_hf_to_gguf.py", converter / "conversion" / "qwen.py",
                 converter / "gguf-py" / "gguf" / "__init__.py", converter / "conversion" / "__pycache__" / "qwen.pyc",
                 tokenizer / "tokenizer.json", tokenizer / "tokenizer_config.json"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    files = check.asset_files(str(tokenizer), str(converter))
    assert sorted(files) == [f"{check.CONVERTER_DIR}/conversion/qwen.py", f"{check.CONVERTER_DIR}/convert_hf_to_gguf.py",
                             f"{check.CONVERTER_DIR}/gguf-py/gguf/__init__.py",
                             f"{check.TOKENIZER_DIR}/tokenizer.json", f"{check.TOKENIZER_DIR}/tokenizer_config.json"]
    packed = tmp_path / "gpu-site-1.zip"
    with zipfile.ZipFile(packed, "w") as z:
        for member, path in files.items():
            z.write(path, member)
    site = tmp_path / "site"
    assert check.site_converter(str(site)) is None
    assert check.main(["--install", str(packed), "--site", str(site)]) == 0
    assert check.site_converter(str(site)) == str(site / check.CONVERTER_DIR)
    args = check.parse_args(["--site", str(site), "--workdir", str(tmp_path / "work")])
    assert check.tokenizer_source(args) == str(site / check.TOKENIZER_DIR)
    from local_grpo import llamacpp

    assert check.child_env(check.site_converter(str(site))).get(llamacpp.ENV_VAR) in (
        str(site / check.CONVERTER_DIR), os.environ.get(llamacpp.ENV_VAR))  # an explicit setting wins


@pytest.mark.e2e  # SmolLM2's tokenizer
def test_model_folders_are_true_qwen_architectures_with_smollm2s_tokenizer_padded(check, smollm2_tokenizer_dir,
                                                                                   tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    from local_grpo import plan
    from tiny_model import reencodes_like

    source = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)
    shape = tiny_shape(len(source) + FILLERS)
    for family, model_type in (("qwen2.5", "qwen2"), ("qwen3", "qwen3")):
        folder = str(tmp_path / family)
        built = check.build_model_folder(folder, family, smollm2_tokenizer_dir, shape)
        assert AutoConfig.from_pretrained(folder).model_type == model_type
        assert built["vocabulary"]["unreachable_fillers"] == FILLERS
        assert built["vocabulary"]["tokenizer_tokens"] == len(source)
        read = plan.model_shape(folder)  # what the plan of a run on this folder reads
        assert (read.vocab_size, read.hidden_size, read.head_dim, read.num_kv_heads) == (len(source) + FILLERS, 64, 16, 2)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        assert len(tokenizer) == len(source) + FILLERS
        assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
        assert tokenizer.decode([len(source)]) == "zq0"  # every id the model can emit decodes
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False,
                                                 add_generation_prompt=True)
        assert rendered.endswith("<|im_start|>assistant\n")
    assert reencodes_like(str(tmp_path / "qwen3"), smollm2_tokenizer_dir)  # the fillers change no text's ids


@pytest.mark.slow
@pytest.mark.e2e
def test_the_qwen3_4bit_train_item_and_its_three_exports_run_on_cpu(check, smollm2_tokenizer_dir, tmp_path,
                                                                    monkeypatch):
    """The device's most used path at a tiny shape: train-hf-qwen3-4bit (nf4 base, 2 steps of the 8gb recipe),
    then export-lora, export-merged16 and export-gguf of that run, each `local-grpo ... --json` in a child.

    As on the device, the GGUF is checked without llama.cpp's runtime (hidden from the children where it is
    installed), by transformers' GGUF reader. That reader takes no head_dim from a Qwen3 GGUF (it assumes
    Qwen3Config's 128, which every published Qwen3 has), so the tiny Qwen3 has head_dim 128 too."""
    from local_grpo import llamacpp

    if not os.path.isfile(os.path.join(os.environ.get(llamacpp.ENV_VAR) or llamacpp.default_converter_dir(),
                                       llamacpp.CONVERTER)):
        pytest.skip("llama.cpp's converter is not installed (make gguf)")
    hide = tmp_path / "no-llama-cpp"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text('import sys\nsys.modules["llama_cpp"] = None  # not installed, as on the device\n')
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hide), os.environ.get("PYTHONPATH")])))
    work = str(tmp_path / "work")
    names = ["train-hf-qwen3-4bit", "export-lora", "export-merged16", "export-gguf"]
    items = [check.ITEM_BY_NAME[n] for n in names]
    prepared = check.prepare(work, items, build_model=True, tokenizer_dir=smollm2_tokenizer_dir, completion_tokens=16,
                             shapes={"qwen3": tiny_shape(49152 + FILLERS, head_dim=128)})
    assert prepared["models"]["qwen3"]["architecture"] == "Qwen3Config"
    rows = {}
    for item in items:
        rows[item.name] = row = check.judge(item, check.run_item(item, work, timeout_s=900), work)
        assert row["passed"], (item.name, row.get("stderr_tail"), row.get("verification"))
    train = rows["train-hf-qwen3-4bit"]
    assert train["steps"] == 2 and train["trained_backend"] == "hf" and train["plan"]["total_gb"] > 0
    assert rows["export-merged16"]["reference"].startswith("the 4-bit base")  # checked against the model as trained
    assert rows["export-gguf"]["gguf_runtime"] == "transformers' GGUF reader"
    assert rows["export-gguf"]["verification"]["prompt_ids_match"]
