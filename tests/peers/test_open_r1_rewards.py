"""Peer suite: the reward cases of huggingface/open-r1 tests/test_rewards.py (read at commit 031ec05d), as data.

Each row: the open-r1 test it comes from, open-r1's reward and its input/expected value, and the
built-in + params claiming the same semantics. Re-expressed here in our own table; no code copied.
"""

import pytest
from peer_case import RAISES, PeerCase, case_id, counts, run_case

SOURCE = "huggingface/open-r1 tests/test_rewards.py"
FRAC = r"\boxed{\frac{63}{400}}"
WRONG_FRAC = r"\boxed{\frac{64}{400}}"
GOLD = r"\frac{63}{400}"
TAGGED = "<think>Some reasoning</think><answer>The answer</answer>"
MULTILINE = ("<think>\nI will count each distinct object in the image:\n1. Purple scooter\n2. Red bicycle\n"
             "3. Green motorcycle\n4. Gray sedan\n5. Yellow school bus\n6. Small green double-decker bus\n"
             "7. Small red car\n8. Small purple car\n9. Small gray dirt bike\n\nThere are 9 distinct objects in total.\n"
             "</think>\n<answer>9</answer>")
# open-r1's cosine test pads the content to a length with spaces (never shortens it); lengths are characters.
COSINE = {"max_len": 100, "min_value_wrong": -1.0, "max_value_wrong": -0.5, "min_value_correct": 0.5,
          "max_value_correct": 1.0, "unit": "chars"}


def padded(text: str, length: int) -> str:
    """The peer's padding: spaces up to `length` characters."""
    return text + " " * max(0, length - len(text))


def steps(text: str, expected: float) -> PeerCase:
    return PeerCase("TestRewards.test_reasoning_steps_reward", "reasoning_steps_reward", (text,), [expected],
                    "reasoning_steps", {"target": 3})


def cosine(text: str, length: int, expected: float) -> PeerCase:
    return PeerCase("TestRewards.test_cosine_scaled_reward", "get_cosine_scaled_reward", (padded(text, length),),
                    [expected], "length_cosine", COSINE, answer=(GOLD,), tolerance=0.005)  # assertAlmostEqual places=2


def repetition(test: str, texts: tuple, peer_expected, ngram_size: int, max_penalty: float, tolerance: float = 1e-7,
               **adapted) -> PeerCase:
    return PeerCase(f"TestRepetitionPenaltyReward.{test}", "get_repetition_penalty_reward", texts, peer_expected,
                    "repetition", {"ngram_size": ngram_size, "max_penalty": max_penalty}, tolerance=tolerance, **adapted)


CASES = [
    PeerCase("TestRewards.test_accuracy_reward_correct_answer", "accuracy_reward", (FRAC,), [1.0], "correct_math",
             answer=(GOLD,)),
    PeerCase("TestRewards.test_accuracy_reward_wrong_answer", "accuracy_reward", (WRONG_FRAC,), [0.0], "correct_math",
             answer=(GOLD,)),
    PeerCase("TestRewards.test_format_reward_correct", "format_reward", (TAGGED,), [1.0], "format_strict"),
    *[PeerCase("TestRewards.test_format_reward_incorrect", "format_reward", (text,), [0.0], "format_strict")
      for text in ("<think>Only thinking</think>", "<answer>Only answer</answer>", "No tags at all",
                   "<think>Missing closing</think><answer>Missing closing",
                   "<think>Wrong order</answer><answer>Wrong order</think>")],
    steps("Step 1: First step\nStep 2: Second step\nStep 3: Third step", 1.0),
    steps("First, we do this.\nSecond, we do that.\nFinally, we conclude.", 1.0),
    steps("Step 1: Only step", 1 / 3),
    steps("First, we do this.\nFinally, we conclude.", 2 / 3),
    steps("Just plain text without any clear steps", 0.0),
    PeerCase("TestRewards.test_multiple_completions", "accuracy_reward", (FRAC, WRONG_FRAC), [1.0, 0.0],
             "correct_math", answer=(GOLD, GOLD)),
    PeerCase("TestRewards.test_weighted_reward", "format_reward", (TAGGED,), [1.0], "format_strict"),
    *[PeerCase("TestRewards.test_weighted_reward", f"create_weighted_reward(format_reward, {w})", texts, expected,
               "format_strict", {"scale": w}, why="a weight is the reward's `scale` (or the trainer's weight), not a wrapper")
      for w, texts, expected in ((2.0, (TAGGED,), [2.0]), (0.5, (TAGGED,), [0.5]),
                                 (2.0, (TAGGED, "Invalid format"), [2.0, 0.0]))],
    cosine(FRAC, 20, 0.943),
    cosine(FRAC, 80, 0.547),
    cosine(WRONG_FRAC, 20, -0.942),
    cosine(WRONG_FRAC, 80, -0.547),
    PeerCase("TestRewards.test_format_reward_specific_multiline", "format_reward", (MULTILINE,), [1.0], "format_strict"),
    repetition("test_positive_max_penalty_raises_value_error", (), RAISES, 2, 1.0),
    repetition("test_positive_max_penalty_raises_value_error", (), RAISES, 2, 1.5,
               why="open-r1 also matches its message 'max_penalty 1.5 should not be positive'; ours reads "
                   "'max_penalty must be <= 0', so only the parameter name is matched", expected=RAISES),
    repetition("test_no_repetition", ("this is a test sentence",), [0.0], 2, -1.0),
    repetition("test_full_repetition", ("this this this this this",), [-0.75], 2, -1.0),
    repetition("test_partial_repetition", ("this is a this is a test",), [-1 / 3], 2, -1.0),
    repetition("test_multiple_completions", ("this is a test", "test test test test"), [0.0, -0.25], 3, -0.5),
    repetition("test_empty_completion", ("",), [0.0], 2, -1.0),
    repetition("test_different_ngram_size", ("this is a this is a test",), [-0.4], 3, -2.0),
    repetition("test_mixed_case", ("This is A Test", "this IS a test"), "rewards[0] == rewards[1]", 2, -1.0,
               expected=[0.0, 0.0], why="open-r1 asserts the two scores are equal; we pin both (no repeated 2-gram: 0.0)"),
    repetition("test_one_word_completion", ("word",), [0.0], 3, -1.0),
    repetition("test_two_word_completion", ("two words",), [0.0], 3, -1.0),
    repetition("test_three_word_completion", ("three different words",), [0.0], 3, -1.0),
    repetition("test_three_word_repetition_completion", ("word word word word",), [-0.5], 3, -1.0),
    repetition("test_four_word_completion_with_repetition", ("one two one two",), [0.0], 3, -1.0),
    repetition("test_five_word_completion_with_repetition", ("A B C A B",), [0.0], 3, -0.5),
    repetition("test_six_word_completion_with_repetition", ("A B C A B C",), [-0.25], 3, -1.0),
    repetition("test_long_completion_with_repetition", ("A B C A B C E F G A B C A B C",), [-0.3846], 3, -1.0,
               tolerance=5e-5),  # assertAlmostEqual places=4
    repetition("test_long_completion_without_repetition", ("A B C D E F G H I J K L",), [0.0], 3, -1.0),
]

# Every test function of the peer file, so a new peer test cannot go unnoticed.
PEER_TESTS = {
    "TestRewards.test_accuracy_reward_correct_answer", "TestRewards.test_accuracy_reward_wrong_answer",
    "TestRewards.test_format_reward_correct", "TestRewards.test_format_reward_incorrect",
    "TestRewards.test_reasoning_steps_reward", "TestRewards.test_multiple_completions",
    "TestRewards.test_weighted_reward", "TestRewards.test_cosine_scaled_reward",
    "TestRewards.test_format_reward_specific_multiline",
    *(f"TestRepetitionPenaltyReward.{name}" for name in (
        "test_positive_max_penalty_raises_value_error", "test_no_repetition", "test_full_repetition",
        "test_partial_repetition", "test_multiple_completions", "test_empty_completion", "test_different_ngram_size",
        "test_mixed_case", "test_one_word_completion", "test_two_word_completion", "test_three_word_completion",
        "test_three_word_repetition_completion", "test_four_word_completion_with_repetition",
        "test_five_word_completion_with_repetition", "test_six_word_completion_with_repetition",
        "test_long_completion_with_repetition", "test_long_completion_without_repetition")),
}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_open_r1_case(case):
    run_case(case)


def test_table_covers_every_open_r1_reward_test():
    assert {case.test for case in CASES} == PEER_TESTS
    assert counts(CASES) == {"cases": 41, "ported": 41, "adapted": 5, "not_ported": 0}
