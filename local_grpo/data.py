"""Prompts and gold answers for a run: a built-in task, a local file, or a hub dataset.

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
    else:  # gsm8k: a local file in task_options.path, else the hub dataset
        source = d.task_options.get("path", GSM8K_HUB_ID)
        question_col, answer_col, answer_format = "question", "answer", "gsm8k"
    raw = read_table(source, split=d.split)
    if not raw:
        raise UserError(f"data: {source} is empty")
    for col in (question_col, answer_col):
        if col not in raw[0]:
            flag = "prompt_column" if col == question_col else "answer_column"
            raise UserError(
                f"data.{flag}: column {col!r} not in {source} (columns: {', '.join(map(str, raw[0]))})"
            )
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


def extract_gold(answer: str, answer_format: str) -> str | None:
    """The gold answer: as is (plain), or the number after '####' (gsm8k)."""
    if answer_format == "gsm8k":
        match = _GSM8K_GOLD.search(answer)
        return match.group(1).replace(",", "") if match else None
    return answer.strip()


def read_table(source: str, split: str = "train") -> list[dict]:
    """Rows of a local .jsonl/.json/.csv/.parquet file, or of a hub dataset split."""
    if os.path.exists(source):
        if os.path.isdir(source):
            raise UserError(f"--dataset: {source} is a directory, expected a .jsonl, .csv or .parquet file")
        ext = os.path.splitext(source)[1].lower()
        readers = {".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv, ".parquet": _read_parquet}
        if ext not in readers:
            raise UserError(f"--dataset: {source}: unsupported file type {ext or '(none)'} (use .jsonl, .json, .csv or .parquet)")
        return readers[ext](source)
    if source.endswith((".jsonl", ".json", ".csv", ".parquet")) or source.startswith((".", "/", "~")):
        raise UserError(f"--dataset: file not found: {source}")
    return _read_hub(source, split)


def _read_jsonl(path: str) -> list[dict]:
    rows = []
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            if len(raw) > MAX_LINE_CHARS:
                raise UserError(f"--dataset: {path} line {number}: longer than {MAX_LINE_CHARS} bytes")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise UserError(f"--dataset: {path} line {number}: not UTF-8 text") from None
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise UserError(f"--dataset: {path} line {number}: invalid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise UserError(f"--dataset: {path} line {number}: expected a JSON object per line")
            rows.append(obj)
    return rows


def _read_json(path: str) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except UnicodeDecodeError:
        raise UserError(f"--dataset: {path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"--dataset: {path} line {exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise UserError(f"--dataset: {path}: expected a JSON list of objects")
    return data


def _read_csv(path: str) -> list[dict]:
    csv.field_size_limit(MAX_LINE_CHARS)
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            return list(csv.DictReader(fh))
    except UnicodeDecodeError:
        raise UserError(f"--dataset: {path}: not UTF-8 text") from None
    except csv.Error as exc:
        raise UserError(f"--dataset: {path}: invalid CSV ({exc})") from None


def _read_parquet(path: str) -> list[dict]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several types for broken files
        raise UserError(f"--dataset: {path}: not a readable parquet file ({type(exc).__name__})") from None


def _read_hub(name: str, split: str) -> list[dict]:
    import datasets

    config_name = "main" if name == GSM8K_HUB_ID else None
    try:
        ds = datasets.load_dataset(name, config_name, split=split)
    except Exception as exc:  # offline, unknown id, bad split: datasets raises many types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"--dataset: cannot load hub dataset {name!r} split {split!r} ({first[:160]})") from None
    return [dict(r) for r in ds]
