"""Evaluation: the pass@k estimator, metrics on a fixed tiny dataset, and `eval --run --compare` files."""

from __future__ import annotations

import json
import shutil
import math

import pytest

from local_grpo import evaluate
from local_grpo.errors import UserError


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_run(trained_tiny_run, tmp_path_factory) -> str:
    """This module's copy of the session's finished tiny run (eval --compare writes into it)."""
    target = str(tmp_path_factory.mktemp("eval") / "run")
    shutil.copytree(trained_tiny_run, target)
    return target


# --- pass@k -------------------------------------------------------------------------------

@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 1, 0.4),                 # c/n
    (5, 2, 2, 1 - 3 / 10),          # 1 - C(3,2)/C(5,2)
    (10, 3, 5, 1 - 21 / 252),       # 1 - C(7,5)/C(10,5)
    (4, 0, 2, 0.0),                 # nothing correct
    (4, 4, 2, 1.0),                 # everything correct
    (8, 7, 2, 1.0),                 # n - c < k: some correct sample is always drawn
    (200, 1, 100, 0.5),             # 1 - C(199,100)/C(200,100) = 100/200, binomials of ~1e58
])
def test_pass_at_k_matches_hand_computed_values(n, c, k, expected):
    assert evaluate.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_agrees_with_exact_binomials():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert evaluate.pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError):
        evaluate.pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        evaluate.pass_at_k(4, 1, 5)


# --- metrics ------------------------------------------------------------------------------

def test_summarize_aggregates_per_prompt_records():
    settings = evaluate.EvalSettings(k=2, samples=4)
    records = [
        {"greedy": {"correct": True, "format": True, "tokens": 10, "rewards": {"correct_numeric": 1.0}},
         "n": 4, "c": 2, "pass@2": evaluate.pass_at_k(4, 2, 2), "samples": [{"tokens": 8}] * 4},
        {"greedy": {"correct": False, "format": False, "tokens": 20, "rewards": {"correct_numeric": None}},
         "n": 4, "c": 0, "pass@2": 0.0, "samples": [{"tokens": 12}] * 4},
    ]
    metrics = evaluate.summarize(records, ["correct_numeric"], settings, seconds=1.0)
    assert metrics["pass@1_greedy"] == 0.5
    assert metrics["pass@1_sampled"] == 0.25
    assert metrics["pass@2"] == pytest.approx((5 / 6) / 2, abs=1e-4)
    assert metrics["format_rate"] == 0.5
    assert metrics["mean_length"] == 15
    assert metrics["mean_length_sampled"] == 10
    assert metrics["rewards/correct_numeric"] == 1.0  # None scores are skipped


@pytest.mark.parametrize("text, expected", [
    ("7 + 5 = 12\nAnswer: 12", True),
    ("The answer is \\boxed{12}.", True),
    ("<think>12</think><answer>12</answer>", True),
    ("I think it is 12", False),
    ("Answer: twelve", False),
])
def test_format_rate_means_a_parseable_final_answer(text, expected):
    assert evaluate.has_final_answer(text) is expected


def test_eval_on_a_fixed_tiny_dataset(tiny_model_dir, tmp_path):
    data = tmp_path / "tiny.jsonl"
    rows = [{"question": f"What is {a} + {b}?", "answer": str(a + b)} for a, b in [(1, 2), (3, 4), (10, 5), (7, 7), (2, 9)]]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from local_grpo.config import Config
    from local_grpo.tasks import fill_defaults

    config = Config()
    config.model.name, config.backend = tiny_model_dir, "hf"
    config.data.dataset, config.data.num_heldout = str(data), 4
    config.output_dir = "unused"
    config = fill_defaults(config)
    settings = evaluate.EvalSettings(n=3, k=2, samples=3, max_new_tokens=6, batch_size=2, seed=1)

    first = evaluate.run_eval(config, None, settings, progress=False)
    again = evaluate.run_eval(config, None, settings, progress=False)

    metrics = first["metrics"]
    assert metrics["n_prompts"] == 3
    for key in ("pass@1_greedy", "pass@1_sampled", "pass@2", "format_rate", "mean_length",
                "rewards/correct_numeric", "rewards/format_soft"):
        assert metrics[key] is not None and 0 <= metrics[key] <= (6 if "length" in key else 1)
    assert 1 <= metrics["mean_length"] <= 6
    records = first["records"]
    assert [len(r["samples"]) for r in records] == [3, 3, 3]
    assert {r["answer"] for r in records} <= {r["answer"] for r in rows}
    # Same seed, same prompts: identical greedy and sampled completions.
    assert [r["greedy"]["completion"] for r in records] == [r["greedy"]["completion"] for r in again["records"]]
    assert [s["completion"] for r in records for s in r["samples"]] == \
           [s["completion"] for r in again["records"] for s in r["samples"]]


def test_settings_are_checked():
    with pytest.raises(UserError, match="--k"):
        evaluate.EvalSettings(k=5, samples=4).check()
    with pytest.raises(UserError, match="--split"):
        evaluate.EvalSettings(split="test").check()
    evaluate.EvalSettings(k=9, samples=0).check()  # greedy only: k is unused


# --- the command --------------------------------------------------------------------------

def test_eval_run_compare_writes_json_and_per_prompt_lines(tiny_run, capsys):
    from local_grpo.cli import main

    code = main(["eval", "--run", tiny_run, "--compare", "--n", "2", "--samples", "2", "--k", "2",
                 "--max-new-tokens", "4", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)  # exactly one JSON object on stdout
    assert set(summary["base"]) == set(summary["trained"])
    with open(f"{tiny_run}/eval_compare.json") as fh:
        saved = json.load(fh)
    for key in ("base", "trained", "n_prompts", "k", "samples", "temperature", "seed"):
        assert key in saved
    assert saved["n_prompts"] == 2 and saved["k"] == 2 and saved["base"]["pass@2"] is not None
    with open(f"{tiny_run}/eval_compare_prompts.jsonl") as fh:
        lines = [json.loads(line) for line in fh]
    assert [line["model"] for line in lines] == ["base", "base", "trained", "trained"]


def test_eval_prints_a_table(tiny_run, capsys):
    from local_grpo.cli import main

    assert main(["eval", "--run", tiny_run, "--n", "1", "--samples", "0", "--max-new-tokens", "3"]) == 0
    out = capsys.readouterr().out
    assert "pass@1_greedy" in out and "format_rate" in out


@pytest.mark.parametrize("argv, flag", [
    (["eval"], "--model"),
    (["eval", "--model", "embedded", "--k", "9", "--samples", "2"], "--k"),
    (["eval", "--run", "/nonexistent/run"], "config.yaml"),
    (["eval", "--model", "embedded", "--adapter", "/nonexistent/adapter"], "--adapter"),
])
def test_bad_flags_give_one_line_and_exit_2(argv, flag, capsys):
    from local_grpo.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert flag in err and "\n" not in err
