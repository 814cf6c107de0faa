"""One round of the interleaved overhead bench: the bare TRL trainer and `local-grpo train` take turns, a step each.

Both trainers live in one process and one OS thread, each in a greenlet, and each yields at every
`on_step_begin`. The loop below switches into each in turn and times how long it runs before it
yields again: that is one whole step of that trainer (log-prob, generation, rewards, loss, optimizer,
every callback, metrics line), from its step's begin to its next step's begin. A bare step and one of
ours are always seconds apart, so a change in the machine's speed lands on both, which separate
processes (bench/overhead.py's default) cannot arrange: there whole runs differed by up to 17 %.

One OS thread, not two: torch's OpenMP team belongs to the thread that calls it, and an idle second
team would spin on the cores after each switch.

    python bench/take_turns.py MODEL_DIR STEPS WORK_DIR VARIANT [ours-first]
    # WORK_DIR/turns.json: {"bare": [s, ...], VARIANT: [s, ...], "gc_s": ..., "trl_step_time": ...};
    # bare steps first unless ours-first
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time

import greenlet
from transformers import TrainerCallback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


class YieldEachStep(TrainerCallback):
    """Hands control back to the scheduling greenlet as each step begins."""

    def on_step_begin(self, args, state, control, **kwargs):
        greenlet.getcurrent().parent.switch()


def take_turns(players: dict) -> dict:
    """Run each player (a callable that trains with YieldEachStep) to its first step, then a step each in turn.

    Returns {name: step times in seconds} and, under "gc_s", the seconds Python's garbage collector
    ran inside each player's steps: the two share one collector, so one side's garbage can be
    collected in the other's step, and this shows how much time that could move. A player's first
    entry is its step 1, its last its final step together with the end of training (saving), which
    callers drop.
    """
    runs = {name: greenlet.greenlet(play) for name, play in players.items()}
    for run in runs.values():  # set-up: load, p_ref, build the trainer; each stops where its step 1 begins
        run.switch()
    steps = {name: [] for name in runs}
    gc_seconds = {name: 0.0 for name in runs}
    playing, gc_started = [None], [0.0]

    def count_gc(phase, info):
        if phase == "start":
            gc_started[0] = time.perf_counter()
        elif playing[0] is not None:
            gc_seconds[playing[0]] += time.perf_counter() - gc_started[0]

    gc.callbacks.append(count_gc)
    while any(not run.dead for run in runs.values()):
        for name, run in runs.items():
            if run.dead:
                continue
            playing[0], started = name, time.perf_counter()
            run.switch()
            steps[name].append(time.perf_counter() - started)
            playing[0] = None
    gc.callbacks.remove(count_gc)
    return {**steps, "gc_s": {name: round(s, 4) for name, s in gc_seconds.items()}}


def main() -> None:
    from bare_trl import bare_trainer, trl_step_times
    from overhead import SETTINGS, VARIANTS, train_argv

    from local_grpo.cli.common import config_from_args
    from local_grpo.cli.main import build_parser
    from local_grpo.train import train

    model_dir, steps, work_dir, variant = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    ours_first = sys.argv[5:] == ["ours-first"]
    args = build_parser().parse_args(train_argv(model_dir, steps, os.path.join(work_dir, "run"), VARIANTS[variant]))
    config = config_from_args(args)

    trl_step_time = {}  # TRL's own step_time (training_step: generation, rewards, loss) per step, each side

    def ours():
        from local_grpo.rundir import RunDir

        train(config, progress=False, callbacks=[YieldEachStep()])
        trl_step_time[variant] = [m["step_time"] for m in RunDir.open(config.output_dir).metrics() if "step_time" in m]

    def bare():
        trainer = bare_trainer(model_dir, steps, work_dir, SETTINGS)
        trainer.add_callback(YieldEachStep())
        trainer.train()
        trl_step_time["bare"] = trl_step_times(trainer)

    turns = take_turns({variant: ours, "bare": bare} if ours_first else {"bare": bare, variant: ours})
    with open(os.path.join(work_dir, "turns.json"), "w") as fh:
        json.dump({**turns, "trl_step_time": trl_step_time}, fh)


if __name__ == "__main__":
    main()
