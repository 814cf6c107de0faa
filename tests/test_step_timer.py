"""The step-time breakdown: the timer's arithmetic, and the four phases of a real tiny run against TRL's step_time."""

from __future__ import annotations

import time

import pytest

from local_grpo import rundir

from local_grpo.rundir import STEP_TIME_KEYS as METRIC_KEYS
from local_grpo.train.step_timer import StepTimer


def test_phases_split_the_spans_so_they_sum_to_the_step():
    timer = StepTimer()
    timer.seconds.update(training_step=10.0, prepare=7.0, generation=5.0, rewards=0.5, logprobs=1.0,
                         optimizer=0.2, callbacks=0.1)
    phases = timer.phases()
    assert phases == pytest.approx({"generation": 5.0, "rewards": 0.5, "train": 3.0 + 1.0 + 0.2, "other": 0.5 + 0.1})
    assert sum(phases.values()) == pytest.approx(10.0 + 0.2 + 0.1)  # TRL's step_time + optimizer + callbacks


def test_take_is_per_step_excludes_the_eval_and_resets():
    timer = StepTimer()
    timer.seconds.update(training_step=4.0, prepare=2.0, generation=2.0, callbacks=3.0)
    taken = timer.take(2, exclude_other=2.0)
    assert taken == {"time/generation_s": 1.0, "time/rewards_s": 0.0, "time/train_s": 1.0, "time/other_s": 0.5}
    assert set(timer.take(1).values()) == {0.0}


def test_a_reentered_span_counts_once_and_a_stray_stop_is_ignored():
    timer = StepTimer()
    timer.stop("optimizer")  # e.g. the first callback after a resume
    with timer.span("generation"):
        with timer.span("generation"):
            time.sleep(0.01)
    assert 0.01 <= timer.seconds["generation"] < 0.5
    assert timer.depth["generation"] == 0 and timer.seconds["optimizer"] == 0.0


def test_eta_and_mean_breakdown_read_the_rows():
    rows = [{"step": s, "time/generation_s": 2.0, "time/rewards_s": 0.0, "time/train_s": 1.0, "time/other_s": 0.0}
            for s in (1, 2, 3)]
    rows[0]["time/generation_s"] = 20.0  # warm-up step
    assert rundir.eta_seconds(rows, max_steps=10) == pytest.approx(7 * (21 + 3 + 3) / 3, abs=0.1)
    assert rundir.mean_breakdown(rows)["time/generation_s"] == 2.0
    assert rundir.eta_seconds([{"step": 1, "reward": 0.5}], 10) is None


def test_a_real_run_logs_the_four_phases_and_they_sum_to_trls_step_time(tiny_config, one_torch_thread):
    from local_grpo import train

    tiny_config.grpo.max_steps, tiny_config.grpo.save_steps = 4, 4
    train.train(tiny_config, progress=False)
    rows = [r for r in rundir.RunDir(tiny_config.output_dir).metrics() if "reward" in r]
    assert len(rows) == 4
    for row in rows:
        assert all(row[k] >= 0 for k in METRIC_KEYS), row
        assert row["time/generation_s"] > 0 and row["time/train_s"] > 0 and row["time/rewards_s"] > 0
    later = rows[1:]  # step 1 carries one-off set-up inside TRL's first batch
    total = sum(sum(r[k] for k in METRIC_KEYS) for r in later)
    trl_total = sum(r["step_time"] for r in later)
    # ours adds the optimizer step and our callbacks (here mostly the forecast's refit over the first
    # 10 steps, ~0.1 s), which TRL's step_time does not cover; the rest lies inside TRL's step
    assert trl_total <= total * 1.001
    inside = sum(r["time/generation_s"] + r["time/rewards_s"] + r["time/train_s"] for r in later)
    assert inside <= trl_total * 1.01, (inside, trl_total)
    assert total - trl_total < 0.5 * len(later), (total, trl_total)
