"""Data: built-in tasks, local files with column mapping, GSM8K gold extraction, bad input."""

import itertools
import json

import pytest

from local_grpo.config import Config
from local_grpo.data import extract_gold, load_examples
from local_grpo.errors import UserError
from local_grpo.tasks.builtin.arithmetic import arithmetic_examples
from local_grpo.tasks.builtin.countdown import countdown_examples
from local_grpo.tasks.builtin.gsm8k import GSM8K_DIR


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
        steps = row["solution"].splitlines()  # products first, then left to right: two steps for 3 operands
        assert len(steps) == 2 and steps[-1].endswith(f"= {row['answer']}.")
        for step in steps:
            left, right = step.removesuffix(".").split(" = ")
            assert eval(left.replace("×", "*")) == int(right)


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


def _gsm8k_config(**options) -> Config:
    config = Config()
    config.data.task = "gsm8k"
    config.data.task_options = options
    config.data.num_train, config.data.num_heldout = 30, 10
    return config


def _is_number(text: str) -> bool:
    return text.lstrip("-").replace(".", "", 1).isdigit()


def test_gsm8k_reads_the_shipped_copy_by_default():
    train, held = load_examples(_gsm8k_config())
    assert len(train) == 30 and len(held) == 10
    assert all(_is_number(r["answer"]) for r in train + held)
    with open(f"{GSM8K_DIR}/train.jsonl", encoding="utf-8") as fh:
        shipped = {json.loads(line)["question"] for line in fh}
    assert len(shipped) > 7000 and {r["question"] for r in train + held} <= shipped


def test_gsm8k_test_split_and_a_local_file():
    config = _gsm8k_config()
    config.data.split = "test"
    from_split = load_examples(config)
    from_file = load_examples(_gsm8k_config(path=f"{GSM8K_DIR}/test.jsonl"))
    assert from_split == from_file
    with open(f"{GSM8K_DIR}/test.jsonl", encoding="utf-8") as fh:
        assert sum(1 for _ in fh) == 1319


def test_gsm8k_folder_goes_through_the_hub_loader(tmp_path):
    """A folder of split files is read by datasets.load_dataset, the code path a hub id takes."""
    folder = tmp_path / "gsm8k"
    folder.mkdir()
    for split, n in (("train", 50), ("test", 20)):
        with open(f"{GSM8K_DIR}/{split}.jsonl", encoding="utf-8") as src:
            (folder / f"{split}.jsonl").write_text("".join(itertools.islice(src, n)), encoding="utf-8")
    config = _gsm8k_config(path=str(folder))
    config.data.split = "test"
    config.data.num_train = 10
    train, held = load_examples(config)
    assert len(train) == 10 and len(held) == 10
    test_questions = {json.loads(line)["question"] for line in (folder / "test.jsonl").read_text().splitlines()}
    assert {r["question"] for r in train + held} <= test_questions
    assert all(_is_number(r["answer"]) for r in train + held)


def test_gsm8k_hub_id_when_asked_explicitly_goes_to_the_hub_offline_error():
    # conftest sets HF_DATASETS_OFFLINE=1: datasets refuses the download, and the error says who asked
    with pytest.raises(UserError) as err:
        load_examples(_gsm8k_config(path="openai/gsm8k"))
    message = str(err.value)
    assert message.startswith("data.task_options.path: cannot load hub dataset 'openai/gsm8k'") and "\n" not in message


def test_gsm8k_missing_file_names_the_config_field(tmp_path):
    with pytest.raises(UserError, match=r"^data\.task_options\.path: file not found: .*missing\.jsonl"):
        load_examples(_gsm8k_config(path=str(tmp_path / "missing.jsonl")))
    config = _gsm8k_config()
    config.data.split = "validation"
    with pytest.raises(UserError, match=r"^data\.split: .*train, test"):
        load_examples(config)
    with pytest.raises(UserError, match=r"^data\.task_options\.path: expected"):
        load_examples(_gsm8k_config(path=3))


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
