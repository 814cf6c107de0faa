"""The reward designer's work: sample sets, scoring user reward code safely, and what the scores mean.

User code is never executed in the app's process: it is parsed here (ast) for syntax errors and
function names, written to a scratch file, and each function is run through the reward library
(`rewards.get("file.py:function", timeout_s=..., memory_mb=...)`), i.e. in a child process with a
time limit (killed when it passes) and an address-space limit. Faults come back as events.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import statistics
import tempfile
from dataclasses import dataclass, field

import pandas as pd

from local_grpo import rundir
from local_grpo.errors import UserError
from local_grpo.rundir import read_jsonl

DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MEMORY_MB = 1024
MAX_SAMPLES = 512
HISTOGRAM_BINS = 10

TEMPLATE = '''"""My rewards: each public function is one reward, scored on every completion (TRL's signature)."""
import re


def _text(completion):
    """Completions are strings, or chat messages [{"role": "assistant", "content": ...}] in training."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion)
    return str(completion)


def ends_with_answer(completions, **kwargs):
    """1.0 when the last line is "Answer: <number>", else 0.0."""
    pattern = re.compile(r"Answer:\\s*-?\\d+(\\.\\d+)?\\s*$")
    return [1.0 if pattern.search(_text(c).strip()) else 0.0 for c in completions]


def matches_gold(completions, answer, **kwargs):
    """1.0 when the gold answer appears after "Answer:"; None (cannot judge) without a gold answer."""
    scores = []
    for completion, gold in zip(completions, answer):
        if gold is None:
            scores.append(None)
            continue
        found = re.findall(r"Answer:\\s*(-?[\\d.,]+)", _text(completion))
        scores.append(1.0 if found and found[-1].rstrip(".").replace(",", "") == str(gold).strip() else 0.0)
    return scores
'''


# --- code checks --------------------------------------------------------------------------

class CodeProblem(Exception):
    """The code cannot be scored at all (syntax error with its line, or no function); one line."""


def reward_functions(code: str) -> list[str]:
    """Public top-level function names of the code; CodeProblem with the line for a syntax error."""
    try:
        tree = ast.parse(code or "", filename="<editor>")
    except SyntaxError as error:
        where = f"line {error.lineno}" + (f", column {error.offset}" if error.offset else "")
        text = (error.text or "").rstrip("\n")
        raise CodeProblem(f"syntax error at {where}: {error.msg}" + (f" — `{text.strip()}`" if text.strip() else "")) from None
    except ValueError as error:  # null bytes
        raise CodeProblem(f"syntax error at line 1: {error}") from None
    names = [node.name for node in tree.body
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_")]
    if not names:
        raise CodeProblem("no reward function: define at least one top-level `def name(completions, **kwargs)`")
    return names


def builtin_template(name: str) -> str:
    """Editable code for a built-in reward: its factory (renamed private) plus a reward function calling it."""
    import rewards
    from rewards import registry

    factory = registry.builtin_factory(name)  # RewardSpecError for an unknown name
    source = rewards.get(name).source or ""
    module = factory.__module__
    private = f"_{name}_factory"
    source = re.sub(rf"^def {re.escape(name)}\(", f"def {private}(", source, count=1, flags=re.M)
    summary = rewards.describe(name)["summary"]
    return (
        f'"""A copy of the built-in reward `{name}` ({module}) to edit: {summary}"""\n'
        f"import {module} as _builtin_module\n\n"
        f"globals().update({{k: v for k, v in vars(_builtin_module).items() if not k.startswith('__')}})\n\n\n"
        f"{source.rstrip()}\n\n\n"
        f"_reward = {private}()  # change the parameters here, or edit the code above\n\n\n"
        f"def my_{name}(completions, **kwargs):\n"
        f'    """{summary}"""\n'
        f"    return _reward(completions, **kwargs)\n"
    )


# --- sample sets --------------------------------------------------------------------------

def samples_from_run(run_path: str, steps: int = 2, limit: int = 128) -> list[dict]:
    """The completions of a run's last `steps` logged steps (at most `limit`), with their groups."""
    records = read_jsonl(os.path.join(run_path, rundir.COMPLETIONS))
    if not records:
        raise UserError(f"run: {os.path.basename(run_path)} has no completions.jsonl yet")
    last_steps = sorted({r.get("step", 0) for r in records})[-max(1, steps):]
    chosen = [r for r in records if r.get("step", 0) in last_steps][-limit:]
    return [{"prompt": r.get("prompt", ""), "answer": r.get("answer"), "completion": r.get("completion", ""),
             "group": f"step {r.get('step', 0)}: {str(r.get('prompt', ''))[:60]}"} for r in chosen]


def parse_samples(text: str) -> list[dict]:
    """Samples from the editor box: JSONL objects ({completion, prompt?, answer?, group?}), or plain
    text completions separated by lines of `---`."""
    text = (text or "").strip()
    if not text:
        raise UserError("samples: none yet (load them from a run, generate them, or paste completions)")
    if text.startswith("{"):
        samples = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as error:
                raise UserError(f"samples: line {number} is not valid JSON ({error.msg})") from None
            if not isinstance(obj, dict) or "completion" not in obj:
                raise UserError(f"samples: line {number} needs a \"completion\" field")
            samples.append({"prompt": str(obj.get("prompt") or ""), "answer": obj.get("answer"),
                            "completion": obj["completion"], "group": str(obj.get("group") or obj.get("prompt") or "")})
    else:
        blocks = [b.strip("\n") for b in re.split(r"^\s*---\s*$", text, flags=re.M)]
        samples = [{"prompt": "", "answer": None, "completion": b, "group": ""} for b in blocks if b.strip()]
    if len(samples) > MAX_SAMPLES:
        raise UserError(f"samples: {len(samples)} given, at most {MAX_SAMPLES}")
    return samples


def samples_to_text(samples: list[dict]) -> str:
    """Samples as JSONL for the editor box."""
    return "\n".join(json.dumps(s, ensure_ascii=False) for s in samples)


# --- scoring ------------------------------------------------------------------------------

@dataclass
class ScoreResult:
    """Scores of every reward function on every sample, and what went wrong."""

    functions: list[str] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)
    scores: dict[str, list] = field(default_factory=dict)  # function -> one score (or None) per sample
    faults: list[dict] = field(default_factory=list)       # {reward, kind, message, count}
    problem: str | None = None                             # the code could not be scored at all

    @property
    def totals(self) -> list[float]:
        return [sum(s for s in (self.scores[f][i] for f in self.functions) if s is not None)
                for i in range(len(self.samples))]


def score_code(code: str, samples: list[dict], timeout_s: float = DEFAULT_TIMEOUT_S,
               memory_mb: int = DEFAULT_MEMORY_MB, chat: bool = True) -> ScoreResult:
    """Score every public function of `code` on the samples, each in a child process with limits.

    `chat=True` passes completions as chat messages, as the trainer does for chat prompts.
    """
    import rewards

    result = ScoreResult(samples=samples)
    try:
        result.functions = reward_functions(code)
    except CodeProblem as problem:
        result.problem = str(problem)
        return result
    if not samples:
        result.problem = "no samples to score"
        return result
    completions = [[{"role": "assistant", "content": str(s["completion"])}] if chat else str(s["completion"])
                   for s in samples]
    kwargs = {
        "prompts": [[{"role": "user", "content": s["prompt"]}] if chat else s["prompt"] for s in samples],
        "question": [s["prompt"] for s in samples],
        "answer": [s.get("answer") for s in samples],
    }
    scratch = tempfile.mkdtemp(prefix="studio-reward-")
    path = os.path.join(scratch, "editor_rewards.py")
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(code)
        for name in result.functions:
            reward = rewards.get(f"{path}:{name}", timeout_s=float(timeout_s), memory_mb=int(memory_mb))
            try:
                result.scores[name] = reward(completions, **kwargs)
                for event in reward.drain_events():
                    result.faults.append({"reward": name, "kind": event.get("kind") or event.get("type"),
                                          "message": event.get("message", "").replace(path, "editor"),
                                          "count": event.get("count")})
            finally:
                _stop_child(reward)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return result


def _stop_child(reward) -> None:
    """Stop the child process behind a user-file reward now rather than at garbage collection."""
    child = getattr(getattr(reward, "_compute", None), "child", None)
    if child is not None:
        child.kill()


# --- what the scores mean -----------------------------------------------------------------

def zero_std_groups(totals: list[float], groups: list[str]) -> tuple[int, int]:
    """(groups whose totals are all equal, groups with 2+ samples). Such groups give GRPO no signal."""
    by_group: dict[str, list[float]] = {}
    for total, group in zip(totals, groups):
        if group:
            by_group.setdefault(group, []).append(total)
    sized = [values for values in by_group.values() if len(values) >= 2]
    flat = sum(1 for values in sized if max(values) - min(values) < 1e-9)
    return flat, len(sized)


def results_table(result: ScoreResult) -> pd.DataFrame:
    """completion × reward: prompt, answer, completion, one column per function ("fault" for None), total."""
    rows = []
    totals = result.totals
    for i, sample in enumerate(result.samples if result.scores else []):
        row = {"#": i + 1, "prompt": str(sample.get("prompt", ""))[:120],
               "answer": "" if sample.get("answer") is None else str(sample["answer"]),
               "completion": str(sample["completion"])}
        for name in result.functions:
            score = result.scores.get(name, [None] * len(result.samples))[i]
            row[name] = "fault" if score is None else round(score, 4)
        row["total"] = round(totals[i], 4)
        rows.append(row)
    return pd.DataFrame(rows, columns=["#", "prompt", "answer", "completion", *result.functions, "total"])


def histogram_frame(result: ScoreResult, bins: int = HISTOGRAM_BINS) -> pd.DataFrame:
    """Counts of each function's scores (and the total) in shared bins: columns bin, count, reward."""
    series = {name: [s for s in result.scores.get(name, []) if s is not None] for name in result.functions}
    if result.scores:
        series["total"] = result.totals
    values = [v for vs in series.values() for v in vs]
    if not values:
        return pd.DataFrame({"bin": pd.Series(dtype="str"), "count": pd.Series(dtype="int64"),
                             "reward": pd.Series(dtype="str")})
    low, high = min(values), max(values)
    width = (high - low) / bins if high > low else 1.0
    count_bins = bins if high > low else 1
    labels = [f"{low + i * width:.2f}" for i in range(count_bins)]
    rows = []
    for name, scores in series.items():
        counts = [0] * count_bins
        for v in scores:
            counts[min(count_bins - 1, int((v - low) / width))] += 1
        rows.extend({"bin": label, "count": c, "reward": name} for label, c in zip(labels, counts))
    return pd.DataFrame(rows, columns=["bin", "count", "reward"])


def summary_markdown(result: ScoreResult) -> str:
    """Per-function mean / spread, totals, zero-std groups, and every fault, as markdown."""
    if result.problem:
        return f"### ❌ Cannot score\n{result.problem}"
    lines = [f"Scored **{len(result.samples)}** completions with **{len(result.functions)}** reward function(s)."]
    for name in result.functions:
        scores = result.scores.get(name, [])
        ok = [s for s in scores if s is not None]
        if ok:
            spread = statistics.pstdev(ok) if len(ok) > 1 else 0.0
            lines.append(f"- `{name}`: mean {statistics.fmean(ok):.3f}, std {spread:.3f}, "
                         f"{len(scores) - len(ok)} fault/None")
        else:
            lines.append(f"- `{name}`: no scores (all faults or None)")
    flat, groups = zero_std_groups(result.totals, [s.get("group", "") for s in result.samples])
    if groups:
        lines.append(f"\n**Zero-std groups: {flat} of {groups} ({flat / groups:.0%})** — groups where every "
                     "completion gets the same total give GRPO no learning signal.")
    else:
        lines.append("\nZero-std groups: no groups of 2+ completions of one prompt in these samples.")
    if result.faults:
        lines.append("\n### ❌ Faults")
        for fault in result.faults:
            lines.append(f"- **{fault['reward']}** — {fault['kind']}: {fault['message']}")
    return "\n".join(lines)


# --- saving -------------------------------------------------------------------------------

def save_reward_file(code: str, rewards_dir: str, file_name: str) -> tuple[str, list[str]]:
    """Write the code to rewards_dir/<file_name>.py; returns (path, ["path.py:function", ...])."""
    stem = (file_name or "").strip().removesuffix(".py")
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_\-]{0,63}", stem):
        raise UserError(f"file name: {file_name!r} must be letters, digits, _ or - (e.g. my_rewards)")
    try:
        names = reward_functions(code)
    except CodeProblem as problem:
        raise UserError(f"cannot save: {problem}") from None
    os.makedirs(rewards_dir, exist_ok=True)
    path = os.path.join(rewards_dir, stem + ".py")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(code if code.endswith("\n") else code + "\n")
    os.replace(tmp, path)
    return path, [f"{path}:{name}" for name in names]


def saved_reward_specs(rewards_dir: str) -> list[str]:
    """`path.py:function` for every public function of every saved file (parsed, not run)."""
    specs = []
    if not os.path.isdir(rewards_dir):
        return specs
    for entry in sorted(os.listdir(rewards_dir)):
        if not entry.endswith(".py"):
            continue
        path = os.path.join(rewards_dir, entry)
        try:
            with open(path, encoding="utf-8") as fh:
                names = reward_functions(fh.read())
        except (OSError, CodeProblem):
            continue
        specs.extend(f"{path}:{name}" for name in names)
    return specs


# --- comparing with a reference reward ----------------------------------------------------



def score_reference(spec: str, samples: list[dict], timeout_s: float = DEFAULT_TIMEOUT_S, chat: bool = True):
    """(scores, maximum) of a reference reward on the samples: a built-in name or a saved `path.py:function`.

    A saved file runs in a child process with the designer's limits, like the edited code.
    """
    import rewards
    from rewards import reward_max

    spec = (spec or "").strip()
    if not spec:
        raise UserError("reference: choose a built-in or saved reward to compare with")
    try:
        reward = (rewards.get(spec, timeout_s=float(timeout_s), memory_mb=DEFAULT_MEMORY_MB) if ".py:" in spec
                  else rewards.get(spec))
    except rewards.RewardSpecError as error:
        raise UserError(f"reference: {error}") from None
    completions = [[{"role": "assistant", "content": str(s["completion"])}] if chat else str(s["completion"])
                   for s in samples]
    try:
        scores = reward(completions, prompts=[[{"role": "user", "content": s["prompt"]}] if chat else s["prompt"]
                                              for s in samples],
                        question=[s["prompt"] for s in samples], answer=[s.get("answer") for s in samples])
    finally:
        _stop_child(reward)
    return scores, reward_max(reward)


def succeeds(score, maximum: float = 1.0) -> bool:
    """The success rule of training and eval (rewards.is_success: score >= 0.999 x the reward's maximum)."""
    import rewards

    return rewards.is_success(score, maximum)


def disagreements(result: ScoreResult, reference: str, reference_scores: list, reference_max: float = 1.0) -> dict:
    """Where each edited function and the reference disagree on success (score >= 0.999 x maximum; the
    edited functions' maximum is taken as 1).

    Returns {"counts": {function: {both, edited_only, reference_only, neither}}, "rows": [indices of samples
    where at least one function disagrees with the reference]}.
    """
    counts, differing = {}, []
    for name in result.functions:
        cells = {"both": 0, "edited_only": 0, "reference_only": 0, "neither": 0}
        for i, score in enumerate(result.scores.get(name, [])):
            edited, ref = succeeds(score), succeeds(reference_scores[i], reference_max)
            cells["both" if edited and ref else "edited_only" if edited else "reference_only" if ref else "neither"] += 1
            if edited != ref and i not in differing:
                differing.append(i)
        counts[name] = cells
    return {"reference": reference, "counts": counts, "rows": sorted(differing)}


def compare_table(result: ScoreResult, reference: str, reference_scores: list, found: dict) -> pd.DataFrame:
    """The disagreeing samples: prompt, answer, completion, each edited function's score, the reference's."""
    table = results_table(result)
    if table.empty:
        return table
    column = f"reference: {reference.rsplit(':', 1)[-1]}"
    table[column] = ["fault" if s is None else round(s, 4) for s in reference_scores]
    return table.iloc[found["rows"]].drop(columns="total").reset_index(drop=True)


def compare_markdown(result: ScoreResult, found: dict) -> str:
    """The 2x2 counts per edited function against the reference, and how many samples differ."""
    from rewards import SUCCESS_THRESHOLD

    if result.problem:
        return f"### ❌ Cannot compare\n{result.problem}"
    lines = [f"Compared with **{found['reference']}** on **{len(result.samples)}** completions "
             f"(success: score ≥ {SUCCESS_THRESHOLD} × the reward's maximum; 1 for the edited functions). "
             f"**{len(found['rows'])}** completions differ (listed below)."]
    for name, cells in found["counts"].items():
        lines.append(f"- `{name}`: both succeed {cells['both']}, only `{name}` {cells['edited_only']}, "
                     f"only the reference {cells['reference_only']}, neither {cells['neither']}")
    return "\n".join(lines)
