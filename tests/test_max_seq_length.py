"""model.max_seq_length holds on every backend: a prompt longer than max_seq_length - max_completion_length
is refused in one line by train (before the run directory is written), plan and the rewards check, with
the tiny model's real tokenizer; short prompts still train."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from local_grpo import backends, data
from local_grpo.config import Config, from_dict
from local_grpo.errors import UserError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG_QUESTION = "Sam has 80 books and gives 3 away each day. " * 22 + "How many books are left after 5 days?"
COMPLETION = 64


def run_cli(args, cwd):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": REPO}
    return subprocess.run([sys.executable, "-m", "local_grpo.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def write_dataset(path, long_rows=(), rows=24):
    """A plain-answer jsonl of short sums; the rows in `long_rows` ask LONG_QUESTION instead."""
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(rows):
            question = LONG_QUESTION if i in long_rows else f"What is {i} + {i}?"
            fh.write(json.dumps({"question": question, "answer": str(2 * i)}) + "\n")
    return str(path)


def config_dict(model_dir, dataset, output_dir, max_seq_length=128):
    return {"model": {"name": model_dir, "max_seq_length": max_seq_length}, "backend": "hf",
            "lora": {"r": 4, "alpha": 8},
            "data": {"dataset": dataset, "num_train": 16, "num_heldout": 4},
            "grpo": {"max_completion_length": COMPLETION, "num_generations": 4, "per_device_train_batch_size": 8,
                     "max_steps": 1, "save_steps": 1, "learning_rate": 1e-2, "p_ref_prompts": 0},
            "output_dir": output_dir}


def chat(question, system=None):
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]


def trl_prompt_lengths(tokenizer, prompts):
    """Prompt lengths through the call TRL 1.15's GRPOTrainer makes (_tokenize_prompts)."""
    tokenized = tokenizer.apply_chat_template(conversation=prompts, add_generation_prompt=True, tokenize=True,
                                              return_dict=True)
    return [len(ids) for ids in tokenized["input_ids"]]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return backends.load_tokenizer(tiny_model_dir)


def test_prompt_lengths_are_what_trl_feeds_the_model(tokenizer):
    prompts = [chat(q, system="Answer with a number.") for q in ("What is 2 + 2?", LONG_QUESTION)]
    measured = data.prompt_lengths(tokenizer, prompts)
    assert measured == trl_prompt_lengths(tokenizer, prompts)
    assert 700 < measured[1] < 1100  # the long question is ~900 tokens with the tiny tokenizer


def test_the_budget_is_inclusive_and_the_line_names_the_longest_prompt(tokenizer):
    rows = [{"question": q, "answer": "1", "prompt": chat(q)} for q in ("What is 1 + 1?", LONG_QUESTION)]
    longest = max(trl_prompt_lengths(tokenizer, [row["prompt"] for row in rows]))
    config = Config()
    config.grpo.max_completion_length = COMPLETION
    config.model.max_seq_length = longest + COMPLETION  # exactly fits
    assert data.check_prompt_lengths(config, tokenizer, rows[:1], rows[1:]) == \
        {"prompts": 2, "longest": longest, "budget": longest}
    config.model.max_seq_length -= 1
    with pytest.raises(UserError) as refused:
        data.check_prompt_lengths(config, tokenizer, rows[:1], rows[1:])
    line = str(refused.value)
    assert "\n" not in line and line.startswith("model.max_seq_length: ")
    assert f"the longest prompt is {longest} tokens (held-out prompt 1: \"Sam has 80 books" in line
    assert f"1 of 2 prompts over), more than max_seq_length {longest + COMPLETION - 1} - " \
           f"grpo.max_completion_length {COMPLETION} = {longest - 1}" in line
    assert line.endswith(f"raise --max-seq-length to at least {longest + COMPLETION} or shorten the prompts")


def test_train_and_plan_refuse_a_long_prompt_before_anything_trains(tiny_model_dir, tokenizer, tmp_path):
    dataset = write_dataset(tmp_path / "long.jsonl", long_rows=range(24))  # every row long: train and held-out
    run_dir = tmp_path / "run"
    config_path = tmp_path / "long.yaml"
    config_path.write_text(yaml.safe_dump(config_dict(tiny_model_dir, dataset, str(run_dir))))
    train_rows, held_out = data.load_examples(from_dict(yaml.safe_load(config_path.read_text())))
    longest = max(trl_prompt_lengths(tokenizer, [row["prompt"] for row in train_rows + held_out]))

    trained = run_cli(["train", "--config", str(config_path)], cwd=tmp_path)
    assert trained.returncode == 2, trained.stderr[-2000:]
    lines = trained.stderr.strip().splitlines()
    assert len(lines) == 1, trained.stderr
    assert lines[0].startswith(f"local-grpo: error: model.max_seq_length: the longest prompt is {longest} tokens "
                               "(train prompt 1: \"Sam has 80 books")
    assert "20 of 20 prompts over), more than max_seq_length 128 - grpo.max_completion_length 64 = 64" in lines[0]
    assert lines[0].endswith(f"raise --max-seq-length to at least {longest + COMPLETION} or shorten the prompts")
    assert not run_dir.exists()  # no run directory, so no adapter and no checkpoint

    planned = run_cli(["plan", "--config", str(config_path)], cwd=tmp_path)
    assert planned.returncode == 2, planned.stderr[-2000:]
    assert planned.stderr.strip().splitlines() == lines  # the same rule, the same line
    assert planned.stdout == ""


def test_plan_reports_the_longest_prompt_and_plans_the_budget(tiny_model_dir, tokenizer, tmp_path):
    dataset = write_dataset(tmp_path / "short.jsonl")
    config_path = tmp_path / "short.yaml"
    config_path.write_text(yaml.safe_dump(config_dict(tiny_model_dir, dataset, str(tmp_path / "run"))))
    result = run_cli(["plan", "--config", str(config_path), "--json"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    plan = json.loads(result.stdout)
    prompts = plan["prompts"]
    assert prompts["measured"] and prompts["budget"] == 128 - COMPLETION and prompts["prompts"] == 20
    train_rows, held_out = data.load_examples(from_dict(yaml.safe_load(config_path.read_text())))
    assert prompts["longest"] == max(trl_prompt_lengths(tokenizer, [r["prompt"] for r in train_rows + held_out]))
    assert plan["breakdown"]["assumptions"]["prompt_tokens"] == prompts["budget"]


def test_plan_without_a_local_tokenizer_says_it_did_not_measure(tmp_path):
    from local_grpo import plan

    config = Config()
    config.model.name = "Qwen/Qwen2.5-0.5B-Instruct"  # not in this machine's Hugging Face cache
    checked = plan.prompt_check(config)
    assert checked["measured"] is False and "no local tokenizer" in checked["reason"]
    assert checked["budget"] == config.model.max_seq_length - config.grpo.max_completion_length


def test_the_rewards_check_holds_its_sampled_prompts_to_the_budget(tiny_model_dir, tmp_path, capsys):
    from local_grpo.cli import main

    dataset = write_dataset(tmp_path / "long.jsonl", long_rows=range(24))
    cache = tmp_path / "cache"
    code = main(["rewards", "check", "--model", tiny_model_dir, "--backend", "hf", "--dataset", dataset,
                 "--num-train", "16", "--num-heldout", "4", "--max-seq-length", "128", "--max-completion-length", "64",
                 "--num-generations", "4", "--prompts", "2", "--cache-dir", str(cache), "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.strip().splitlines()[-1].startswith(
        "local-grpo: error: model.max_seq_length: the longest prompt is ")
    assert "(held-out prompt 1: \"Sam has 80 books" in err and "2 of 2 prompts over" in err
    assert not cache.exists()  # nothing sampled, nothing cached


def test_trl_cannot_be_told_to_generate_past_the_completion_length(tmp_path):
    from local_grpo.train import trainer

    config = Config()
    config.grpo.trl = {"generation_kwargs": {"max_new_tokens": 4096}}
    with pytest.raises(UserError, match=r"^grpo\.trl\.generation_kwargs: max_new_tokens .*grpo\.max_completion_length"):
        trainer.grpo_args(config, str(tmp_path), on_cuda=False, backend="hf")


def test_short_prompts_still_train(tiny_model_dir, tmp_path, one_torch_thread):
    from local_grpo import train

    dataset = write_dataset(tmp_path / "short.jsonl")
    config = from_dict(config_dict(tiny_model_dir, dataset, str(tmp_path / "run")))
    config.grpo.max_completion_length = 8
    summary = train.train(config, progress=False)
    assert summary["steps"] == 1
    assert os.path.isfile(os.path.join(summary["adapter"], "adapter_model.safetensors"))
