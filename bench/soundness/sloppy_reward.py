"""A deliberately sloppy correctness reward: credit when the gold answer appears anywhere in the completion.

This is the substring check users write first (and the one issue trackers report being hacked):
`"85" in completion` is true for "85", but also for "185", "8500", "not 85", and for any completion
that lists many numbers. `local-grpo rewards probe` flags it; docs/soundness.md shows the run it gives.
"""


def contains_answer(completions, answer, **kwargs):
    """1.0 when the gold answer string occurs anywhere in the completion, else 0.0."""
    scores = []
    for completion, gold in zip(completions, answer):
        text = completion if isinstance(completion, str) else "".join(m.get("content", "") for m in completion)
        scores.append(1.0 if str(gold).strip() in text else 0.0)
    return scores
