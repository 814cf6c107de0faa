"""The reward probe battery, the soundness of the built-in correctness rewards, and the training-time audit."""

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

import rewards
from rewards.probe import build_battery, format_table, probe, probe_source, solve_countdown

PROMPTS = ["What is 17 + 25?", "What is 47 + 38?", "What is 999 + 235?", "What is half of one?",
           "What is 3 times 0.75?", "What is 5 - 12?"]
ANSWERS = ["42", "85", "1234", "0.5", "2.25", "-7"]
COUNTDOWN_NUMS = [[3, 5, 7], [25, 49, 27], [2, 10, 6], [8, 4, 9]]
COUNTDOWN_TARGETS = [56, 47, 32, 41]
COUNTDOWN_PROMPTS = [f"Using the numbers {nums}, write an equation that equals {t}."
                     for nums, t in zip(COUNTDOWN_NUMS, COUNTDOWN_TARGETS)]
SOUND_NUMERIC = ["correct_exact", "correct_numeric", "correct_math", "gsm8k_strict"]
# gsm8k_flexible is verl's "last number anywhere" by definition; these are the hacks it falls for (documented).
GSM8K_FLEXIBLE_HACKS = {"empty_answer", "answer_in_reasoning_only", "several_answers", "negated",
                        "repeated_or_nested_tags", "padded_with_gold", "hidden_markup", "truncated"}
SLOPPY = '''
def contains_answer(completions, answer, **kwargs):
    return [1.0 if str(gold) in text else 0.0 for text, gold in zip(completions, answer)]
'''


@pytest.fixture(scope="module")
def numeric_report():
    reward_fns = [rewards.get(name) for name in [*SOUND_NUMERIC, "gsm8k_flexible"]]
    return probe(reward_fns, PROMPTS, ANSWERS)


def test_battery_has_twelve_wrong_and_six_right_kinds():
    items = build_battery(PROMPTS, ANSWERS)
    kinds = {(item["probe"], item["kind"]) for item in items}
    assert len({p for p, k in kinds if k == "wrong"}) >= 12
    assert len({p for p, k in kinds if k == "right"}) >= 6
    assert any("<answer>" in item["completion"] for item in items)
    assert any("Answer:" in item["completion"] for item in items)


@pytest.mark.parametrize("name", SOUND_NUMERIC)
def test_builtin_correctness_rewards_credit_no_wrong_probe(numeric_report, name):
    result = numeric_report["rewards"][name]
    hacks = {p: e["example"] for p, e in result["probes"].items() if e["kind"] == "wrong" and e["credited"]}
    assert result["false_positive_rate"] == 0.0, hacks


@pytest.mark.parametrize("name", ["correct_numeric", "correct_math"])
def test_numeric_and_math_rewards_credit_every_right_form(numeric_report, name):
    result = numeric_report["rewards"][name]
    misses = {p: e["example"] for p, e in result["probes"].items()
              if e["kind"] == "right" and e["credited"] + e["abstained"] < e["total"]}
    assert result["false_negative_rate"] == 0.0, misses


def test_structured_gold_family_is_in_the_numeric_battery():
    items = [item for item in build_battery(PROMPTS, ANSWERS) if item["family"] == "structured_gold"]
    probes = {item["probe"] for item in items}
    assert {"structured_last_number", "structured_other_number", "structured_altered"} <= probes
    assert {"structured_plain", "structured_bare_latex", "structured_equivalent"} <= probes
    assert any("\\begin{pmatrix}" in item["answer"] for item in items)
    assert any(item["completion"].endswith("\\boxed{42}.") for item in items if item["probe"] == "structured_last_number")


def test_correct_math_judges_every_structured_gold_and_numeric_rewards_abstain(numeric_report):
    math = numeric_report["rewards"]["correct_math"]["families"]["structured_gold"]
    assert math["abstained"] == 0 and math["false_positive_rate"] == 0.0 and math["false_negative_rate"] == 0.0
    for name in ("correct_numeric", "gsm8k_strict", "gsm8k_flexible"):
        family = numeric_report["rewards"][name]["families"]["structured_gold"]
        assert family["false_positive_rate"] == 0.0
        assert family["abstained"] > 0 and family["false_negative_rate"] == 0.0  # None: cannot judge a matrix


LAST_NUMBER = '''
import re

def last_number_match(completions, answer, **kwargs):
    """The bug the structured-gold family exists for: gold and completion reduced to their last numbers."""
    last = lambda text: (re.findall(r"-?\\d+(?:\\.\\d+)?", str(text)) or [None])[-1]
    return [1.0 if last(gold) is not None and last(gold) == last(text) else 0.0 for text, gold in zip(completions, answer)]
'''


def test_structured_gold_family_catches_the_last_number_reduction(tmp_path):
    path = tmp_path / "last_number.py"
    path.write_text(LAST_NUMBER)
    report = probe([rewards.get(f"{path}:last_number_match")], PROMPTS[:2], ANSWERS[:2])
    result = report["rewards"]["last_number_match"]
    assert result["probes"]["structured_last_number"]["credited"] > 0
    assert result["families"]["structured_gold"]["false_positive_rate"] > 0.2
    assert "HACK  structured_last_number" in format_table(report)


def test_gsm8k_flexible_falls_only_for_its_documented_hacks(numeric_report):
    result = numeric_report["rewards"]["gsm8k_flexible"]
    hacked = {p for p, e in result["probes"].items() if e["kind"] == "wrong" and e["credited"]}
    assert hacked <= GSM8K_FLEXIBLE_HACKS
    assert "retraction" not in hacked  # "42. No wait, 43" ends in 43: the last number is the answer


def test_countdown_passes_its_equation_battery():
    report = probe([rewards.get("countdown")], COUNTDOWN_PROMPTS, [str(t) for t in COUNTDOWN_TARGETS],
                   {"nums": COUNTDOWN_NUMS, "target": COUNTDOWN_TARGETS})
    result = report["rewards"]["countdown"]
    assert report["battery"] == "countdown"
    assert result["false_positive_rate"] == 0.0
    assert result["false_negative_rate"] == 0.0
    assert {"number_reused", "number_not_given", "target_echoed"} <= set(result["probes"])


def test_solve_countdown_finds_a_valid_equation():
    equation = solve_countdown([3, 5, 7], 56)
    assert equation is not None and eval(equation) == 56  # noqa: S307 - our own digits and operators


def test_sloppy_substring_reward_is_flagged(tmp_path):
    path = tmp_path / "sloppy.py"
    path.write_text(SLOPPY)
    report = probe([rewards.get(f"{path}:contains_answer")], PROMPTS, ANSWERS)
    result = report["rewards"]["contains_answer"]
    hacked = {p for p, e in result["probes"].items() if e["kind"] == "wrong" and e["credited"]}
    assert result["false_positive_rate"] > 0.5
    assert {"empty_answer", "negated", "retraction", "gold_substring", "padded_with_gold"} <= hacked
    table = format_table(report)
    assert "HACK  empty_answer" in table and "<answer></answer>" in table


def test_probe_source_runs_edited_code_in_a_child():
    report = probe_source(SLOPPY, ["contains_answer"], PROMPTS[:2], ANSWERS[:2])
    assert report["rewards"]["contains_answer"]["false_positive_rate"] > 0.5


def test_threshold_is_relative_to_the_reward_scale():
    report = probe([rewards.get("correct_numeric", scale=2.0)], PROMPTS[:1], ANSWERS[:1])
    result = report["rewards"]["correct_numeric"]
    assert result["max_score"] == 2.0 and result["false_negative_rate"] == 0.0


def test_cli_probe_json_shape():
    out = subprocess.run([sys.executable, "-m", "local_grpo.cli", "rewards", "probe", "--rewards",
                          "correct_numeric,gsm8k_flexible", "--n", "5", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    for name in ("correct_numeric", "gsm8k_flexible"):
        result = report["rewards"][name]
        assert isinstance(result["false_positive_rate"], float) and isinstance(result["false_negative_rate"], float)
        assert all(isinstance(e["credited"], int) and isinstance(e["total"], int) for e in result["probes"].values())
    assert report["rewards"]["correct_numeric"]["false_positive_rate"] == 0.0


def test_cli_probe_table_and_bad_reward():
    table = subprocess.run([sys.executable, "-m", "local_grpo.cli", "rewards", "probe", "--rewards", "gsm8k_flexible",
                            "--task", "countdown", "--n", "3"], capture_output=True, text=True, timeout=300)
    assert table.returncode == 0 and "battery: countdown" in table.stdout
    bad = subprocess.run([sys.executable, "-m", "local_grpo.cli", "rewards", "probe", "--rewards", "nope"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "nope" in bad.stderr


# --- the training-time audit --------------------------------------------------------------

def records(completions_and_totals, prompt="What is 17 + 25?", answer="42"):
    return [{"step": 1, "prompt": prompt, "completion": c, "answer": answer, "total": t}
            for c, t in completions_and_totals]


def test_audit_flags_top_rewarded_wrong_answers():
    from local_grpo.tasks import get_task
    from local_grpo.train.audit import Auditor

    auditor = Auditor(get_task("arithmetic").verifier, [1.0, 0.2])
    auditor.on_scored(1, records([("17 + 25 = 42\nAnswer: 42", 1.2), ("Answer: 1420", 1.0),
                                  ("The answer is not 42", 1.0), ("Answer: 43", 0.2)]))
    metrics = auditor.metrics(step=1)
    assert metrics["audit/audited"] == 3 and metrics["audit/disagreement"] == pytest.approx(2 / 3, abs=1e-4)
    assert "audit/disagreement" not in auditor.metrics(step=2)  # counts reset; nothing audited since


def test_audit_arithmetic_verifier_reads_an_equation_result():
    from local_grpo.tasks.verifiers import integer_verdict as arithmetic_verdict

    row = {"prompt": "What is 13 + 56?", "answer": "69"}
    assert arithmetic_verdict({**row, "completion": "Sure. 13 + 56 = 69"})
    assert arithmetic_verdict({**row, "completion": "128 is 78 + 30 = 69."})
    assert arithmetic_verdict({**row, "completion": "13 + 56 equals 69."})
    assert not arithmetic_verdict({**row, "completion": "The answer to this is: 41. Adding 13 and 56 gives 69."})
    assert arithmetic_verdict({**row, "completion": "It's no trick. 13 + 56 is equal to 69,"})
    assert not arithmetic_verdict({**row, "completion": "13 + 56 ="})
    assert not arithmetic_verdict({**row, "completion": "13 + 56 = 69 or 70"})


def test_audit_countdown_checks_the_equation():
    from local_grpo.tasks.builtin.countdown import countdown_verdict

    row = {"prompt": "Using the numbers [3, 5, 7], write an equation that equals 56.", "answer": "56"}
    assert countdown_verdict({**row, "completion": "Answer: (3 + 5) * 7"})
    assert not countdown_verdict({**row, "completion": "Answer: 7 * 8"})
    assert not countdown_verdict({**row, "completion": "Answer: (3 + 5) * 7 + 3 - 3"})


def test_audit_uses_math_verify_for_datasets():
    from local_grpo.tasks import DATASET, builtin_tasks
    from local_grpo.train.audit import Auditor

    auditor = Auditor(builtin_tasks()[DATASET].verifier, [1.0])
    auditor.on_scored(1, records([("Answer: \\frac{1}{2}", 1.0), ("Answer: 3/4", 1.0)], answer="0.5"))
    assert auditor.metrics(step=1)["audit/disagreement"] == 0.5


def test_audit_writes_metrics_and_alert_through_the_trainer_hooks(tmp_path):
    from local_grpo.train.audit import attach_audit
    from local_grpo.config import Config
    from local_grpo.rundir import RunDir
    from local_grpo.train.callbacks import RunDirCallback
    from local_grpo.train.recorder import RewardRecorder

    run = RunDir.create(str(tmp_path / "run"))
    recorder = RewardRecorder(run, [], [1.0], None, write=False)
    callback = RunDirCallback(run, recorder, Config(), progress=False)
    attach_audit(Config(), run, recorder, callback)
    for hook in recorder.on_scored:
        hook(1, records([("Answer: 1420", 1.0), ("Answer: 42", 1.0)]))
    callback.on_log(None, SimpleNamespace(global_step=1), None, logs={"reward": 1.0})
    metrics = run.metrics()[-1]
    assert metrics["audit/disagreement"] == 0.5 and metrics["audit/audited"] == 2 and "audit/seconds" in metrics
    alerts = [e for e in run.events() if e["type"] == "alert"]
    assert len(alerts) == 1 and "1420" in alerts[0]["message"]


def test_countdown_reward_reads_the_countdown_task_columns():
    from local_grpo.config import Config
    from local_grpo.data import load_examples

    config = Config()
    config.data.task, config.data.num_train, config.data.num_heldout = "countdown", 3, 0
    rows = load_examples(config)[0]
    equations = [solve_countdown(row["numbers"], row["target"]) for row in rows]
    scores = rewards.get("countdown")([f"Answer: {e}" for e in equations], prompts=[r["prompt"] for r in rows],
                                      answer=[r["answer"] for r in rows], numbers=[r["numbers"] for r in rows],
                                      target=[r["target"] for r in rows])
    assert scores == [1.0, 1.0, 1.0]


def test_audit_verifiers_pass_the_probe_batteries():
    from local_grpo.tasks.builtin.countdown import countdown_verdict
    from local_grpo.tasks.verifiers import integer_verdict as arithmetic_verdict

    def as_reward(verdict):
        def reward(completions, prompts, answer, **kwargs):
            return [1.0 if verdict({"completion": c, "prompt": p, "answer": a}) else 0.0
                    for c, p, a in zip(completions, prompts, answer)]
        reward.__name__ = verdict.__name__
        return reward

    integer_rows = [(p, a) for p, a in zip(PROMPTS, ANSWERS) if "." not in a]
    report = probe([as_reward(arithmetic_verdict)], [p for p, _ in integer_rows], [a for _, a in integer_rows])
    assert report["rewards"]["integer_verdict"]["false_positive_rate"] == 0.0
    report = probe([as_reward(countdown_verdict)], COUNTDOWN_PROMPTS, [str(t) for t in COUNTDOWN_TARGETS],
                   {"nums": COUNTDOWN_NUMS, "target": COUNTDOWN_TARGETS})
    assert report["rewards"]["countdown_verdict"]["false_positive_rate"] == 0.0


def test_studio_designer_probe_action_shows_the_table(tmp_path):
    from apps.studio import build_app

    app = build_app(str(tmp_path))
    handler = next(f for f in app.fns.values() if f.api_name == "probe_rewards").fn
    samples = json.dumps({"prompt": "What is 17 + 25?", "answer": "42", "completion": "Answer: 42"})
    table = handler(SLOPPY, samples)
    assert "contains_answer" in table and "HACK  empty_answer" in table and "1 prompts" in table
    assert handler("def broken(:\n", samples).startswith("**Cannot probe:**")


@pytest.mark.parametrize("name", ["correct_numeric", "correct_math"])
def test_real_cpu_run_completions_keep_their_verdicts(name):
    # from the soundness runs: a plain answer after "75 and 50" is right; "42 + 70 ... do not" never states 112.
    completions = ["To find the sum of 75 and 50, simply add them together: 75 + 50 = 125.",
                   "To calculate 42 + 70, we first add the numbers in the base-10ed expression - they do not leave a "
                   "remainder. Instead, we convert the expression.\n\nIf we had been able to set up the n"]
    scores = rewards.get(name)(completions, answer=["125", "112"], prompts=["What is 75 + 50?", "What is 42 + 70?"])
    assert scores == [1.0, 0.0]
