"""Peer suite: the reward cases of huggingface/trl tests/test_rewards.py (read at commit 010eddf0), as data.

Each row: the TRL test it comes from, TRL's reward and its input/expected value, and the built-in +
params claiming the same semantics. Re-expressed here in our own table; no code copied.
"""

import pytest
from peer_case import PeerCase, case_id, counts, run_case

SOURCE = "huggingface/trl tests/test_rewards.py"
THIRD, HALF = r"\boxed{\frac{1}{3}}", r"\boxed{\frac{1}{2}}"
GOLD_THIRD = r"\frac{1}{3}"
FRAC, WRONG_FRAC, GOLD = r"\boxed{\frac{63}{400}}", r"\boxed{\frac{64}{400}}", r"\frac{63}{400}"
ANSWER_TAGS = "format_strict needs the answer in <answer> tags (TRL's think format leaves it bare), so ours wraps it"
TEXT_GOLD = ("our length rewards judge a gold that is not a number by exact match, so 'forty two' is judged "
             "and \\boxed{42} is wrong (-0.75 at half of max_len), not None")
REASONING_FREE = "correct_math judges the stated answer, not the reasoning layout (pair it with format_strict for that)"


def think(test: str, peer_text: str, ours: str, expected: float) -> PeerCase:
    return PeerCase(f"TestThinkFormatReward.{test}", "think_format_reward", (peer_text,), [expected], "format_strict",
                    ours=(ours,), why=ANSWER_TAGS)


def cosine(test: str, texts: tuple, golds: tuple, lengths: tuple, peer_expected: list, **options) -> PeerCase:
    params = {"max_len": 100, **options.pop("params", {})}
    return PeerCase(f"TestCosineScaledReward.{test}", "get_cosine_scaled_reward", texts, peer_expected, "length_cosine",
                    params, answer=golds, completion_ids=tuple((1,) * n for n in lengths), tolerance=1e-4, **options)


def overlong(test: str, length: int, expected: float) -> PeerCase:
    return PeerCase(f"TestSoftOverlongPunishmentReward.{test}", "get_soft_overlong_punishment", ("",), [expected],
                    "overlong_soft", {"max_len": 100, "cache_len": 20}, completion_ids=((1,) * length,),
                    why="TRL passes only completion_ids; ours takes the completions too (an empty text, unused)",
                    tolerance=1e-4)


def wrapped(reasoning_then_answer: str) -> str:
    """A TRL think-format completion in our tag layout: the text after </think> (or after the reasoning) in <answer> tags."""
    head, sep, tail = reasoning_then_answer.rpartition("</think>")
    if sep:
        return f"{head}{sep}{tail[:len(tail) - len(tail.lstrip())]}<answer>{tail.strip()}</answer>"
    body, _, answer = reasoning_then_answer.rpartition("This is my answer.")
    return f"{body}<answer>This is my answer.{answer}</answer>"


VALID = ["<think>This is my reasoning.</think>This is my answer.",
         "<think>\nThis is my reasoning.\n</think>\nThis is my answer.",
         "<think>\nThis is\nmy reasoning.\n</think>\nThis is my answer.",
         "<think>\nThis is <some tag> my reasoning.</think>\nThis is my answer.",
         "<think></think>\nThis is my answer."]
INVALID = ["<think>\nThis is my reasoning.\nThis is my answer.", "<think>This is my reasoning.\nThis is my answer.",
           "This is my reasoning. This is my answer.", "This is my reasoning.\nThis is my answer.",
           "This is my reasoning.</think>\nThis is my answer.", "This is my reasoning.</think>This is my answer.",
           "This<think>is my reasoning.</think>\nThis is my answer.",
           "<think>This is<think>my reasoning.</think></think>This is my answer.",
           "<think>This is</think>\nmy\n<think>reasoning.</think>\nThis is my answer."]
MIXED = [VALID[0], VALID[1], INVALID[1], INVALID[2]]

CASES = [
    *[think("test_valid_format", text, wrapped(text), 1.0) for text in VALID],
    *[think("test_invalid_format", text, wrapped(text), 0.0) for text in INVALID],
    PeerCase("TestThinkFormatReward.test_mixed_format", "think_format_reward", tuple(MIXED), [1.0, 1.0, 0.0, 0.0],
             "format_strict", ours=tuple(wrapped(t) for t in MIXED), why=ANSWER_TAGS),
    overlong("test_soft_overlong_punishment_short_completion", 50, 0.0),
    overlong("test_soft_overlong_punishment_long_completion", 110, -1.0),
    overlong("test_soft_overlong_punishment_intermediate_completion", 90, -0.5),
    PeerCase("TestAccuracyReward.test_accuracy_reward_correct_answer", "accuracy_reward", (FRAC, FRAC), [1.0, 1.0],
             "correct_math", answer=(GOLD, "63/400")),
    PeerCase("TestAccuracyReward.test_accuracy_reward_wrong_answer", "accuracy_reward", (WRONG_FRAC,), [0.0],
             "correct_math", answer=(GOLD,)),
    PeerCase("TestAccuracyReward.test_accuracy_reward_wrong_answer_no_latex", "accuracy_reward", (r"\boxed{3}",),
             [0.0], "correct_math", answer=("6",)),
    PeerCase("TestAccuracyReward.test_accuracy_reward_unparsable_gold", "accuracy_reward",
             ("Answer is forty two.", r"Some other content. \boxed{43}."), [None, None], "correct_math",
             answer=("Answer is forty two.", "Answer is forty three.")),
    PeerCase("TestAccuracyReward.test_accuracy_reward_in_worker_thread", "accuracy_reward", (THIRD,), [1.0],
             "correct_math", answer=(GOLD_THIRD,), thread=True),
    PeerCase("TestReasoningAccuracyReward.test_correct_answer_yields_unit_reward", "reasoning_accuracy_reward",
             (r"<think> Reasoning content </think> " + FRAC, r"Reasoning content </think> " + FRAC), [1.0, 1.0],
             "correct_math", answer=(GOLD, GOLD)),
    PeerCase("TestReasoningAccuracyReward.test_correct_answer_with_custom_tags_yields_unit_reward",
             "reasoning_accuracy_reward(reasoning_delimiters=['</REASONING_END>'])",
             (r"<REASONING_START> Reasoning content </REASONING_END> " + FRAC,), [1.0], "correct_math", answer=(GOLD,),
             why="correct_math has no reasoning-delimiter parameter; the last box is still the stated answer"),
    PeerCase("TestReasoningAccuracyReward.test_incorrect_answer_yields_zero_reward", "reasoning_accuracy_reward",
             (r"<think> Reasoning content </think> " + WRONG_FRAC,), [0.0], "correct_math", answer=(GOLD,)),
    PeerCase("TestReasoningAccuracyReward.test_correct_answer_in_reasoning_yields_zero_reward",
             "reasoning_accuracy_reward",
             (r"<think> My answer is \boxed{42} </think> Some other text.",
              r"<think> The answer is \boxed{42} </think> Here's a wrong answer: \boxed{43}."),
             [0.0, 0.0], "correct_math", answer=(r"\boxed{42}", r"\boxed{42}")),
    PeerCase("TestReasoningAccuracyReward.test_incomplete_reasoning_yields_zero_reward", "reasoning_accuracy_reward",
             (r"<think> Incomplete reasoning without closing tag",
              r"Correct answer \frac{63}{400} but completely missing reasoning content"),
             [0.0, 0.0], "correct_math", answer=(GOLD, GOLD), expected=[0.0, 1.0], why=REASONING_FREE),
    PeerCase("TestReasoningAccuracyReward.test_unparsable_gold_solution_yields_none_reward",
             "reasoning_accuracy_reward", (r"<think> Reasoning content </think> \boxed{42}",), [None], "correct_math",
             answer=("forty two",)),
    cosine("test_correct_shorter_rewarded_more", (THIRD, THIRD), (GOLD_THIRD,) * 2, (25, 75), [0.92678, 0.57322]),
    cosine("test_wrong_longer_penalized_less", (HALF, HALF), (GOLD_THIRD,) * 2, (25, 75), [-0.92678, -0.57322]),
    cosine("test_midpoint_values", (THIRD, HALF), (GOLD_THIRD,) * 2, (50, 50), [0.75, -0.75]),
    cosine("test_correct_boundary_values", (THIRD, THIRD), (GOLD_THIRD,) * 2, (0, 100), [1.0, 0.5]),
    cosine("test_wrong_boundary_values", (HALF, HALF), (GOLD_THIRD,) * 2, (0, 100), [-1.0, -0.5]),
    cosine("test_length_exceeding_max_len_is_clamped", (THIRD, HALF), (GOLD_THIRD,) * 2, (200, 200), [0.5, -0.5]),
    cosine("test_unparsable_gold_yields_none", (r"\boxed{42}",), ("forty two",), (50,), [None],
           expected=[-0.75], why=TEXT_GOLD),
    cosine("test_custom_value_bounds", (THIRD,), (GOLD_THIRD,), (50,), [1.0],
           params={"min_value_correct": 0.0, "max_value_correct": 2.0}),
    PeerCase("TestCosineScaledReward.test_reward_is_picklable", "get_cosine_scaled_reward", (THIRD,), [0.75],
             not_ported="our rewards are closures behind SafeReward and nothing in local-grpo pickles one "
                        "(no async rollout worker); TRL's test checks pickling, not scoring"),
]

# Every test function of the peer file, so a new peer test cannot go unnoticed.
PEER_TESTS = {
    "TestThinkFormatReward.test_valid_format", "TestThinkFormatReward.test_invalid_format",
    "TestThinkFormatReward.test_mixed_format",
    "TestSoftOverlongPunishmentReward.test_soft_overlong_punishment_short_completion",
    "TestSoftOverlongPunishmentReward.test_soft_overlong_punishment_long_completion",
    "TestSoftOverlongPunishmentReward.test_soft_overlong_punishment_intermediate_completion",
    *(f"TestAccuracyReward.{name}" for name in (
        "test_accuracy_reward_correct_answer", "test_accuracy_reward_wrong_answer",
        "test_accuracy_reward_wrong_answer_no_latex", "test_accuracy_reward_unparsable_gold",
        "test_accuracy_reward_in_worker_thread")),
    *(f"TestReasoningAccuracyReward.{name}" for name in (
        "test_correct_answer_yields_unit_reward", "test_correct_answer_with_custom_tags_yields_unit_reward",
        "test_incorrect_answer_yields_zero_reward", "test_correct_answer_in_reasoning_yields_zero_reward",
        "test_incomplete_reasoning_yields_zero_reward", "test_unparsable_gold_solution_yields_none_reward")),
    *(f"TestCosineScaledReward.{name}" for name in (
        "test_correct_shorter_rewarded_more", "test_wrong_longer_penalized_less", "test_midpoint_values",
        "test_correct_boundary_values", "test_wrong_boundary_values", "test_length_exceeding_max_len_is_clamped",
        "test_unparsable_gold_yields_none", "test_custom_value_bounds", "test_reward_is_picklable")),
}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_trl_case(case):
    run_case(case)


def test_table_covers_every_trl_reward_test():
    assert {case.test for case in CASES} == PEER_TESTS
    assert counts(CASES) == {"cases": 38, "ported": 37, "adapted": 21, "not_ported": 1}
