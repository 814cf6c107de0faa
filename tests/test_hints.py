"""grpo.hints (local_grpo/train/hints.py): the tasks' worked solutions, the hint a prompt whose group all
failed is shown, the refusal for a task without solutions, and a real two-step run that hints."""

from __future__ import annotations

import copy
import re

import pytest
from conftest import make_tiny_config

from local_grpo import data, tasks, train
from local_grpo.config import Config
from local_grpo.errors import UserError
from local_grpo.rundir import RunDir
from local_grpo.train.hints import HINT_PREFIX, HINT_WHEN, hint_text, longest_prompts, with_hints
from local_grpo.train.prompt_stats import PromptStats


def task_rows(task: str, n: int = 40) -> list[dict]:
    """Training rows of a built-in task as `data.load_examples` builds them (prompt included)."""
    config = Config()
    config.data.task, config.data.num_train, config.data.num_heldout = task, n, 1
    return data.load_examples(config)[0]


def stats_after(rows: list[dict], successes: dict[int, int]) -> PromptStats:
    """PromptStats after one scored batch: row index -> successes in its group of 4."""
    stats = PromptStats(len(rows))
    stats(1, [{"row": row, "success": int(i < wins)} for row, wins in successes.items() for i in range(4)])
    return stats


def numbers(text: str) -> set[str]:
    return set(re.findall(r"\d+", text.replace(",", "")))


# --- the solutions ------------------------------------------------------------------------------

def test_tasks_with_solutions_give_every_row_one():
    """A task that says it has solutions (Task.solutions) gives each row a non-empty `solution`; one that does not, none."""
    for name in tasks.builtin_names():
        task = tasks.get_task(name)
        rows = task_rows(name, 20)
        if task.solutions:
            assert all(isinstance(r.get("solution"), str) and r["solution"].strip() for r in rows), name
        else:
            assert not any(r.get("solution") for r in rows), name


def test_gsm8k_solution_is_the_rationale_and_the_gold_stays_the_number():
    raw = data.read_table(tasks.get_task("gsm8k").source(Config().data).path)[0]
    row = data.rows_from_source(tasks.get_task("gsm8k").source(Config().data), "train")[0]
    assert row["answer"] == "72" and raw["answer"].endswith("#### 72")
    assert row["solution"] == ("Natalia sold 48/2 = 24 clips in May.\n"
                               "Natalia sold 48+24 = 72 clips altogether in April and May.")
    for row in task_rows("gsm8k", 200):
        assert "####" not in row["solution"] and "<<" not in row["solution"]
        assert re.fullmatch(r"-?\d+(\.\d+)?", row["answer"])


def test_word_problem_solutions_work_the_arithmetic_to_the_gold():
    for row in task_rows("word_problems", 200):
        steps = row["solution"].splitlines()
        assert steps[-1].endswith(f"{row['expression']} = {row['answer']}."), row["solution"]
        for step in steps:  # every arithmetic claim a step makes is true
            for left, right in re.findall(r"(\d+ [-+*] \d+(?: [-+*] \d+)*) = (\d+)", step):
                assert eval(left) == int(right), step  # noqa: S307 - digits and + - * only, matched above


# --- the hint -----------------------------------------------------------------------------------

@pytest.mark.parametrize("task", ["gsm8k", "word_problems"])
def test_hints_the_rows_likely_to_fail_and_never_the_answer_line(task):
    rows = task_rows(task)
    before = copy.deepcopy(rows)
    batch = [{**row, "row": i} for i, row in enumerate(rows)]
    failed, succeeded = set(range(0, 40, 3)), set(range(1, 40, 3))  # the rest were never scored
    stats = stats_after(rows, {**{i: 0 for i in failed}, **{i: 3 for i in succeeded}})
    batch_before = copy.deepcopy(batch)
    # prior mean 0.05 (no p_ref): a group of 4 fails whole with chance 0.88 when unseen, more after 0 of 4,
    # 0.11 after 3 of 4
    likely = {i for i in range(40) if i not in succeeded}
    assert all(stats.chance_all_fail(i, 4) >= HINT_WHEN for i in likely)
    assert all(stats.chance_all_fail(i, 4) < 0.2 for i in succeeded)

    hinted, count = with_hints(batch, stats, 4)

    assert count == len(likely)
    assert batch == batch_before and rows == before  # nothing changed in place
    for i, (original, out) in enumerate(zip(batch, hinted)):
        if i not in likely:
            assert out is original
            continue
        assert out["prompt"][:-1] == original["prompt"][:-1]  # the system prompt as it was
        user = out["prompt"][-1]["content"]
        assert user.startswith(original["prompt"][-1]["content"] + HINT_PREFIX)
        hint = user[len(original["prompt"][-1]["content"] + HINT_PREFIX):]
        steps = original["solution"].splitlines()
        assert hint and original["solution"].replace("\n", " ").startswith(hint)
        assert "####" not in hint
        if len(steps) > 1:
            assert steps[-1] not in hint  # never the step that reaches the answer
        assert {k: v for k, v in out.items() if k != "prompt"} == {k: v for k, v in original.items() if k != "prompt"}


def test_word_problem_hints_never_state_the_gold():
    rows = task_rows("word_problems", 300)
    for row in rows:
        hint = hint_text(row["solution"])
        assert hint
        if row["answer"] not in numbers(row["question"]):
            assert row["answer"] not in numbers(hint), (row["solution"], hint)


def test_a_prompt_repeated_for_its_group_counts_once_and_rows_without_solution_stay():
    rows = task_rows("word_problems", 4)
    batch = [{**row, "row": i} for i, row in enumerate(rows) for _ in range(4)]  # TRL: each prompt num_generations times
    batch[12:16] = [{**r, "solution": ""} for r in batch[12:16]]  # row 3: nothing to hint from
    hinted, count = with_hints(batch, stats_after(rows, {0: 0, 1: 3, 3: 0}), 4)  # row 2 never scored
    assert count == 2
    assert [HINT_PREFIX.strip() in r["prompt"][-1]["content"] for r in hinted] == [True] * 4 + [False] * 4 + \
        [True] * 4 + [False] * 4


def test_longest_prompts_hint_every_row_with_a_solution():
    rows = task_rows("word_problems", 5)
    longest = longest_prompts(rows)
    assert all(HINT_PREFIX in r["prompt"][-1]["content"] for r in longest)
    assert all(HINT_PREFIX not in r["prompt"][-1]["content"] for r in rows)


# --- the refusal and a real run -----------------------------------------------------------------

def test_hints_on_a_task_without_solutions_is_refused_before_the_model_loads(tmp_path):
    config = make_tiny_config(str(tmp_path / "no-such-model"), str(tmp_path / "run"))  # loading it would fail
    config.data.task, config.grpo.hints = "countdown", True
    with pytest.raises(UserError) as error:
        train.train(config, progress=False)
    message = str(error.value)
    assert message.startswith("grpo.hints:") and "'countdown'" in message and "\n" not in message
    assert "word_problems" in message and not (tmp_path / "run").exists()


def test_a_two_step_run_hints_the_prompts_likely_to_fail(tiny_model_dir, tmp_path, one_torch_thread):
    config = make_tiny_config(tiny_model_dir, str(tmp_path / "run"), steps=2, save_steps=2)
    config.data.task, config.grpo.hints = "word_problems", True
    config.model.max_seq_length = 512  # the hinted prompt is measured too, and the tiny tokenizer is wordy
    config.data.num_train = 2  # 8 completions a step of 4 each: both prompts every step
    config.grpo.p_ref_samples = 0  # no p_ref: the prior's mean is PRIOR_MEAN
    train.train(config, progress=False)

    run = RunDir.open(config.output_dir)
    records = run.completions()
    first = [r for r in records if r["step"] == 1]
    second = [r for r in records if r["step"] == 2]
    assert first and second and all("row" in r for r in records)
    size = config.grpo.num_generations
    # step 1: unseen prompts at the prior's mean 0.05 fail as a group of 4 with chance 0.88: both hinted
    assert PromptStats(2).chance_all_fail(0, size) >= HINT_WHEN
    assert all("Hint: the solution begins:" in r["prompt"] for r in first)
    # step 2: hinted again exactly where step 1's outcome leaves a whole-group failure likely
    after = PromptStats(2)
    after(1, first)
    likely = {row for row in {r["row"] for r in second} if after.chance_all_fail(row, size) >= HINT_WHEN}
    for r in second:
        assert ("Hint: the solution begins:" in r["prompt"]) == (r["row"] in likely)
    hinted = [m.get("hints/prompts_hinted") for m in run.metrics()]
    assert hinted == [float(len({r["row"] for r in first})), float(len(likely))]
