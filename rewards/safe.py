"""SafeReward: the one wrapper every reward call goes through. It never raises.

An exception, a timeout, NaN/inf, a wrong-length or non-numeric return becomes None for the
affected completions, is counted in fault_counts and recorded as an event dict that the trainer
writes to events.jsonl (drain_events). After `alert_after` consecutive calls where every completion
failed, one alert event is recorded per streak. Weights are not handled here (the trainer's job).
"""

from __future__ import annotations

import contextvars
import math
import numbers
import threading
from collections import Counter

from rewards.worker import ChildDied, ChildTimeout

UNPICKLABLE_KWARGS = ("trainer_state", "log_extra", "log_metric")
CURRENT_FAULTS: contextvars.ContextVar[list | None] = contextvars.ContextVar("reward_faults", default=None)


def note_fault(kind: str, message: str, count: int = 1) -> None:
    """Record a fault from inside a built-in reward (e.g. one math-verify item timed out) on the calling SafeReward."""
    faults = CURRENT_FAULTS.get()
    if faults is not None:
        faults.append((kind, message, count))


def one_line(text: str, limit: int = 300) -> str:
    """Text squeezed to one short line."""
    return " ".join(str(text).split())[:limit]


class SafeReward:
    """A reward function with TRL's signature that never raises; faults become None scores and events."""

    def __init__(self, name: str, compute, source: str = "", alert_after: int = 3, params: dict | None = None):
        self.__name__ = name
        self.name = name
        self.params = dict(params or {})
        self.alert_after = alert_after
        self.calls = 0
        self.fault_counts: Counter = Counter()
        self._compute = compute
        self._source = source
        self._events: list[dict] = []
        self._failed_streak = 0
        self._alerted = False
        self._lock = threading.Lock()

    @property
    def source(self) -> str:
        """Source code of the underlying function (for the app's editor)."""
        return self._source() if callable(self._source) else self._source

    def __repr__(self) -> str:
        return f"SafeReward({self.name!r})"

    def __call__(self, completions, **kwargs) -> list[float | None]:
        """Score a batch; always returns len(completions) floats or Nones."""
        count = len(completions) if hasattr(completions, "__len__") else 0
        with self._lock:
            self.calls += 1
        faults: list = []
        token = CURRENT_FAULTS.set(faults)
        try:
            raw = self._compute(completions, **kwargs)
            scores = self._validated(raw, count, faults)
        except ChildTimeout as error:
            faults.append(("timeout", str(error), count))
            scores = [None] * count
        except ChildDied as error:
            faults.append(("exception", str(error), count))
            scores = [None] * count
        except Exception as error:
            text = str(error) if getattr(error, "from_child", False) else f"{type(error).__name__}: {error}"
            faults.append(("exception", text, count))
            scores = [None] * count
        finally:
            CURRENT_FAULTS.reset(token)
        self._record(faults, count)
        return scores

    def _validated(self, raw, count: int, faults: list) -> list[float | None]:
        """Check the raw return: a sequence of count numbers (or None); bad entries become None."""
        if isinstance(raw, (str, bytes, dict)) or not hasattr(raw, "__len__") or len(raw) != count:
            got = f"{len(raw)} values" if hasattr(raw, "__len__") and not isinstance(raw, str) else type(raw).__name__
            faults.append(("wrong_length", f"returned {got} for {count} completions", count))
            return [None] * count
        scores: list[float | None] = []
        bad = Counter()
        for value in list(raw):
            score, kind = checked_score(value)
            scores.append(score)
            if kind:
                bad[kind] += 1
        for kind, affected in bad.items():
            what = "NaN or infinite" if kind == "nan" else "non-numeric"
            faults.append((kind, f"{affected} {what} score(s)", affected))
        return scores

    def _record(self, faults: list, count: int) -> None:
        """Count faults, queue their events, and raise an alert after a streak of all-failed calls."""
        with self._lock:
            affected = 0
            for kind, message, number in faults:
                self.fault_counts[kind] += number
                affected += number
                self._events.append({"type": "reward_fault", "reward": self.name, "kind": kind,
                                     "message": one_line(message), "count": int(number)})
            if count > 0 and affected >= count:
                self._failed_streak += 1
            else:
                self._failed_streak = 0
                self._alerted = False
            if self._failed_streak >= self.alert_after and not self._alerted:
                self._alerted = True
                last = one_line(faults[-1][1]) if faults else ""
                self._events.append({"type": "alert", "reward": self.name,
                                     "message": f"reward {self.name} failed on every completion for "
                                                f"{self._failed_streak} calls in a row (last: {last})"})

    def drain_events(self) -> list[dict]:
        """Return and clear the pending events (plus those of the compute function, e.g. a user file's reloads)."""
        with self._lock:
            events, self._events = self._events, []
            compute_events = getattr(self._compute, "drain_events", None)
            if callable(compute_events):
                events = compute_events() + events
        return events


def checked_score(value) -> tuple[float | None, str | None]:
    """One returned value as a score and the fault kind it caused ("nan", "non_numeric" or None)."""
    if value is None:
        return None, None
    if isinstance(value, (str, bytes)) or not (isinstance(value, numbers.Real) or hasattr(value, "__float__")):
        return None, "non_numeric"
    try:
        score = float(value)
    except Exception:
        return None, "non_numeric"
    if not math.isfinite(score):
        return None, "nan"
    return score, None


def picklable_kwargs(kwargs: dict) -> dict:
    """The keyword arguments that can be sent to a child process (TRL's callables and trainer state dropped)."""
    import pickle

    kept = {}
    for key, value in kwargs.items():
        if key in UNPICKLABLE_KWARGS or callable(value):
            continue
        try:
            pickle.dumps(value)
        except Exception:
            continue
        kept[key] = value
    return kept
