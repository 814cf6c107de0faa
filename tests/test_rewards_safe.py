"""The safe wrapper, user reward files and the registry API: faults become None scores and events, never crashes."""

import math
import os
import textwrap
import threading
import time

import pytest

import rewards
from rewards.safe import SafeReward

USER_FILE = '''
import math

def brevity(completions, **kwargs):
    return [1.0 / (1 + len(str(c))) for c in completions]

def uses_answer(completions, answer, **kwargs):
    return [1.0 if str(a) in str(c) else 0.0 for c, a in zip(completions, answer)]

def raises(completions, **kwargs):
    raise RuntimeError("broken reward")

def loops(completions, **kwargs):
    while True:
        pass

def nan(completions, **kwargs):
    return [math.nan] + [1.0] * (len(completions) - 1)

def wrong_length(completions, **kwargs):
    return [1.0]

def words(completions, **kwargs):
    return ["good"] * len(completions)

def hog(completions, **kwargs):
    block = bytearray(8 * 1024 ** 3)
    return [1.0] * len(completions)

def _helper():
    return 0
'''


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(USER_FILE)
    return path


def write_with_new_mtime(path, text):
    """Rewrite a file and make sure its mtime changes even on coarse clocks."""
    before = os.stat(path).st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 10**9, before + 10**9))


def test_user_file_reward_runs_and_keeps_its_name(user_file):
    reward = rewards.get(f"{user_file}:brevity")
    assert reward.__name__ == "brevity"
    assert reward(["a", "abc"], trainer_state=object(), log_metric=lambda *a: None) == [0.5, 0.25]
    assert "def brevity" in reward.source and "def loops" not in reward.source


def test_user_file_reward_receives_dataset_columns(user_file):
    reward = rewards.get(f"{user_file}:uses_answer")
    assert reward(["Answer: 85", "Answer: 3"], answer=["85", "85"], log_extra=lambda *a: None) == [1.0, 0.0]


def test_load_whole_file_gives_every_public_function(user_file):
    loaded = rewards.load(str(user_file))
    assert [r.__name__ for r in loaded] == ["brevity", "uses_answer", "raises", "loops", "nan", "wrong_length",
                                            "words", "hog"]


@pytest.mark.parametrize("function,kind,scores", [
    ("raises", "exception", [None, None]),
    ("nan", "nan", [None, 1.0]),
    ("wrong_length", "wrong_length", [None, None]),
    ("words", "non_numeric", [None, None]),
    ("hog", "exception", [None, None]),
])
def test_faulty_user_rewards_give_none_and_fault_events(user_file, function, kind, scores):
    reward = rewards.get(f"{user_file}:{function}")
    assert reward(["a", "b"]) == scores
    [event] = reward.drain_events()
    assert event["type"] == "reward_fault" and event["reward"] == function and event["kind"] == kind
    assert event["count"] == scores.count(None) and "\n" not in event["message"]
    assert reward.fault_counts[kind] == scores.count(None) and reward.calls == 1
    assert reward.drain_events() == []


def test_forever_looping_reward_returns_none_within_its_time_limit_and_recovers(user_file):
    reward = rewards.get(f"{user_file}:loops", timeout_s=1)
    start = time.monotonic()
    assert reward(["a", "b"]) == [None, None]
    assert time.monotonic() - start < 3
    [event] = reward.drain_events()
    assert event["kind"] == "timeout" and event["count"] == 2
    write_with_new_mtime(user_file, USER_FILE.replace("while True:\n        pass", "return [0.5] * len(completions)"))
    assert reward(["a", "b"]) == [0.5, 0.5]


def test_alert_after_consecutive_all_failed_calls_once_per_streak(user_file):
    reward = rewards.get(f"{user_file}:raises")
    reward.alert_after = 2
    for _ in range(4):
        reward(["a"])
    alerts = [e for e in reward.drain_events() if e["type"] == "alert"]
    assert len(alerts) == 1 and alerts[0]["reward"] == "raises" and "2 calls" in alerts[0]["message"]


def test_alert_streak_resets_after_a_good_call():
    state = {"fail": True}

    def flaky(completions, **kwargs):
        if state["fail"]:
            raise ValueError("down")
        return [1.0] * len(completions)

    reward = SafeReward("flaky", flaky, alert_after=2)
    reward(["a"]), reward(["a"])
    state["fail"] = False
    reward(["a"])
    state["fail"] = True
    reward(["a"]), reward(["a"])
    assert sum(e["type"] == "alert" for e in reward.drain_events()) == 2


def test_file_edited_to_a_syntax_error_and_back(user_file):
    reward = rewards.get(f"{user_file}:brevity")
    assert reward(["a"]) == [0.5]
    write_with_new_mtime(user_file, USER_FILE.replace("def brevity(completions, **kwargs):", "def brevity(completions, **kwargs)"))
    assert reward(["a"]) == [None]
    assert reward(["a"]) == [None]
    events = reward.drain_events()
    assert [e["kind"] for e in events] == ["reward_reloaded", "syntax_error", "syntax_error"]
    assert events[0]["type"] == "info" and "syntax error" in events[0]["message"]
    assert f"{user_file}:4" in events[1]["message"]
    write_with_new_mtime(user_file, USER_FILE.replace("1.0 / (1 + len(str(c)))", "2.0"))
    assert reward(["a"]) == [2.0]
    assert "2.0" in reward.source


def test_spec_errors_are_one_line_and_name_the_spec(tmp_path, user_file):
    broken = tmp_path / "broken.py"
    broken.write_text("def f(completions, **kw):\n    return [\n")
    cases = {
        "nope": "valid: code_tests",
        f"{user_file}:missing": "no function 'missing'",
        str(tmp_path / "absent.py") + ":f": "file not found",
        f"{broken}:f": f"{broken}:2",
    }
    for spec, fragment in cases.items():
        with pytest.raises(rewards.RewardSpecError) as error:
            rewards.get(spec)
        assert fragment in str(error.value) and "\n" not in str(error.value)
        assert spec.split(":")[0] in str(error.value)
    with pytest.raises(rewards.RewardSpecError, match="unknown parameter 'bogus'"):
        rewards.get("correct_numeric", bogus=1)
    with pytest.raises(rewards.RewardSpecError, match="unknown parameter 'bogus'"):
        rewards.get(f"{user_file}:brevity", bogus=1)
    assert issubclass(rewards.RewardSpecError, ValueError)


def test_in_process_reward_faults_are_caught():
    def bad_values(completions, **kwargs):
        return [math.inf, "x", None, 2]

    reward = SafeReward("bad_values", bad_values)
    assert reward(["a", "b", "c", "d"]) == [None, None, None, 2.0]
    kinds = sorted(e["kind"] for e in reward.drain_events())
    assert kinds == ["nan", "non_numeric"]


def test_same_scores_from_main_thread_other_thread_and_user_file(user_file):
    reward = rewards.get(f"{user_file}:uses_answer")
    builtin = rewards.get("correct_numeric")
    args = (["Answer: 85", "47 + 38"],)
    kwargs = {"answer": ["85", "85"], "prompts": ["What is 47 + 38?"] * 2}
    main = (reward(*args, **kwargs), builtin(*args, **kwargs))
    other = {}
    thread = threading.Thread(target=lambda: other.update(r=(reward(*args, **kwargs), builtin(*args, **kwargs))))
    thread.start()
    thread.join()
    assert main == other["r"] == ([1.0, 0.0], [1.0, 0.0])


def test_names_and_describe():
    names = rewards.names()
    for required in ["format_strict", "format_soft", "correct_exact", "correct_numeric", "correct_math", "gsm8k_strict",
                     "gsm8k_flexible", "countdown", "integer_answer", "length_target", "length_kimi", "length_cosine",
                     "overlong_soft", "repetition", "reasoning_steps", "code_tests"]:
        assert required in names
    assert names == sorted(names)
    info = rewards.describe("length_target")
    assert info["params"]["min"] == 16 and "\n" not in info["summary"] and info["name"] == "length_target"
    assert rewards.get("length_target").__name__ == "length_target"
    assert "def length_target" in rewards.get("length_target").source


@pytest.mark.parametrize("text,expected", [
    ("format_soft", [("format_soft", 1.0)]),
    ("format_soft:0.5, correct_numeric", [("format_soft", 0.5), ("correct_numeric", 1.0)]),
    ("path/f.py:fn:0.5,length_target:0", [("path/f.py:fn", 0.5), ("length_target", 0.0)]),
    ("path/f.py:fn", [("path/f.py:fn", 1.0)]),
    ("C:/x/f.py:fn:-1", [("C:/x/f.py:fn", -1.0)]),
])
def test_parse_reward_list(text, expected):
    assert rewards.parse_reward_list(text) == expected


@pytest.mark.parametrize("text", ["", "a,,b", ":0.5", "a:nan", "a:inf"])
def test_parse_reward_list_rejects_bad_lists(text):
    with pytest.raises(rewards.RewardSpecError):
        rewards.parse_reward_list(text)


def test_chat_and_string_completions_score_the_same():
    for name in ["format_soft", "correct_numeric", "correct_exact", "length_target", "repetition"]:
        reward = rewards.get(name)
        text = "Step 1: add.\nAnswer: 85"
        assert reward([text], answer=["85"]) == reward([[{"role": "assistant", "content": text}]], answer=["85"])


def test_kwargs_with_unpicklable_values_reach_user_file(user_file):
    reward = rewards.get(f"{user_file}:uses_answer")
    scores = reward(["85"], answer=["85"], trainer_state=threading.Lock(), log_extra=print, other=threading.Lock())
    assert scores == [1.0] and reward.drain_events() == []


def test_user_file_prints_do_not_reach_stdout(tmp_path, capfd):
    path = tmp_path / "noisy.py"
    path.write_text(textwrap.dedent('''
        def noisy(completions, **kwargs):
            print("debug output")
            return [0.0] * len(completions)
    '''))
    assert rewards.get(f"{path}:noisy")(["a"]) == [0.0]
    captured = capfd.readouterr()
    assert "debug output" not in captured.out
