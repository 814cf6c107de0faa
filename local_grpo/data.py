"""Prompts and gold answers for a run: the task's generated rows, or the table its Source names.

The task (local_grpo.tasks: a built-in, the dataset task of data.dataset, or a user's task file) says
where its rows come from and how a row becomes a prompt; this module reads local files, folders and hub
datasets, shuffles and splits. Every example becomes `{"prompt": [system, user messages], "question": str, "answer": str, ...}`
(extra columns such as countdown's `numbers` pass through to the rewards; a gsm8k-format answer's
rationale becomes the `solution` column, the worked solution grpo.hints reads). Bad files and
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
from .tasks import Source, Task, task_for

MAX_LINE_CHARS = 1_000_000
GSM8K_HUB_ID = "openai/gsm8k"
_GSM8K_GOLD = re.compile(r"####\s*(-?[\d,]*\.?\d+)")
_GSM8K_ANNOTATION = re.compile(r"<<[^<>]*>>")  # GSM8K's calculator annotations inside its rationales


def load_examples(config: Config) -> tuple[list[dict], list[dict]]:
    """(train, held_out) examples for a config, each with prompt/question/answer columns."""
    d = config.data
    task = task_for(config)
    total = d.num_train + d.num_heldout
    if task.examples is not None:
        rows = task.examples(total, d.seed, d.task_options)
    else:
        source = task.source(d)
        rows = rows_from_source(source, d.split)
        rng = random.Random(d.seed)
        rng.shuffle(rows)
        if len(rows) <= d.num_heldout:
            raise UserError(f"data: {source.path} has {len(rows)} usable rows, fewer than num_heldout + 1 ({d.num_heldout + 1})")
        rows = rows[:total]
    examples = [with_prompt(row, task, d.system_prompt) for row in rows]
    held_out, train = examples[: d.num_heldout], examples[d.num_heldout :]
    return train, held_out


def with_prompt(row: dict, task: Task, system_prompt: str | None = None) -> dict:
    """A row plus its chat prompt (the task's system prompt, or data.system_prompt, and its user turn)."""
    return {**row, "prompt": task.prompt(row, system_prompt)}


def rows_from_source(source: Source, split: str) -> list[dict]:
    """The rows of a task's table: question and gold (read in the source's answer format), other columns kept."""
    path, question_col, answer_col = source.path, source.question_column, source.answer_column
    if not path:
        raise UserError(f"{source.field}: names no file, folder or hub dataset")
    raw = read_table(path, split=split, field=source.field)
    if not raw:
        raise UserError(f"data: {path} is empty")
    for col in (question_col, answer_col):
        if col not in raw[0]:
            flag = {"--dataset": "data.prompt_column" if col == question_col else "data.answer_column"}.get(
                source.field, source.field)
            raise UserError(f"{flag}: column {col!r} not in {path} (columns: {', '.join(map(str, raw[0]))})")
    rows = []
    for i, item in enumerate(raw):
        question, answer = item.get(question_col), item.get(answer_col)
        if not isinstance(question, str) or not question.strip():
            raise UserError(f"data: {path} row {i + 1}: column {question_col!r} must be non-empty text, got {question!r:.60}")
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise UserError(f"data: {path} row {i + 1}: column {answer_col!r} must be text or a number, got {answer!r:.60}")
        gold = extract_gold(str(answer), source.answer_format)
        if gold is None:
            raise UserError(f"data: {path} row {i + 1}: no '#### <number>' in column {answer_col!r}")
        extra = {k: v for k, v in item.items() if k not in (question_col, answer_col, "prompt")}
        solution = worked_solution(str(answer), source.answer_format)
        if solution and not extra.get("solution"):
            extra["solution"] = solution
        rows.append({**extra, "question": question, "answer": gold})
    return rows


def extract_gold(answer: str, answer_format: str) -> str | None:
    """The gold answer: as is (plain), or the number after '####' (gsm8k)."""
    if answer_format == "gsm8k":
        match = _GSM8K_GOLD.search(answer)
        return match.group(1).replace(",", "") if match else None
    return answer.strip()


def worked_solution(answer: str, answer_format: str) -> str | None:
    """The worked solution in an answer: for gsm8k the rationale before '####', its calculator annotations
    (`<<48/2=24>>`) removed, one step a line; None for a plain answer, which is only the gold."""
    if answer_format != "gsm8k":
        return None
    rationale = _GSM8K_ANNOTATION.sub("", answer.split("####", 1)[0])
    return "\n".join(line.strip() for line in rationale.splitlines() if line.strip()) or None


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
    if not is_hub_id(source):
        raise UserError(f"{field}: file not found: {source}")
    return _read_hub(source, split, field)


def is_hub_id(source: str) -> bool:
    """True when `source` names a hub dataset: nothing here by that name, and not written like a file path."""
    source = os.path.expanduser(source)
    return not (os.path.exists(source) or source.endswith((".jsonl", ".json", ".csv", ".parquet"))
                or source.startswith((".", "/", "~")))


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


# --- prompt length: what model.max_seq_length leaves for the prompt -------------------------

PROMPT_CHUNK = 512  # prompts rendered and tokenized per call (bounds memory on large datasets)


def prompt_budget(config: Config) -> int:
    """Prompt tokens a run allows: model.max_seq_length - grpo.max_completion_length.

    A prompt within it plus a completion within max_completion_length never exceeds max_seq_length,
    which is what the memory plan assumes; `check_prompt_lengths` holds every prompt to it.
    """
    return config.model.max_seq_length - config.grpo.max_completion_length


def hub_source(config: Config) -> str | None:
    """The hub dataset id a config's rows would be downloaded from, or None when they are generated or
    read from this machine (what `plan` checks before it measures prompts without a network)."""
    task = task_for(config)
    source = task.source(config.data).path if task.source is not None else None
    return source if isinstance(source, str) and is_hub_id(source) else None


def prompt_lengths(tokenizer, prompts: list[list[dict]], chat_template_kwargs: dict | None = None,
                   tools: list | None = None) -> list[int]:
    """Tokens of each chat prompt as TRL feeds it to the model: the chat template with the generation prompt
    (and a tool task's tool schemas)."""
    lengths: list[int] = []
    for start in range(0, len(prompts), PROMPT_CHUNK):
        texts = tokenizer.apply_chat_template(prompts[start:start + PROMPT_CHUNK], tools=tools or None, tokenize=False,
                                              add_generation_prompt=True, **(chat_template_kwargs or {}))
        lengths += [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    return lengths


def check_prompt_lengths(config: Config, tokenizer, train: list[dict], held_out: list[dict]) -> dict:
    """Refuse a run whose longest chat-templated prompt exceeds `prompt_budget` (one UserError line on
    model.max_seq_length, naming the prompt and the max_seq_length it needs); else its measurements.

    Prompts are measured with the run's tokenizer, grpo.trl's chat_template_kwargs and the task's tools,
    as TRL renders them. Returns {"prompts", "longest", "budget"}.
    """
    rows = [("train", i, row) for i, row in enumerate(train, 1)] + [("held-out", i, row) for i, row in enumerate(held_out, 1)]
    budget = prompt_budget(config)
    if not rows:
        return {"prompts": 0, "longest": 0, "budget": budget}
    kwargs = (config.grpo.trl or {}).get("chat_template_kwargs")
    lengths = prompt_lengths(tokenizer, [row["prompt"] for _, _, row in rows], kwargs if isinstance(kwargs, dict) else None,
                             task_for(config).tools)
    longest = max(range(len(rows)), key=lengths.__getitem__)
    if lengths[longest] > budget:
        part, number, row = rows[longest]
        text = " ".join(str(row.get("question") or row["prompt"][-1]["content"]).split())
        quoted = text if len(text) <= 40 else text[:40] + "..."
        over = sum(length > budget for length in lengths)
        g = config.grpo
        raise UserError(
            f"model.max_seq_length: the longest prompt is {lengths[longest]} tokens ({part} prompt {number}: "
            f"\"{quoted}\"; {over} of {len(rows)} prompts over), more than max_seq_length "
            f"{config.model.max_seq_length} - grpo.max_completion_length {g.max_completion_length} = {budget}; "
            f"raise --max-seq-length to at least {lengths[longest] + g.max_completion_length} or shorten the prompts")
    return {"prompts": len(rows), "longest": lengths[longest], "budget": budget}
