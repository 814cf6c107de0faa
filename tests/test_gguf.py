"""GGUF export through llama.cpp's own converter and quantizer, checked by running the file in llama.cpp.

The models carry the embedded SmolLM2's real tokenizer: llama.cpp's converter recognises a BPE
tokenizer by the hash of its pre-tokenizer's output, and knows SmolLM2's. Tests that run llama.cpp
need the `gguf` extra (`make gguf`); without llama-cpp-python they are skipped.
"""

from __future__ import annotations

import os
import shutil

import pytest

from export_runs import run_config, write_adapter

from local_grpo import export, llamacpp
from local_grpo.errors import UserError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

needs_converter = pytest.mark.skipif(not os.path.isfile(os.path.join(
    os.environ.get(llamacpp.ENV_VAR) or llamacpp.default_converter_dir(), llamacpp.CONVERTER)),
    reason="llama.cpp's converter is not installed (make gguf)")


@pytest.fixture(scope="module")
def smollm2_tokenizer_dir(tmp_path_factory) -> str:
    from tiny_model import save_smollm2_tokenizer

    return save_smollm2_tokenizer(str(tmp_path_factory.mktemp("smollm2-tokenizer")))


def fit_to_answers(base_dir: str, rows: list[dict], steps: int = 150) -> None:
    """Fine-tune the tiny model in `base_dir` (in place) to answer `rows` ("The sum is N.\nAnswer: N").

    A random model's next-token choices are near-ties everywhere, so any rounding changes its greedy path
    within a few tokens; a model fitted to its prompts decides like a trained one (about 12 s)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    pairs = [(tokenizer(tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True),
                        add_special_tokens=False)["input_ids"],
              tokenizer(f"The sum is {row['answer']}.\nAnswer: {row['answer']}{tokenizer.eos_token}",
                        add_special_tokens=False)["input_ids"]) for row in rows]
    width = max(len(p) + len(c) for p, c in pairs)
    ids = torch.full((len(pairs), width), tokenizer.pad_token_id)
    mask, labels = torch.zeros_like(ids), torch.full_like(ids, -100)
    for i, (prompt, completion) in enumerate(pairs):
        ids[i, :len(prompt) + len(completion)] = torch.tensor(prompt + completion)
        mask[i, :len(prompt) + len(completion)] = 1
        labels[i, len(prompt):len(prompt) + len(completion)] = torch.tensor(completion)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    keep = labels[:, 1:] != -100
    for _ in range(steps):
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1]
        loss = torch.nn.functional.cross_entropy(model.lm_head(hidden[keep]), labels[:, 1:][keep])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(base_dir)


@pytest.fixture(scope="module")
def random_base(smollm2_tokenizer_dir, tmp_path_factory) -> str:
    """A tiny random SmolLM2-shaped Llama (hidden 64, 2 layers) with SmolLM2's tokenizer."""
    from tiny_model import build_architecture

    return build_architecture("smollm2", str(tmp_path_factory.mktemp("random") / "tiny-smollm2"), smollm2_tokenizer_dir)


@pytest.fixture(scope="module")
def tiny_run(random_base, tmp_path_factory) -> str:
    """A run over a copy of `random_base` fitted to answer the run's held-out prompts, with a small random adapter."""
    from local_grpo import data

    base = str(shutil.copytree(random_base, tmp_path_factory.mktemp("fitted") / "tiny-smollm2"))
    run_dir = tmp_path_factory.mktemp("gguf") / "run"
    config = run_config(run_dir, base)
    fit_to_answers(base, data.load_examples(config)[1])
    return write_adapter(run_dir, base, lora_std=0.02)


def leftovers(folder) -> list[str]:
    return [n for n in os.listdir(folder) if ".partial-" in n or ".merged-" in n or ".old-" in n]


# --- without llama.cpp's runtime ------------------------------------------------------------

def test_a_missing_converter_is_one_line_before_anything_loads(tiny_run, tmp_path, monkeypatch):
    monkeypatch.setenv(llamacpp.ENV_VAR, str(tmp_path / "no-llama.cpp"))
    with pytest.raises(UserError, match=r"convert_hf_to_gguf\.py.*make gguf") as raised:
        export.export_run(tiny_run, "gguf", str(tmp_path / "out"), quant="q8_0")
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_k_quants_without_llama_cpp_name_the_extra(tiny_run, tmp_path, monkeypatch):
    monkeypatch.setattr(llamacpp, "runtime_available", lambda: False)
    with pytest.raises(UserError, match=r"--quant q4_k_m: needs llama-cpp-python.*gguf extra"):
        export.export_run(tiny_run, "gguf", str(tmp_path / "out"), quant="q4_k_m")
    assert not (tmp_path / "out").exists()


def test_byte_level_reset_keeps_every_id_and_text(smollm2_tokenizer_dir, tmp_path):
    """transformers' GGUF reader gives SmolLM2's tokenizer byte_fallback and a sentencepiece decoder; the
    reset the converter needs changes neither the ids nor the decoded text."""
    from tiny_model import PROBE_TEXTS
    from transformers import AutoTokenizer

    folder = shutil.copytree(smollm2_tokenizer_dir, tmp_path / "tok")
    before = AutoTokenizer.from_pretrained(str(folder))
    assert llamacpp.plain_byte_level_bpe(str(folder)) is True
    after = AutoTokenizer.from_pretrained(str(folder))
    texts = PROBE_TEXTS + [before.apply_chat_template([{"role": "user", "content": t}], tokenize=False) for t in PROBE_TEXTS]
    for text in texts:
        ids = before(text, add_special_tokens=False)["input_ids"]
        assert after(text, add_special_tokens=False)["input_ids"] == ids
        assert after.decode(ids) == before.decode(ids)
    assert llamacpp.plain_byte_level_bpe(str(folder)) is False  # already plain: left alone


def test_the_last_error_line_is_the_one_that_says_what_failed():
    output = "INFO: loading\nTraceback (most recent call last):\n  File x\nNotImplementedError: BPE pre-tokenizer was not recognized\n"
    assert llamacpp.last_error_line(output) == "NotImplementedError: BPE pre-tokenizer was not recognized"
    assert llamacpp.last_error_line("terminate called after throwing\n  what():  unordered_map::at\n") == "what():  unordered_map::at"
    assert llamacpp.last_error_line("") == "no output"


# --- Ollama's TEMPLATE for each family -------------------------------------------------------

FAMILIES = ["smollm2", "qwen2", "qwen3", "llama3", "gemma3", "phi3"]


def family_tokenizer(name: str, tokenizer_dir: str):
    """SmolLM2's tokenizer with the family's own chat template (TRL's copy), special tokens and BOS."""
    from tiny_model import ARCHITECTURES, trl_chat_template
    from transformers import AutoTokenizer

    arch = ARCHITECTURES[name]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if arch.special_tokens:
        tokenizer.add_special_tokens({"additional_special_tokens": arch.special_tokens})
    tokenizer.eos_token = arch.eos
    if arch.bos:
        tokenizer.bos_token = arch.bos
    if arch.template:
        tokenizer.chat_template = trl_chat_template(arch.template)
    return tokenizer


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("strip_bos", [False, True])
def test_the_ollama_template_renders_the_chat_template_text(smollm2_tokenizer_dir, family, strip_bos):
    tokenizer = family_tokenizer(family, smollm2_tokenizer_dir)
    template = export.ollama_template(tokenizer, with_system=True, strip_bos=strip_bos)
    assert template is not None and template.count("{{ .Response }}") == 1
    system, user = "Reply with a number.", "What is 3 + 4?\n  Two lines, spaced  ."
    expected = tokenizer.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                             tokenize=False, add_generation_prompt=True)
    if strip_bos and expected.startswith(tokenizer.bos_token):
        expected = expected[len(tokenizer.bos_token):]
    # Ollama's Go template, filled by plain substitution: everything before {{ .Response }} is the prompt
    ollama_prompt = template.split("{{ .Response }}")[0].replace("{{ .System }}", system).replace("{{ .Prompt }}", user)
    assert ollama_prompt == expected
    assert template.split("{{ .Response }}")[1].startswith(tokenizer.eos_token)  # the turn closes with its end token


def test_a_template_that_cannot_be_written_for_ollama_gives_none(smollm2_tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] | upper }}{% endfor %}"  # changes the text
    assert export.ollama_template(tokenizer, with_system=True, strip_bos=False) is None
    tokenizer.chat_template = "{{ raise_exception('no system role') }}"
    assert export.ollama_template(tokenizer, with_system=True, strip_bos=False) is None


# --- converted, quantized and run in llama.cpp -------------------------------------------------

@needs_converter
@pytest.mark.parametrize("quant, rule", [("f32", "exact"), ("f16", "horizon")])
def test_the_converted_file_decodes_in_llama_cpp_as_the_merged_model(tiny_run, tmp_path, quant, rule):
    pytest.importorskip("llama_cpp")
    out = tmp_path / quant
    result = export.export_run(tiny_run, "gguf", str(out), quant=quant, verify_prompts=4)

    check = result["verification"]
    assert check["in_llama_cpp"] and check["runtime"] == "llama.cpp" and check["rule"] == rule
    assert check["prompt_ids_match"] and check["end_tokens_not_stopping"] == []
    assert check["identical"] == check["prompts"] == 4 and check["failed"] == []
    assert result["file"] == str(out / f"tiny-smollm2-grpo-{quant}.gguf")  # <stem>-<quant>.gguf
    meta = llamacpp.file_metadata(result["file"], ("tokenizer.ggml.model", "tokenizer.ggml.pre", "general.architecture"))
    assert meta == {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm", "general.architecture": "llama"}
    assert sorted(os.listdir(out)) == sorted([os.path.basename(result["file"]), "Modelfile", "README.md", "reward_curve.png"]
                                             if os.path.exists(out / "reward_curve.png") else
                                             [os.path.basename(result["file"]), "Modelfile", "README.md"])
    assert leftovers(tmp_path) == []


@needs_converter
@pytest.mark.parametrize("quant", ["q8_0", "q4_k_m"])
def test_quantized_exports_run_in_llama_cpp_and_report_agreement(tiny_run, tmp_path, quant):
    pytest.importorskip("llama_cpp")
    result = export.export_run(tiny_run, "gguf", str(tmp_path / quant), quant=quant, verify_prompts=4)

    check = result["verification"]
    assert check["in_llama_cpp"] and check["prompt_ids_match"] and check["failed"] == []
    assert check["rule"] == {"q8_0": "decisions", "q4_k_m": "report"}[quant]
    assert 0 <= check["agreement"] <= check["horizon_agreement"] <= 1
    assert check["decision_agreement"] >= (export.DECISION_AGREEMENT if quant == "q8_0" else 0)
    file_type = llamacpp.file_metadata(result["file"], ("general.file_type",))["general.file_type"]
    assert file_type == {"q8_0": 7, "q4_k_m": 15}[quant]  # llama_ftype: MOSTLY_Q8_0, MOSTLY_Q4_K_M


@needs_converter
def test_the_modelfile_and_the_cards_python_snippet_work(tiny_run, tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    out = tmp_path / "f16"
    result = export.export_run(tiny_run, "gguf", str(out), quant="f16", verify_prompts=1)
    name = os.path.basename(result["file"])
    modelfile = (out / "Modelfile").read_text()
    system = export.system_prompt(export.inference_config(export.load_config(os.path.join(tiny_run, "config.yaml"))))
    assert f"FROM ./{name}\n" in modelfile and f'SYSTEM """{system}"""' in modelfile
    assert 'PARAMETER stop "<|im_end|>"' in modelfile and 'TEMPLATE """<|im_start|>system\n{{ .System }}<|im_end|>' in modelfile
    card = (out / "README.md").read_text()
    assert "ollama create my-grpo-model -f Modelfile" in card and f"llama-cli -m {name}" in card
    # the card's llama-cpp-python lines: the chat template stored in the file formats the conversation
    llm = llama_cpp.Llama(result["file"], n_ctx=512, verbose=False)
    reply = llm.create_chat_completion([{"role": "system", "content": system}, {"role": "user", "content": "What is 12 + 35?"}],
                                       temperature=0, max_tokens=8)
    assert isinstance(reply["choices"][0]["message"]["content"], str)


def convert_another_folder(monkeypatch, folder) -> None:
    """Make the export convert `folder` (prepared as the export prepares its own) instead of the merged model."""
    real_convert = llamacpp.convert
    llamacpp.plain_byte_level_bpe(str(folder))
    monkeypatch.setattr(llamacpp, "convert", lambda _merged, path, outtype: real_convert(str(folder), path, outtype))


@needs_converter
def test_a_file_of_another_model_fails_the_check_and_stays_for_inspection(tiny_run, random_base, tmp_path, monkeypatch,
                                                                          capsys):
    """The file written is another model (the random base before it was fitted): llama.cpp's tokens differ
    from the merged model's, the CLI prints one line and exits 2, and the files stay at --out."""
    pytest.importorskip("llama_cpp")
    from local_grpo.cli import main

    convert_another_folder(monkeypatch, shutil.copytree(random_base, tmp_path / "base"))
    out = tmp_path / "lost-adapter"
    code = main(["export", tiny_run, "--format", "gguf", "--quant", "f32", "--out", str(out), "--verify-prompts", "4"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # one line (library progress bars aside)
    assert err.startswith("local-grpo: error: export verification failed: the GGUF f32 file run in llama.cpp "
                          "does not reproduce the merged model (every greedy token")
    assert err.endswith(f"the unverified files are in {out}")
    assert os.path.isfile(out / "tiny-smollm2-grpo-f32.gguf") and os.path.isfile(out / "Modelfile")
    assert "The check failed" in (out / "README.md").read_text()
    assert leftovers(tmp_path) == []


@needs_converter
def test_a_file_llama_cpp_cannot_run_fails_the_check_and_never_replaces_an_export(tiny_run, tmp_path, monkeypatch,
                                                                                 capsys):
    """Without the byte-level reset, the converter writes SmolLM2's tokenizer as a sentencepiece vocabulary and
    llama.cpp aborts when it tokenizes: the check fails in one line, and an existing --out (even with
    --overwrite) is kept; the unverified files stay in the temporary folder the line names."""
    pytest.importorskip("llama_cpp")
    from local_grpo.cli import main

    monkeypatch.setattr(llamacpp, "plain_byte_level_bpe", lambda folder: False)
    out = tmp_path / "existing"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["export", tiny_run, "--format", "gguf", "--quant", "f16", "--out", str(out), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "the GGUF f16 file could not run in llama.cpp: llama.cpp's runtime failed (killed by SIGABRT)" in err
    assert os.listdir(out) == ["keep.txt"]
    kept = [n for n in os.listdir(tmp_path) if ".partial-" in n]
    assert len(kept) == 1 and err.endswith(str(tmp_path / kept[0]))
    assert os.path.isfile(tmp_path / kept[0] / "tiny-smollm2-grpo-f16.gguf")


# --- the embedded SmolLM2 after a short run ---------------------------------------------------

@pytest.fixture(scope="module")
def embedded_run(tmp_path_factory) -> str:
    """The embedded SmolLM2 trained for 2 GRPO steps on 2-digit addition (4 held-out prompts)."""
    from local_grpo import train
    from local_grpo.config import Config

    config = Config()
    config.backend = "hf"
    config.data.task = "arithmetic"
    config.data.task_options = {"digits": 2, "operations": ["+"]}
    config.data.num_train, config.data.num_heldout = 16, 4
    g = config.grpo
    g.num_generations, g.per_device_train_batch_size, g.max_completion_length = 4, 8, 32
    g.max_steps, g.save_steps, g.learning_rate = 2, 2, 1e-3
    config.output_dir = str(tmp_path_factory.mktemp("embedded") / "run")
    train.train(config, progress=False)
    return config.output_dir


@pytest.mark.e2e
@needs_converter
def test_embedded_f16_gguf_decodes_in_llama_cpp_as_its_merged16_export(embedded_run, tmp_path):
    pytest.importorskip("llama_cpp")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from local_grpo.generation import end_token_ids

    merged16 = export.export_run(embedded_run, "merged16", str(tmp_path / "merged16"), verify_prompts=0)
    gguf = export.export_run(embedded_run, "gguf", str(tmp_path / "gguf"), quant="f16", verify_prompts=4)
    check = gguf["verification"]
    assert check["in_llama_cpp"] and check["prompt_ids_match"] and check["failed"] == []
    assert os.path.basename(gguf["file"]) == "SmolLM2-135M-Instruct-grpo-f16.gguf"

    config = export.inference_config(export.load_config(os.path.join(embedded_run, "config.yaml")))
    prompts = export.verification_prompts(config, 4)
    model = AutoModelForCausalLM.from_pretrained(merged16["path"], dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(merged16["path"])
    want = export.greedy_ids(model, tokenizer, prompts, config.grpo.max_completion_length)
    texts = [tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in prompts]
    ran = llamacpp.greedy(gguf["file"], texts, end_token_ids(model, tokenizer), config.grpo.max_completion_length, 512)
    assert ran["prompt_ids"] == [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert ran["completions"] == want
