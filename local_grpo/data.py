"""Prompts and gold answers for a run: a built-in task, a local file or folder, or a hub dataset.

GSM8K ships inside the package (local_grpo/datasets/gsm8k, MIT, its LICENSE beside it), so the gsm8k
task works offline; `data.task_options.path` names another file or folder, or the hub id
`openai/gsm8k` to download the same data.

Every example becomes `{"prompt": [system, user messages], "question": str, "answer": str, ...}`
(extra columns such as countdown's `numbers` pass through to the rewards). Bad files and
columns give one-line UserErrors naming the file, line or column.
"""

from __future__ import annotations

import csv
import json
import os
import random
import re

from .config import Config
from .errors import UserError
from .tasks import get_task

MAX_LINE_CHARS = 1_000_000
GSM8K_HUB_ID = "openai/gsm8k"
GSM8K_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "datasets", "gsm8k")
GSM8K_SPLITS = ("train", "test")
_GSM8K_GOLD = re.compile(r"####\s*(-?[\d,]*\.?\d+)")


def load_examples(config: Config) -> tuple[list[dict], list[dict]]:
    """(train, held_out) examples for a config, each with prompt/question/answer columns."""
    d = config.data
    task = get_task(config.task_name)
    system_prompt = d.system_prompt if d.system_prompt is not None else task.system_prompt
    total = d.num_train + d.num_heldout
    if task.make_examples is not None:
        rows = task.make_examples(total, d.seed, d.task_options)
    else:
        rows = _rows_from_source(config)
        rng = random.Random(d.seed)
        rng.shuffle(rows)
        if len(rows) <= d.num_heldout:
            source = d.dataset or d.task
            raise UserError(f"data: {source} has {len(rows)} usable rows, fewer than num_heldout + 1 ({d.num_heldout + 1})")
        rows = rows[:total]
    examples = [with_prompt(row, system_prompt) for row in rows]
    held_out, train = examples[: d.num_heldout], examples[d.num_heldout :]
    return train, held_out


def with_prompt(row: dict, system_prompt: str) -> dict:
    """A row plus its chat prompt (system prompt + the question as the user turn)."""
    messages = [{"role": "user", "content": row["question"]}]
    if system_prompt:
        messages.insert(0, {"role": "system", "content": system_prompt})
    return {**row, "prompt": messages}


def _rows_from_source(config: Config) -> list[dict]:
    d = config.data
    if d.dataset:
        source, question_col, answer_col, answer_format = d.dataset, d.prompt_column, d.answer_column, d.answer_format
        field = "--dataset"
    else:  # gsm8k: task_options.path (a file, a folder or a hub id), else the shipped copy
        source = d.task_options.get("path") or shipped_gsm8k(d.split)
        if not isinstance(source, str):
            raise UserError(f"data.task_options.path: expected a file, a folder or a hub id, got {source!r:.60}")
        question_col, answer_col, answer_format = "question", "answer", "gsm8k"
        field = "data.task_options.path"
    raw = read_table(source, split=d.split, field=field)
    if not raw:
        raise UserError(f"data: {source} is empty")
    for col in (question_col, answer_col):
        if col not in raw[0]:
            flag = ("data.prompt_column" if col == question_col else "data.answer_column") if d.dataset else field
            raise UserError(f"{flag}: column {col!r} not in {source} (columns: {', '.join(map(str, raw[0]))})")
    rows = []
    for i, item in enumerate(raw):
        question, answer = item.get(question_col), item.get(answer_col)
        if not isinstance(question, str) or not question.strip():
            raise UserError(f"data: {source} row {i + 1}: column {question_col!r} must be non-empty text, got {question!r:.60}")
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise UserError(f"data: {source} row {i + 1}: column {answer_col!r} must be text or a number, got {answer!r:.60}")
        gold = extract_gold(str(answer), answer_format)
        if gold is None:
            raise UserError(f"data: {source} row {i + 1}: no '#### <number>' in column {answer_col!r}")
        extra = {k: v for k, v in item.items() if k not in (question_col, answer_col, "prompt")}
        rows.append({**extra, "question": question, "answer": gold})
    return rows


def shipped_gsm8k(split: str) -> str:
    """The packaged GSM8K file for a split (train: 7473 rows, test: 1319)."""
    if split not in GSM8K_SPLITS:
        raise UserError(f"data.split: the shipped GSM8K has splits {', '.join(GSM8K_SPLITS)}, got {split!r}")
    return os.path.join(GSM8K_DIR, f"{split}.jsonl")


def extract_gold(answer: str, answer_format: str) -> str | None:
    """The gold answer: as is (plain), or the number after '####' (gsm8k)."""
    if answer_format == "gsm8k":
        match = _GSM8K_GOLD.search(answer)
        return match.group(1).replace(",", "") if match else None
    return answer.strip()


def read_table(source: str, split: str = "train", field: str = "--dataset") -> list[dict]:
    """Rows of a local .jsonl/.json/.csv/.parquet file, a dataset folder, or a hub dataset split.

    `field` is the flag or config field that named `source`, for error messages.
    """
    source = os.path.expanduser(source)
    if os.path.isdir(source):  # a folder of split files, e.g. a hub dataset downloaded with its files
        return _read_hub(source, split, field)
    if os.path.exists(source):
        ext = os.path.splitext(source)[1].lower()
        readers = {".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv, ".parquet": _read_parquet}
        if ext not in readers:
            raise UserError(f"{field}: {source}: unsupported file type {ext or '(none)'} (use .jsonl, .json, .csv or .parquet)")
        return readers[ext](source, field)
    if source.endswith((".jsonl", ".json", ".csv", ".parquet")) or source.startswith((".", "/", "~")):
        raise UserError(f"{field}: file not found: {source}")
    return _read_hub(source, split, field)


def _read_jsonl(path: str, field: str) -> list[dict]:
    rows = []
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            if len(raw) > MAX_LINE_CHARS:
                raise UserError(f"{field}: {path} line {number}: longer than {MAX_LINE_CHARS} bytes")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise UserError(f"{field}: {path} line {number}: not UTF-8 text") from None
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise UserError(f"{field}: {path} line {number}: invalid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise UserError(f"{field}: {path} line {number}: expected a JSON object per line")
            rows.append(obj)
    return rows


def _read_json(path: str, field: str) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except UnicodeDecodeError:
        raise UserError(f"{field}: {path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{field}: {path} line {exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise UserError(f"{field}: {path}: expected a JSON list of objects")
    return data


def _read_csv(path: str, field: str) -> list[dict]:
    csv.field_size_limit(MAX_LINE_CHARS)
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            return list(csv.DictReader(fh))
    except UnicodeDecodeError:
        raise UserError(f"{field}: {path}: not UTF-8 text") from None
    except csv.Error as exc:
        raise UserError(f"{field}: {path}: invalid CSV ({exc})") from None


def _read_parquet(path: str, field: str) -> list[dict]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several types for broken files
        raise UserError(f"{field}: {path}: not a readable parquet file ({type(exc).__name__})") from None


def _read_hub(name: str, split: str, field: str) -> list[dict]:
    """A split through `datasets.load_dataset`: a hub id (needs a network or its cache) or a local folder."""
    import datasets

    config_name = "main" if name == GSM8K_HUB_ID else None
    try:
        ds = datasets.load_dataset(name, config_name, split=split)
    except Exception as exc:  # offline, unknown id, bad split: datasets raises many types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        what = f"{name} is a directory that datasets cannot load" if os.path.isdir(name) else f"cannot load hub dataset {name!r}"
        raise UserError(f"{field}: {what} (split {split!r}: {first[:160]})") from None
    return [dict(r) for r in ds]
