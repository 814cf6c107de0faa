"""Tool use on the CPU: does the embedded SmolLM2 learn to call the calculator? (docs/tasks.md, "Measured")

Trains `word_problems` (no tool) and `calculator` (the same problems with a calculator tool) from
configs/cpu-quickstart.yaml for the same wall time (--minutes of training each; the two train side by
side, one process each, so they share the machine's load alike), with each task's own system prompt and
data options, --max-completion-length tokens (the call, its result and the answer must fit), the
quickstart's 16 completions a step in micro-batches of 4 (memory), a constant
learning rate (a cosine schedule needs a known step count), no p_ref and --force (the learnability gate
would stop both: the base solves none). Then, per task:
- tool calls per completion over the first and the last --window steps (completions.jsonl `turns`), and
  the share of completions with at least one call;
- held-out greedy success of the base and the trained model: `local-grpo eval --run RUN --compare
  --samples 0` (the run's max_completion_length; the tool loop runs for the calculator task).
Writes bench/results/tool_use.json (and keeps the runs under --work).

    python bench/tool_use.py --minutes 10 [--work /tmp/tool-use] [--seed 42]
    python bench/tool_use.py --side calculator --minutes 10 --run DIR   # one side (what the main process starts)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TASKS = ("word_problems", "calculator")
CALL_PREFIX = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "'  # TRL's qwen2_5 format


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10.0, help="training wall time per task")
    parser.add_argument("--max-completion-length", type=int, default=96)
    parser.add_argument("--max-seq-length", type=int, default=416, help="the calculator prompt is ~290 tokens")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--window", type=int, default=3,
                        help="steps pooled at the start and at the end (at most half the run's steps)")
    parser.add_argument("--work", default="/tmp/tool-use")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "tool_use.json"))
    parser.add_argument("--side", choices=TASKS, help="train one task into --run (internal)")
    parser.add_argument("--run", help="the run directory of --side")
    parser.add_argument("--analyze-only", action="store_true", help="skip training and eval: read the runs in --work")
    return parser.parse_args()


def train_side(args) -> None:
    """Train one task for --minutes of wall time into --run."""
    from local_grpo import config as config_mod
    from local_grpo import train

    config = config_mod.load(os.path.join(REPO, "configs", "cpu-quickstart.yaml"))
    config.data.task, config.data.task_options, config.data.system_prompt = args.side, {}, None
    config.model.max_seq_length = args.max_seq_length
    g = config.grpo
    g.max_completion_length, g.max_steps, g.lr_scheduler_type, g.seed = args.max_completion_length, 500, "constant", args.seed
    g.save_steps = 1000  # the adapter is saved at the end
    g.max_minutes = args.minutes  # the same training wall time for both tasks
    # 16 completions a step as the quickstart's, in micro-batches of 4: the calculator's ~390-token sequences
    # at 16 a micro-batch held ~10 GB of activations and were killed for memory on a shared 23 GB machine
    g.per_device_train_batch_size, g.gradient_accumulation_steps = 4, 4
    g.p_ref_prompts = 0  # the base is measured by eval --compare; the time goes to training
    config.output_dir = args.run
    # force: the learnability gate would stop both tasks (the base solves none) before the measurement
    train.train(config, progress=False, force=True)


def tool_calls(record: dict) -> int:
    return sum(len(turn.get("tool_calls") or []) for turn in record.get("turns") or [])


def side_result(run_dir: str, window: int) -> dict:
    """What one run measured: steps, time, success and tool calls at the start and the end, its eval."""
    from local_grpo import rundir

    run = rundir.RunDir(run_dir)
    summary = run.read_json(rundir.SUMMARY) or {}
    records = run.completions()
    steps = sorted({r["step"] for r in records})
    window = max(1, min(window, len(steps) // 2))  # the first and the last steps do not overlap
    first, last = set(steps[:window]), set(steps[-window:])

    def stats(chosen: set) -> dict:
        rows = [r for r in records if r["step"] in chosen]
        calls = [tool_calls(r) for r in rows]
        return {"steps": sorted(chosen), "completions": len(rows),
                "success": round(sum(r["success"] for r in rows) / len(rows), 4),
                "tool_calls_per_completion": round(sum(calls) / len(rows), 4),
                "share_with_a_tool_call": round(sum(c > 0 for c in calls) / len(rows), 4),
                "tool_call_text_without_a_parsed_call": sum("<tool_call>" in r["completion"] for r in rows)}

    compare = run.read_json(rundir.EVAL_COMPARE) or {}
    metrics = run.metrics()
    return {"run": run_dir, "steps": summary.get("steps"), "train_seconds": summary.get("train_seconds"),
            "seconds_per_step": round(summary["train_seconds"] / summary["steps"], 1) if summary.get("steps") else None,
            "start": stats(first), "end": stats(last), "all_steps": stats(set(steps)),
            "trl_tools_call_frequency": [m.get("tools/call_frequency") for m in metrics if "tools/call_frequency" in m],
            "eval": {side: {k: compare[side].get(k) for k in ("pass@1_greedy", "format_rate", "mean_length", "tool_calls")}
                     for side in ("base", "trained") if side in compare},
            "eval_settings": {k: compare.get(k) for k in ("n_prompts", "samples", "max_new_tokens")}}


def call_probability(prompts: int = 8) -> dict:
    """How likely the base model is to write the right tool call unprompted: on the first held-out calculator
    prompts, the teacher-forced log-probability of the whole call (TRL's format, the problem's own
    expression), of its fixed part up to the expression (the format: a call of any expression starts so), and
    of its first token, beside that of the plain answer line 'Answer: <gold>'."""
    import math

    import torch

    from local_grpo import backends, config as config_mod, data, tasks

    config = config_mod.load(os.path.join(REPO, "configs", "cpu-quickstart.yaml"))
    config.data.task, config.data.task_options, config.data.system_prompt = "calculator", {}, None
    config = tasks.fill_defaults(config)
    loaded = backends.load_for_inference(config, None)
    tokenizer, model = loaded.tokenizer, loaded.model
    _, held_out = data.load_examples(config)
    rows = []
    for row in held_out[:prompts]:
        prompt = tokenizer.apply_chat_template(row["prompt"], tools=tasks.get_task("calculator").tools,
                                               tokenize=True, add_generation_prompt=True, return_dict=False)
        call = CALL_PREFIX + row["expression"] + '"}}\n</tool_call><|im_end|>'

        answer = f"Answer: {row['answer']}<|im_end|>"
        logps = {}
        for name, text in (("call", call), ("answer", answer)):
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].float()
            token_logps = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]
            logps[name] = (float(token_logps.sum()), float(token_logps[0]), token_logps)
        fixed = len(tokenizer(CALL_PREFIX, add_special_tokens=False)["input_ids"])  # the call up to its expression
        rows.append({"expression": row["expression"], "log10_p_call": round(logps["call"][0] / math.log(10), 2),
                     "log10_p_call_format": round(float(logps["call"][2][:fixed].sum()) / math.log(10), 2),
                     "p_first_call_token": round(math.exp(logps["call"][1]), 6),
                     "log10_p_answer_line": round(logps["answer"][0] / math.log(10), 2)})
    def median(key):
        values = sorted(r[key] for r in rows)
        return (values[len(values) // 2] + values[(len(values) - 1) // 2]) / 2

    return {"prompts": rows, "median_log10_p_call": median("log10_p_call"),
            "median_log10_p_call_format": median("log10_p_call_format"),
            "median_log10_p_answer_line": median("log10_p_answer_line"),
            "call_tokens": len(tokenizer('<tool_call>\n{"name": "calculator", "arguments": {"expression": "812 - 357"}}'
                                         '\n</tool_call><|im_end|>', add_special_tokens=False)["input_ids"])}


def main() -> None:
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.side:
        train_side(args)
        return
    runs = {task: os.path.join(args.work, task) for task in TASKS}
    started = time.time()
    if not args.analyze_only:
        os.makedirs(args.work, exist_ok=True)
        me = [sys.executable, os.path.abspath(__file__), "--minutes", str(args.minutes), "--seed", str(args.seed),
              "--max-completion-length", str(args.max_completion_length), "--max-seq-length", str(args.max_seq_length)]
        sides = [subprocess.Popen([*me, "--side", task, "--run", runs[task]], cwd=REPO) for task in TASKS]
        if any(side.wait() for side in sides):
            sys.exit("a training side failed")
        evals = [subprocess.Popen([sys.executable, "-m", "local_grpo.cli", "eval", "--run", runs[task], "--compare",
                                   "--samples", "0"], cwd=REPO, stdout=subprocess.DEVNULL) for task in TASKS]
        if any(e.wait() for e in evals):
            sys.exit("an eval failed")
    load = os.getloadavg()
    result = {"machine": {"cpus": os.cpu_count(), "load_average_at_this_write": [round(x, 2) for x in load]},
              "minutes_per_task": args.minutes, "max_completion_length": args.max_completion_length,
              "seed": args.seed, "wall_seconds": None if args.analyze_only else round(time.time() - started, 1),
              "tasks": {task: side_result(runs[task], args.window) for task in TASKS},
              "base_call_probability": call_probability()}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
