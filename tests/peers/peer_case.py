"""One row of a peer suite: a case from another project's reward tests, and the built-in that claims its semantics.

The peer suites (test_open_r1_rewards.py, test_trl_rewards.py) re-express other projects' reward
test cases as data: which file and test a case comes from, the peer's input and expected value,
and the built-in reward + parameters that claim the same semantics. Where our semantics differ by
design, `ours`/`expected` hold the adapted input/expectation and `why` says why in one line; a case
no built-in can claim has `not_ported` (a reason) and is skipped.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import pytest

import rewards

RAISES = "raises ValueError"


@dataclass(frozen=True)
class PeerCase:
    """A peer's test case and the built-in (name + params) that must reproduce it."""

    test: str                          # the peer's test class/function
    peer: str                          # the peer's reward function under test
    completions: tuple                 # the peer's completion texts (the peer wraps each as [{"content": text}])
    peer_expected: object              # the peer's expected scores (a list), or RAISES
    reward: str = ""                   # our built-in
    params: dict = field(default_factory=dict)
    answer: tuple | None = None        # gold answers (the peer's `solution`)
    completion_ids: tuple | None = None
    ours: tuple | None = None          # our completion texts when adapted (see why)
    expected: object = None            # our expected scores when adapted (see why); default peer_expected
    why: str = ""                      # one line: why the input or expectation is adapted
    tolerance: float = 1e-7            # the peer's own tolerance (assertAlmostEqual places, pytest.approx abs)
    thread: bool = False               # call the reward from a worker thread, as the peer does
    not_ported: str = ""               # why no built-in claims this case's semantics

    @property
    def adapted(self) -> bool:
        """True when input, params or expectation differ from the peer's (then `why` says why)."""
        return bool(self.why) or self.ours is not None or self.expected is not None


def case_id(case: PeerCase) -> str:
    """A readable pytest id: the peer's test name."""
    return case.test


def run_case(case: PeerCase) -> None:
    """Score the case with its built-in and compare with the (adapted) expectation."""
    if case.not_ported:
        pytest.skip(f"not ported: {case.not_ported}")
    assert (case.ours is None and case.expected is None) or case.why, f"{case.test}: an adapted case needs a reason"
    expected = case.peer_expected if case.expected is None else case.expected
    if expected == RAISES:
        with pytest.raises(ValueError, match="max_penalty"):
            rewards.get(case.reward, **case.params)
        return
    reward = rewards.get(case.reward, **case.params)
    texts = case.completions if case.ours is None else case.ours
    completions = [[{"content": text}] for text in texts]
    kwargs = {}
    if case.answer is not None:
        kwargs["answer"] = list(case.answer)
    if case.completion_ids is not None:
        kwargs["completion_ids"] = [list(ids) for ids in case.completion_ids]
    scores = in_worker_thread(reward, completions, kwargs) if case.thread else reward(completions, **kwargs)
    assert reward.drain_events() == [], f"{case.test}: the reward recorded faults"
    assert len(scores) == len(expected), (case.test, scores)
    for score, want in zip(scores, expected):
        if want is None:
            assert score is None, (case.test, scores, expected)
        else:
            assert score is not None and math.isclose(score, want, rel_tol=0.0, abs_tol=case.tolerance), \
                (case.test, scores, expected)


def in_worker_thread(reward, completions, kwargs) -> list:
    """The reward's scores computed off the main thread (math-verify's signal-based timeouts fail there)."""
    result, errors = {}, []

    def target():
        try:
            result["scores"] = reward(completions, **kwargs)
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    assert not errors, errors
    return result["scores"]


def counts(table: list[PeerCase]) -> dict:
    """How many cases the table holds, ports (a built-in claims them) and adapts."""
    ported = [c for c in table if not c.not_ported]
    return {"cases": len(table), "ported": len(ported), "adapted": sum(c.adapted for c in ported),
            "not_ported": len(table) - len(ported)}
