"""Data: built-in tasks, local files with column mapping, GSM8K gold extraction, bad input."""

import os

import pytest

from conftest import GSM8K_DIR
from local_grpo.config import Config
from local_grpo.data import extract_gold, load_examples
from local_grpo.errors import UserError
from local_grpo.tasks import arithmetic_examples, countdown_examples


def test_arithmetic_is_seeded_distinct_and_correct():
    a = arithmetic_examples(200, seed=1, options={})
    assert a == arithmetic_examples(200, seed=1, options={})
    assert len({r["question"] for r in a}) == 200
    for row in a:
        x, y = row["question"].removeprefix("What is ").removesuffix("?").split(" + ")
        assert int(x) + int(y) == int(row["answer"])


def test_arithmetic_options():
    rows = arithmetic_examples(50, seed=0, options={"digits": 3, "operations": ["-", "*"], "operands": 3})
    for row in rows:
        expr = row["question"].removeprefix("What is ").removesuffix("?").replace("×", "*")
        assert eval(expr) == int(row["answer"])


def test_countdown_targets_are_reachable():
    for row in countdown_examples(30, seed=0, options={"numbers": 3}):
        assert row["target"] == int(row["answer"]) and len(row["numbers"]) == 3


def test_train_and_held_out_are_disjoint_chat_prompts():
    config = Config()
    config.data.num_train, config.data.num_heldout = 100, 20
    train, held = load_examples(config)
    assert len(train) == 100 and len(held) == 20
    assert not {r["question"] for r in train} & {r["question"] for r in held}
    assert train[0]["prompt"][0]["role"] == "system" and train[0]["prompt"][-1]["content"] == train[0]["question"]


def test_gsm8k_local_file_extracts_gold():
    config = Config()
    config.data.task = "gsm8k"
    config.data.task_options = {"path": os.path.join(GSM8K_DIR, "test.jsonl")}
    config.data.num_train, config.data.num_heldout = 30, 10
    train, held = load_examples(config)
    assert len(train) == 30
    assert all(r["answer"].lstrip("-").replace(".", "").isdigit() for r in train + held)


def test_extract_gold():
    assert extract_gold("so 3 + 4 = 7\n#### 1,234", "gsm8k") == "1234"
    assert extract_gold("no marker", "gsm8k") is None
    assert extract_gold(" 42 ", "plain") == "42"


def _dataset_config(path, **data):
    config = Config()
    config.data.dataset = str(path)
    config.data.num_train, config.data.num_heldout = 4, 1
    for key, value in data.items():
        setattr(config.data, key, value)
    return config


def test_local_csv_with_column_mapping(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("q,a\n" + "".join(f"What is {i} + 1?,{i + 1}\n" for i in range(8)))
    train, held = load_examples(_dataset_config(path, prompt_column="q", answer_column="a"))
    assert len(train) == 4 and len(held) == 1 and {"prompt", "question", "answer"} <= set(train[0])


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("empty.jsonl", b"", "is empty"),
        ("cols.jsonl", b'{"text": "hi", "answer": "1"}\n', "data.prompt_column: column 'question'"),
        ("types.jsonl", b'{"question": "q", "answer": [1]}\n' * 3, "column 'answer' must be text or a number"),
        ("latin1.jsonl", '{"question": "caf\u00e9", "answer": "1"}\n'.encode("latin-1"), "line 1: not UTF-8"),
        ("broken.jsonl", b'{"question": "q", "answer": "1"}\n{"question": \n', "line 2: invalid JSON"),
        ("huge.jsonl", b'{"question": "' + b"x" * 1_100_000 + b'", "answer": "1"}\n', "line 1: longer than"),
        ("data.txt", b"hello", "unsupported file type .txt"),
    ],
)
def test_bad_dataset_files_name_the_problem(tmp_path, name, content, expected):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UserError) as err:
        load_examples(_dataset_config(path))
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_missing_dataset_file(tmp_path):
    with pytest.raises(UserError, match="file not found"):
        load_examples(_dataset_config(tmp_path / "nope.jsonl"))
