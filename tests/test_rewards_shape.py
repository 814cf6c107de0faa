"""Table-driven tests for the format, length, quality and code rewards."""

import pytest

import rewards

SOFT_CASES = [
    ("Answer: 85", 1.0),
    ("47 + 38 = 85\nAnswer: 85", 1.0),
    ("Answer: 85.", 1.0),
    ("answer:85", 1.0),
    ("Answer: 85 because I added", 0.75),
    ("Answer: eighty-five", 0.25),
    ("Answer:", 0.25),
    ("85", 0.25),
    ("The answer is 85", 0.25),
    ("hello", 0.0),
    ("", 0.0),
    ([{"role": "assistant", "content": "Answer: 85"}], 1.0),
    # a repeated marker is the hack a format reward invites: only the has-a-number quarter
    ("Answer: 9.\n\nAnswer: 12.\n\nAnswer: 4.", 0.25),
    ("Answer: 57. Answer: 20", 0.25),
]


@pytest.mark.parametrize("completion,expected", SOFT_CASES)
def test_format_soft_gives_partial_credit_for_the_answer_line(completion, expected):
    assert rewards.get("format_soft")([completion]) == [expected]


def test_format_soft_varies_across_typical_base_model_outputs():
    outputs = ["The sum of 47 and 38 is 85.", "Answer: 85", "I don't know", "Answer: 85 and more text"]
    assert len(set(rewards.get("format_soft")(outputs))) >= 3


TAG_CASES = [
    ("<think>add</think><answer>85</answer>", 1.0),
    ("<think>add</think>\n<answer>85</answer>\n", 1.0),
    ("<think>add</think><answer>85</answer> trailing", 1.0 - 0.008),
    ("<answer>85</answer>", 0.5),
    ("<answer>85</answer><think>x</think>", 0.5 + 0.25 - 16 * 0.001),
    ("<think>a</think><think>b</think><answer>85</answer>", 0.75 + 0.25 - 0.25),
    ("plain text", 0.0),
]


@pytest.mark.parametrize("completion,expected", TAG_CASES)
def test_format_soft_with_tags(completion, expected):
    [score] = rewards.get("format_soft", tags=("think", "answer"))([completion])
    assert score == pytest.approx(expected)


STRICT_CASES = [
    ("<think>add them</think><answer>85</answer>", 1.0),
    ("<think>\nadd\n</think>\n<answer>\n85\n</answer>", 1.0),
    ("  <think>a</think> <answer>85</answer>  ", 1.0),
    ("<think>a</think><answer></answer>", 0.0),
    ("<think>a</think><answer>85</answer> extra", 0.0),
    ("<answer>85</answer>", 0.0),
    ("<think>a</think><answer>1</answer><answer>2</answer>", 0.0),
    ("<think><think>a</think><answer>85</answer>", 0.0),
    ("", 0.0),
]


@pytest.mark.parametrize("completion,expected", STRICT_CASES)
def test_format_strict(completion, expected):
    assert rewards.get("format_strict")([completion]) == [expected]


def test_format_strict_custom_tags():
    reward = rewards.get("format_strict", tags="start_working_out,SOLUTION")
    assert reward(["<start_working_out>x</start_working_out><SOLUTION>2</SOLUTION>",
                   "<think>x</think><answer>2</answer>"]) == [1.0, 0.0]


def test_bad_tags_are_a_spec_error():
    with pytest.raises(rewards.RewardSpecError, match="format_strict"):
        rewards.get("format_strict", tags=("no spaces allowed",))


@pytest.mark.parametrize("length,expected", [(0, 0.0), (5, 0.5), (10, 1.0), (20, 1.0), (30, 0.5), (40, 0.0), (99, 0.0)])
def test_length_target_band_in_chars(length, expected):
    reward = rewards.get("length_target", min=10, max=20, unit="chars")
    assert reward(["x" * length]) == [pytest.approx(expected)]


def test_length_target_counts_tokens_from_completion_ids():
    reward = rewards.get("length_target", min=2, max=4, falloff=2)
    assert reward(["a", "b", "c"], completion_ids=[[1], [1, 2, 3], [1] * 5]) == [0.5, 1.0, 0.5]


def test_length_target_rejects_an_inverted_band():
    with pytest.raises(rewards.RewardSpecError, match="min <= max"):
        rewards.get("length_target", min=10, max=5)


def test_length_kimi_rewards_short_correct_answers_within_each_prompt_group():
    completions = ["Answer: 4", "Let me think a lot. Answer: 4", "Answer: 5", "Answer: 9", "Long wrong reasoning... Answer: 3"]
    prompts = ["2+2?", "2+2?", "2+2?", "4+5?", "4+5?"]
    scores = rewards.get("length_kimi", unit="chars")(completions, answer=["4", "4", "4", "9", "9"], prompts=prompts)
    assert scores[0] == 0.5 and scores[1] == -0.5
    assert scores[2] <= 0.0
    assert scores[3] == 0.5 and scores[4] == -0.5


def test_length_kimi_equal_lengths_give_zero():
    assert rewards.get("length_kimi")(["Answer: 4", "Answer: 5"], answer=["4", "4"]) == [0.0, 0.0]


def test_length_cosine_orders_short_and_long_answers():
    reward = rewards.get("length_cosine", max_len=100, unit="chars")
    short_right, long_right = reward(["Answer: 4", "x" * 90 + "Answer: 4"], answer=["4", "4"])
    short_wrong, long_wrong = reward(["Answer: 5", "x" * 90 + "Answer: 5"], answer=["4", "4"])
    assert 1.0 >= short_right > long_right >= 0.5
    assert -1.0 <= short_wrong < long_wrong <= -0.5
    assert reward(["Answer: 4"], answer=[""]) == [None]


@pytest.mark.parametrize("length,expected", [(10, 0.0), (768, 0.0), (896, -0.5), (1024, -1.0), (5000, -1.0)])
def test_overlong_soft_follows_dapo(length, expected):
    reward = rewards.get("overlong_soft", max_len=1024, cache_len=256)
    assert reward(["x"], completion_ids=[[0] * length]) == [pytest.approx(expected)]


@pytest.mark.parametrize("text,expected", [
    ("the cat sat on the mat", 0.0),
    ("a b c a b c a b c", pytest.approx(-4 / 7)),
    ("same same same same same", pytest.approx(-2 / 3)),
    ("too short", 0.0),
    ("", 0.0),
])
def test_repetition_penalty(text, expected):
    assert rewards.get("repetition")([text]) == [expected]


def test_repetition_rejects_a_positive_penalty():
    with pytest.raises(rewards.RewardSpecError, match="max_penalty"):
        rewards.get("repetition", max_penalty=1.0)


@pytest.mark.parametrize("text,expected", [
    ("Step 1: add. Step 2: carry. Step 3: done.", 1.0),
    ("First, add. Finally, check.", pytest.approx(2 / 3)),
    ("1. a\n2. b\n3. c\n4. d", 1.0),
    ("just the answer", 0.0),
])
def test_reasoning_steps(text, expected):
    assert rewards.get("reasoning_steps")([text]) == [expected]


CODE_TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]


@pytest.mark.parametrize("completion,expected", [
    ("```python\ndef add(a, b):\n    return a + b\n```", 1.0),
    ("Here:\n```python\ndef add(a, b):\n    return a - b if a < 0 else a + b\n```", 0.5),
    ("def add(a, b):\n    return a + b", 1.0),
    ("no code at all", 0.0),
    ("```python\nwhile True:\n    pass\n```", 0.0),
    ("```python\nimport os\ndef add(a, b):\n    return a + b\n```", -1.0),
    ("```python\nx = bytearray(10**10)\n```", 0.0),
])
def test_code_tests_runs_code_in_a_sandbox(completion, expected):
    reward = rewards.get("code_tests", timeout_s=2)
    assert reward([completion], tests=[CODE_TESTS]) == [expected]
    if expected == -1.0:
        [event] = reward.drain_events()
        assert event["kind"] == "forbidden_import" and "os" in event["message"]


def test_code_tests_has_no_network():
    code = "```python\nimport urllib3\n```"
    sandbox = rewards.get("code_tests", forbidden=())
    network = "```python\nimport socket\ndef ok():\n    socket.create_connection(('1.1.1.1', 80))\n```"
    assert sandbox([code, network], tests=[["assert True"], ["ok()"]]) == [0.0, 0.0]
