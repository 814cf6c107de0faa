"""Tasks as one object (local_grpo/tasks): names and task files, the one reward-set builder and success rule,
and audit verifiers that share no code with the rubric."""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import os
import subprocess
import sys

import pytest

import rewards
from local_grpo import evaluate, tasks
from local_grpo.config import Config, RewardSpec, from_dict
from local_grpo.errors import UserError
from local_grpo.tasks import mathverify

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "custom_task.py")
TASKS_DIR = os.path.join(REPO, "local_grpo", "tasks")


def run_cli(args, cwd):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": REPO}
    return subprocess.run([sys.executable, "-m", "local_grpo.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def every_task() -> dict[str, tasks.Task]:
    return {**tasks.builtin_tasks(), "example": tasks.get_task(f"{EXAMPLE}:task")}


# --- names and files ----------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["train", "--task", "sudoku9"],
    ["eval", "--model", "embedded", "--task", "examples/no_such_file.py:task"],
    ["rewards", "check", "--task", "examples/custom_task.py:make_examples"],
])
def test_an_unknown_task_is_one_line_naming_the_known_tasks_and_exit_2(args, tmp_path):
    result = run_cli(args, cwd=REPO)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("local-grpo: error: data.task: "), result.stderr
    assert ", ".join(tasks.builtin_names()) in lines[0] and "path/to/file.py:NAME" in lines[0]


def test_a_task_file_is_named_path_colon_object_and_checked(tmp_path):
    assert tasks.get_task(f"{EXAMPLE}:task").name == "reverse"
    assert tasks.get_task(EXAMPLE).name == "reverse"  # `task` is the object a bare path names
    broken = tmp_path / "broken.py"
    broken.write_text("x = 1\nraise ValueError('no data here')\n")
    with pytest.raises(UserError, match=r"^data.task: .*broken.py:2: ValueError: no data here$"):
        tasks.get_task(f"{broken}:task")
    empty = tmp_path / "empty.py"
    empty.write_text("from local_grpo.tasks import Task\nvalue = 3\n")
    with pytest.raises(UserError, match=r"defines no 'task' \(Task objects in it: none\)"):
        tasks.get_task(str(empty))
    with pytest.raises(UserError, match=r"empty.py:value is a int, not a local_grpo.tasks.Task"):
        tasks.get_task(f"{empty}:value")


def test_old_run_configs_load_with_the_defaults_they_had():
    """config.yaml of earlier runs (data.task: NAME, rewards filled) still loads; defaults are unchanged."""
    expected = {"arithmetic": ("correct_numeric", [("correct_numeric", 1.0), ("format_soft", 0.2)]),
                "gsm8k": ("correct_numeric", [("correct_numeric", 1.0), ("format_soft", 0.2)]),
                "countdown": ("countdown", [("countdown", 1.0), ("format_soft", 0.2)])}
    for name, (success, specs) in expected.items():
        config = tasks.fill_defaults(from_dict({"data": {"task": name}, "output_dir": "unused"}))
        assert config.success_reward == success and [(s.name, s.weight) for s in config.rewards] == specs
    config = tasks.fill_defaults(from_dict({"data": {"dataset": "x.jsonl"}}))
    assert config.success_reward == "correct_numeric" and config.output_dir.startswith(os.path.join("runs", "dataset-"))
    with pytest.raises(UserError, match="^data.task: unknown task 'poetry'"):
        tasks.fill_defaults(from_dict({"data": {"task": "poetry"}}))


# --- one reward set, one success rule ----------------------------------------------------------------

def two_format_softs() -> Config:
    config = Config()
    config.rewards = [RewardSpec("format_soft", 1.0), RewardSpec("format_soft", 0.5, {"tags": ["think", "answer"]})]
    return tasks.fill_defaults(config)


def test_two_specs_of_one_reward_keep_unique_keys_in_train_and_eval():
    from local_grpo.train.run import reward_recorder

    config = two_format_softs()
    recorder = reward_recorder(config)
    assert recorder.names == ["format_soft", "format_soft#2"] and recorder.weights == [1.0, 0.5]
    reward_set = evaluate.reward_set(config)
    assert reward_set.keys == recorder.names and reward_set.success_key == "correct_numeric"
    rows = [{"prompt": [{"role": "user", "content": "What is 2 + 2?"}], "question": "What is 2 + 2?", "answer": "4"}]
    scores = evaluate.score(reward_set.scored, rows, ["<think>2 + 2</think><answer>4</answer>"])
    assert set(scores) == {"format_soft", "format_soft#2", "correct_numeric"}
    assert scores["format_soft"] != scores["format_soft#2"]  # eval no longer lets one overwrite the other


def test_train_and_eval_judge_success_by_the_same_rule():
    """A scaled success reward: 0.999 x its maximum, in the recorder (train), eval's set and the check."""
    from local_grpo import reward_check
    from local_grpo.train.recorder import RewardRecorder

    scaled = rewards.get("correct_numeric", scale=2.0)
    scores = [2.0, 1.999, 1.998, 1.0, None, 0.0]
    train_success = RewardRecorder(None, [scaled], [1.0], scaled).successes(scores)
    eval_success = [int(tasks.RewardSet([scaled], [1.0], scaled).is_success(s)) for s in scores]
    assert train_success == eval_success == [1, 1, 1, 0, 0, 0]
    samples = [reward_check.ScoredSample(0, "", {"correct_numeric": s}) for s in scores]
    assert reward_check.pass_rates(samples, "correct_numeric", rewards.reward_max(scaled)) == [0.5]
    plain = rewards.get("correct_numeric")
    assert RewardRecorder(None, [plain], [1.0], plain).successes([1.0, 0.9985]) == [1, 0]


# --- verifiers ---------------------------------------------------------------------------------------

def imports_rewards(path: str) -> bool:
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
        if any(n == "rewards" or n.startswith("rewards.") for n in names):
            return True
    return False


@pytest.mark.parametrize("name", sorted(every_task()))
def test_no_task_verifier_is_one_of_its_rubric_rewards(name):
    task = every_task()[name]
    verifier = task.verifier.function
    module = inspect.getmodule(verifier)
    assert not module.__name__.startswith("rewards"), module.__name__
    assert not imports_rewards(module.__file__), f"{module.__file__} imports the reward library"
    reward_set = tasks.build_reward_set(task.rubric.specs(), task.rubric.success_reward())
    for reward in reward_set.scored:
        compute = reward._compute
        assert verifier is not reward and verifier is not compute
        assert getattr(compute, "__module__", "").startswith("rewards"), compute  # built-in or a user-file runner
        if hasattr(compute, "path"):  # a user reward file: another function than the verifier
            assert (compute.path, compute.function) != (os.path.abspath(module.__file__), verifier.__name__)


def test_the_verifier_side_of_local_grpo_tasks_never_imports_the_reward_library():
    building = {"reward_set.py", "tools.py"}  # build the rubric's rewards, run the tools in the reward sandbox; neither judges
    for folder, _, files in os.walk(TASKS_DIR):
        for file in files:
            if file.endswith(".py") and file not in building:
                assert not imports_rewards(os.path.join(folder, file)), file


def test_math_verifier_reads_the_stated_answer_with_math_verify():
    verify = tasks.get_task("gsm8k").verifier
    records = [{"prompt": "?", "answer": gold, "completion": text} for gold, text in [
        ("18", "She earns 9 * 2 = 18 dollars.\nAnswer: 18"), ("18", "Answer: $18"), ("0.5", "Answer: \\frac{1}{2}"),
        ("18", "Answer: 19"), ("18", "The answer is not 18."), ("Paris", "Answer: Paris")]]
    assert verify(records) == [True, True, True, False, False, None]


def test_math_verifier_child_has_its_own_deadline():
    child = mathverify.MathVerifyChild(item_timeout_s=1e-4)
    child._running()  # started (math-verify imported) before the deadline is tiny
    assert child.verdicts([("42", "42")]) == [None] and child.timeouts == 1  # overran: killed, cannot judge
    child.item_timeout_s = mathverify.ITEM_TIMEOUT_S
    assert child.verdicts([("42", "42"), ("42", "43")]) == [True, False]  # a fresh child answers
    child.kill()


# --- a user task file, end to end -----------------------------------------------------------------------

def test_the_example_task_trains_one_step_and_evaluates(tiny_model_dir, tmp_path, one_torch_thread):
    from conftest import make_tiny_config

    from local_grpo import rundir, train

    config = make_tiny_config(tiny_model_dir, str(tmp_path / "run"), steps=1, max_completion_length=8)
    config.data.task = f"{EXAMPLE}:task"
    config.grpo.p_ref_prompts = 0
    config.grpo.audit = True
    summary = train.train(config, progress=False)
    run = rundir.RunDir(summary["run_dir"])
    assert summary["steps"] == 1
    saved = run.read_json(rundir.REWARD_CODE_MANIFEST)
    digest = hashlib.sha256(open(EXAMPLE, "rb").read()).hexdigest()
    kept = [r for r in saved if r["spec"] == f"{EXAMPLE}:task"]
    assert kept and kept[0]["sha256"] == digest and os.path.isfile(run.file(kept[0]["file"]))
    records = [json.loads(line) for line in open(run.file(rundir.COMPLETIONS), encoding="utf-8")]
    assert set(records[0]["rewards"]) == {"reversal_correct", "one_answer_line"}
    assert "Reverse the letters" in records[0]["prompt"]

    saved_config = tasks.fill_defaults(from_dict(json.loads(json.dumps(rundir_config(run)))))
    result = evaluate.run_eval(saved_config, run.adapter_dir, evaluate.EvalSettings(samples=2, k=2, max_new_tokens=8),
                               progress=False)
    metrics = result["metrics"]
    assert metrics["n_prompts"] == 4 and 0.0 <= metrics["pass@1_greedy"] <= 1.0
    assert {"rewards/reversal_correct", "rewards/one_answer_line"} <= set(metrics)


def rundir_config(run) -> dict:
    import yaml

    from local_grpo import rundir

    with open(run.file(rundir.CONFIG), encoding="utf-8") as fh:
        return yaml.safe_load(fh)
