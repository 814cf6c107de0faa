"""Table-driven tests for the correctness rewards, including the answer-extraction traps."""

import threading

import pytest

import rewards

PROMPT = "What is 47 + 38? End with 'Answer: <number>'."
CHAT = [{"role": "assistant", "content": "Adding gives 85.\nAnswer: 85"}]

NUMERIC_CASES = [
    ("Answer: 85", "85", 1.0),
    ("47 + 38 = 85\nAnswer: 85", "85", 1.0),
    ("The answer is 85.", "85", 1.0),
    ("I think it's 84. Answer: 85", "85", 1.0),
    ("Answer: 85. (I first thought 84)", "85", 1.0),
    ("Answer: 84", "85", 0.0),
    ("\\boxed{85}", "85", 1.0),
    ("So 47+38=85", "85", 1.0),
    ("The sum is 85 apples", "85", 1.0),
    ("<answer>85</answer>", "85", 1.0),
    ("<think>47+38 is 85</think><answer> 85 </answer>", "85", 1.0),
    (CHAT, "85", 1.0),
    ([{"role": "assistant", "content": [{"type": "text", "text": "Answer: 85"}]}], "85", 1.0),
    # traps
    ("47 + 38", "85", 0.0),
    ("47 38", "85", 0.0),
    ("<answer></answer>", "85", 0.0),
    ("<answer>   </answer> 85", "85", 0.0),
    ("<answer>85</answer><answer>85</answer>", "85", 0.0),
    ("<answer>84</answer><answer>85</answer>", "85", 0.0),
    ("<think>Answer: 85</think>", "85", 0.0),
    ("<think>Answer: 85</think><answer>84</answer>", "85", 0.0),
    ("<think>the answer is 85", "85", 0.0),
    ("<answer>85", "85", 0.0),
    ("", "85", 0.0),
    ("no idea", "85", 0.0),
    ("Answer: 850", "85", 0.0),
    ("Answer: 8.5", "85", 0.0),
    # number formats
    ("Answer: 1,234", "1234", 1.0),
    ("Answer: $1,234.50", "1234.5", 1.0),
    ("Answer: -7", "-7", 1.0),
    ("Answer: −7", "-7", 1.0),
    ("Answer: 7", "-7", 0.0),
    ("Answer: 3/4", "0.75", 1.0),
    ("Answer: \\frac{3}{4}", "3/4", 1.0),
    ("Answer: 50%", "50", 1.0),
    ("Answer: 12 dollars", "12", 1.0),
    ("Answer: 12.0", "12", 1.0),
    ("Answer: 0.1", "0.10", 1.0),
    ("Answer: 85", "Natalia sold 48 clips... #### 85", 1.0),
    ("Answer: 72", "#### 72", 1.0),
    ("Answer: 85 ✅ 答案", "85", 1.0),
    ("Answer: 85", "", None),
    ("Answer: 85", "eighty-five", None),
]


@pytest.mark.parametrize("completion,gold,expected", NUMERIC_CASES)
def test_correct_numeric_finds_the_final_answer_and_avoids_traps(completion, gold, expected):
    score = rewards.get("correct_numeric")([completion], answer=[gold], prompts=[PROMPT])
    assert score == [expected]


def test_correct_numeric_scale_tolerance_and_partial_credit():
    assert rewards.get("correct_numeric", scale=2.0)(["Answer: 85"], answer=["85"]) == [2.0]
    assert rewards.get("correct_numeric", tolerance=0.01)(["Answer: 100.5"], answer=["100"]) == [1.0]
    partial = rewards.get("correct_numeric", partial=True)
    assert partial(["Answer: 95", "Answer: 115", "Answer: 200"], answer=["100"] * 3) == [0.5, 0.25, 0.0]


def test_correct_numeric_without_answer_column_is_a_counted_fault():
    reward = rewards.get("correct_numeric")
    assert reward(["Answer: 1", "Answer: 2"]) == [None, None]
    [event] = reward.drain_events()
    assert event["kind"] == "exception" and "'answer'" in event["message"] and event["count"] == 2


def test_single_number_equal_to_an_operand_is_still_an_answer():
    assert rewards.get("correct_numeric")(["85"], answer=["85"], prompts=["What is 85 + 0?"]) == [1.0]


EXACT_CASES = [
    ("Answer: Paris", "Paris", 1.0),
    ("answer: paris.", "Paris", 1.0),
    ("<answer> New   York </answer>", "new york", 1.0),
    ("\\boxed{\\text{blue}}", "blue", 1.0),
    ("Paris", "Paris", 1.0),
    ("I believe it is Paris", "Paris", 0.0),
    ("Answer: London", "Paris", 0.0),
    ("<answer></answer>", "Paris", 0.0),
    ("<answer>Paris</answer><answer>Paris</answer>", "Paris", 0.0),
    ("<think>Answer: Paris</think>", "Paris", 0.0),
    ("", "Paris", 0.0),
    ("Answer: Paris", "", None),
]


@pytest.mark.parametrize("completion,gold,expected", EXACT_CASES)
def test_correct_exact(completion, gold, expected):
    assert rewards.get("correct_exact")([completion], answer=[gold]) == [expected]


MATH_CASES = [
    ("\\boxed{85}", "85", 1.0),
    ("\\boxed{84}", "85", 0.0),
    ("The answer is $\\frac{1}{2}$", "1/2", 1.0),
    ("so \\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\frac{2}{4}}", "0.5", 1.0),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", 1.0),
    ("\\boxed{\\sqrt{2}}", "$2^{1/2}$", 1.0),
    ("\\boxed{7} although the final answer is $72$", "7", 1.0),
    ("\\boxed{72} \\boxed{5}", "72", 0.0),
    ("<answer>1/2</answer>", "0.5", 1.0),
    ("<answer></answer> \\boxed{85}", "85", 0.0),
    ("<think>\\boxed{85}</think>", "85", 0.0),
    ("nothing here", "85", 0.0),
    ("\\boxed{85}", "", None),
]


@pytest.mark.parametrize("completion,gold,expected", MATH_CASES)
def test_correct_math(completion, gold, expected):
    reward = rewards.get("correct_math")
    assert reward([completion], answer=[gold]) == [expected]
    assert reward.drain_events() == []


def test_correct_math_ignores_echoed_prompt_expression():
    reward = rewards.get("correct_math")
    assert reward(["47 + 38", "85"], answer=["85", "85"], prompts=[PROMPT, PROMPT]) == [0.0, 1.0]


def test_correct_math_same_result_in_a_thread_as_in_the_main_thread():
    reward = rewards.get("correct_math")
    completions = ["\\boxed{\\frac{3}{6}}", "$0.5$", "\\boxed{2}"]
    main_thread = reward(completions, answer=["1/2"] * 3)
    result = {}
    thread = threading.Thread(target=lambda: result.update(scores=reward(completions, answer=["1/2"] * 3)))
    thread.start()
    thread.join()
    assert main_thread == result["scores"] == [1.0, 1.0, 0.0]


FAST_PATH_PREDICTIONS = [
    "\\boxed{85}", "so \\boxed{ 84 }", "\\boxed{-85}", "\\boxed{0} done", "$\\boxed{85}$ apples, 3 more",
    "Step 7: \\boxed{70}", "\\boxed{1,234}", "\\boxed{1,234,567}", "\\boxed{007}", "\\boxed{\\frac{170}{2}}",
    "\\boxed{\\dfrac{-170}{2}}", "\\boxed{\\frac{7}{3}}", "The pens cost $12 each, so \\boxed{85}.",
    "\\boxed{1,23}", "\\boxed{85.0}", "\\boxed{85} \\boxed{85}", "\\fbox{85}",
]


@pytest.mark.parametrize("gold", ["85", "-85", "0", "1234", "1234567", "7"])
def test_math_fast_path_agrees_with_math_verify(gold):
    from rewards.mathcheck import fast_judgement, judge

    for prediction in FAST_PATH_PREDICTIONS:
        verdict = fast_judgement(gold, prediction)
        if verdict is not None:
            assert verdict == judge((gold, prediction)), (gold, prediction)
    assert fast_judgement(gold, "\\boxed{85}") is not None


GSM8K_CASES = [
    ("gsm8k_strict", "She has 72 clips.\n#### 72", "#### 72", 1.0),
    ("gsm8k_strict", "#### 1,200", "1200", 1.0),
    ("gsm8k_strict", "The answer is 72", "72", 0.0),
    ("gsm8k_strict", "#### 71", "72", 0.0),
    ("gsm8k_strict", "#### 72", "", None),
    ("gsm8k_flexible", "The answer is 72", "72", 1.0),
    ("gsm8k_flexible", "It costs $1,200.", "1200", 1.0),
    ("gsm8k_flexible", "72 then 73", "72", 0.0),
    ("gsm8k_flexible", "", "72", 0.0),
]


@pytest.mark.parametrize("name,completion,gold,expected", GSM8K_CASES)
def test_gsm8k(name, completion, gold, expected):
    assert rewards.get(name)([completion], answer=[gold]) == [expected]


COUNTDOWN_CASES = [
    ("<answer>(25 - 5) * 2</answer>", 40, [25, 5, 2, 7], 1.0),
    ("<answer>25 + 5 * 3 = 40</answer>", 40, [25, 5, 3], 1.0),
    ("Answer: 7 × 6 − 2", 40, [7, 6, 2], 1.0),
    ("<answer>25 + 25 - 10</answer>", 40, [25, 10, 5], 0.1),
    ("<answer>25 + 15</answer>", 40, [25, 5, 3], 0.1),
    ("<answer>25 + 5</answer>", 40, [25, 5, 3], 0.1),
    ("<answer>2 ** 5 + 8</answer>", 40, [2, 5, 8], 0.0),
    ("<answer>__import__('os')</answer>", 40, [2, 5, 8], 0.0),
    ("<answer>8 / (5 - 5)</answer>", 40, [8, 5, 5], 0.0),
    ("<answer></answer>", 40, [8, 5], 0.0),
    ("<think>(25 - 5) * 2</think>", 40, [25, 5, 2], 0.0),
]


@pytest.mark.parametrize("completion,target,nums,expected", COUNTDOWN_CASES)
def test_countdown(completion, target, nums, expected):
    assert rewards.get("countdown")([completion], target=[target], nums=[nums]) == [expected]


@pytest.mark.parametrize("completion,expected", [
    ("Answer: 85", 0.5), ("Answer: 8.5", 0.0), ("Answer: 85.0", 0.5), ("no number", 0.0), ("<answer></answer>", 0.0),
])
def test_integer_answer(completion, expected):
    assert rewards.get("integer_answer")([completion]) == [expected]


def test_long_completion_is_scored_quickly():
    text = ("Let me think step by step. 12 + 7 = 19. " * 5000) + "Answer: 85"
    assert rewards.get("correct_numeric")([text], answer=["85"]) == [1.0]


# --- structured golds, unparseable golds, the multi-answer rule, bare LaTeX after the marker ---

MATRIX = "\\begin{pmatrix} 1 & 2 \\\\ 3 & 19 \\end{pmatrix}"
CIRCLE = "(x + 2)^2 + (y - 3)^2"
STRUCTURED_MATH_CASES = [
    ("\\boxed{19}", MATRIX, 0.0),  # the matrix's last entry is not the matrix
    ("Answer: 19", MATRIX, 0.0),
    ("\\boxed{1}", MATRIX, 0.0),
    ("\\boxed{\\begin{bmatrix} 1 & 2 \\\\ 3 & 19 \\end{bmatrix}}", MATRIX, 1.0),
    (f"Answer: {MATRIX}", MATRIX, 1.0),
    (f"<answer>{MATRIX}</answer>", MATRIX, 1.0),
    ("\\boxed{3}", CIRCLE, 0.0),
    ("\\boxed{2}", CIRCLE, 0.0),
    (f"Answer: {CIRCLE}", CIRCLE, 1.0),
    ("\\boxed{x^2 + 4x + 4 + y^2 - 6y + 9}", CIRCLE, 1.0),
    ("\\boxed{19}", "(1, 19)", 0.0),
    ("\\boxed{(19, 1)}", "(1, 19)", 0.0),
    ("Answer: (1, 19)", "(1, 19)", 1.0),
    ("\\boxed{7}", "[-2, 7)", 0.0),
    ("\\boxed{[-2, 7]}", "[-2, 7)", 0.0),
    ("\\boxed{[-2, 7)}", "[-2, 7)", 1.0),
    ("\\boxed{2}", "\\{1, 2\\}", 0.0),
    ("\\boxed{\\{2, 1\\}}", "\\{1, 2\\}", 1.0),
    ("\\boxed{3}", "y = 2x + 3", 0.0),
    ("Answer: y = 3 + 2x", "y = 2x + 3", 1.0),
    ("\\boxed{5}", "5\\sqrt{2}", 0.0),
    ("\\boxed{\\sqrt{50}}", "5\\sqrt{2}", 1.0),
]


@pytest.mark.parametrize("completion,gold,expected", STRUCTURED_MATH_CASES)
def test_correct_math_compares_a_structured_gold_as_a_whole(completion, gold, expected):
    reward = rewards.get("correct_math")
    assert reward([completion], answer=[gold]) == [expected]
    assert reward.drain_events() == []


@pytest.mark.parametrize("name", ["correct_numeric", "gsm8k_strict", "gsm8k_flexible"])
@pytest.mark.parametrize("gold", [MATRIX, CIRCLE, "(1, 19)", "[-2, 7)", "y = 2x + 3", "5\\sqrt{2}", "1, 2"])
def test_numeric_rewards_cannot_judge_a_structured_gold(name, gold):
    assert rewards.get(name)(["\\boxed{19}", "Answer: 19", "#### 19"], answer=[gold] * 3) == [None, None, None]


@pytest.mark.parametrize("gold", ["forty two", "Answer is forty two.", "eighty-five", "\\text{no solution} because"])
def test_correct_math_gold_in_words_is_none_never_a_product_of_letters(gold):
    from rewards.mathcheck import judge, parsed_gold

    assert parsed_gold(gold) == []
    assert judge((gold, gold)) is None
    assert rewards.get("correct_math")([gold, "\\boxed{42}"], answer=[gold, gold]) == [None, None]


@pytest.mark.parametrize("gold,expected_type", [
    (MATRIX, "Matrix"), (CIRCLE, "Add"), ("(1, 19)", "Interval"), ("\\{1, 2\\}", "FiniteSet"),
    ("y = 2x + 3", "Equality"), ("\\frac{\\sqrt{505}}{7}", "Mul"), ("\\text{Devon}", "Symbol"), ("12 dollars", "Integer"),
    ("\\boxed{\\frac{3}{4}}", "Rational"), ("$1,234.50", "Float"),
])
def test_correct_math_parses_the_whole_gold(gold, expected_type):
    from rewards.mathcheck import parsed_gold

    objects = [item for item in parsed_gold(gold) if not isinstance(item, str)]
    assert objects and expected_type in type(objects[0]).__name__, objects


# One rule for several stated answers, the same in every correctness reward: the last \boxed{} wins (a box
# beats an answer marker); without a box, the answer after the last marker.
MULTI_ANSWER_CASES = [
    ("\\boxed{5} then \\boxed{72}", "72", 1.0),
    ("\\boxed{72} then \\boxed{5}", "72", 0.0),
    ("\\boxed{72}, \\boxed{5}", "72", 0.0),
    ("Answer: 5\nso the result is \\boxed{72}", "72", 1.0),
    ("\\boxed{72}\nAnswer: 5", "72", 1.0),
    ("Answer: 5\nAnswer: 72", "72", 1.0),
    ("Answer: 72\nAnswer: 5", "72", 0.0),
    ("\\boxed{72, 5}", "72", 0.0),  # one stated answer offering several values is wrong
]


@pytest.mark.parametrize("name", ["correct_math", "correct_numeric", "correct_exact"])
@pytest.mark.parametrize("completion,gold,expected", MULTI_ANSWER_CASES)
def test_one_multi_answer_rule_for_every_correctness_reward(name, completion, gold, expected):
    assert rewards.get(name)([completion], answer=[gold]) == [expected]


def test_stated_answer_is_the_one_rule():
    from rewards.extract import final_answer, stated_answer

    assert stated_answer("\\boxed{1} and \\boxed{2}") == ("2", "boxed")
    assert stated_answer("Answer: 3\n\\boxed{2}") == ("2", "boxed")
    assert stated_answer("Answer: 3\nAnswer: 4") == ("4", "marker")
    assert stated_answer("Answer:\n\n7") == ("7", "marker")
    assert stated_answer("it is 9") == ("it is 9", "region")
    assert final_answer("\\boxed{1} and \\boxed{2}") == ("2", "boxed")


@pytest.mark.parametrize("completion,gold,math,numeric", [
    ("Answer: \\frac{\\sqrt{505}}{7}", "\\frac{\\sqrt{505}}{7}", 1.0, None),
    ("Answer: \\frac{\\sqrt{505}}{7}", "505", 0.0, 0.0),
    ("Answer: \\frac{\\sqrt{505}}{7}", "7", 0.0, 0.0),
    ("Answer: \\sqrt{19}", "19", 0.0, 0.0),
    ("<answer>\\sqrt{19}</answer>", "19", 0.0, 0.0),
    ("The result is 5\\sqrt{2}", "2", 0.0, 0.0),
    ("Answer: 2\\pi", "2", 0.0, 0.0),
    ("Answer: \\dfrac{3}{4}", "0.75", 1.0, 1.0),
    ("Answer: -\\frac{1}{2}", "-0.5", 1.0, 1.0),
])
def test_bare_latex_after_the_marker_is_read_as_latex(completion, gold, math, numeric):
    assert rewards.get("correct_math")([completion], answer=[gold]) == [math]
    assert rewards.get("correct_numeric")([completion], answer=[gold]) == [numeric]


@pytest.mark.parametrize("text,value", [
    ("85", 85.0), ("1,234", 1234.0), ("$1,234.50", 1234.5), ("50%", 50.0), ("−7", -7.0), ("3/4", 0.75),
    ("\\frac{3}{4}", 0.75), ("-\\frac{1}{2}", -0.5), ("12 dollars", 12.0), ("90^\\circ", 90.0), ("5\\text{ cm}", 5.0),
    ("**42**", 42.0), ("The answer is 72", 72.0),
    ("eighty-five", None), ("5\\sqrt{2}", None), ("(1, 19)", None), ("x = 5", None), ("1, 2", None), ("2\\pi", None),
    ("4i", None), ("2x", None), (MATRIX, None), (CIRCLE, None), ("10^{3}", None), ("1/0", None),
])
def test_plain_number_is_exactly_one_number(text, value):
    from rewards.extract import plain_number

    assert plain_number(text) == value
