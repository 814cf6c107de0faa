"""Generate sample completions with a chosen model, in a separate process (never in the app's).

    python -m apps.generate < request.json > samples.jsonl
    request: {"model": "embedded"|folder|hub id, "prompts": [...], "answers": [...], "n": 4,
              "max_new_tokens": 64, "temperature": 1.0, "system_prompt": "..."}

`generate_samples` (called by the app) runs this module as a child with a time limit and returns
the sample dicts (prompt, answer, completion, group) the designer scores.
"""

from __future__ import annotations

import json
import subprocess
import sys

from local_grpo.errors import UserError

DEFAULT_TIMEOUT_S = 300


def generate_samples(request: dict, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[dict]:
    """Run this module in a child process; UserError with the child's last line when it fails."""
    prompts = [p for p in request.get("prompts", []) if str(p).strip()]
    if not prompts:
        raise UserError("prompts: give at least one prompt (one per line)")
    try:
        from apps.launcher import local_or_name, python_command

        request = {**request, "model": local_or_name(str(request.get("model") or "embedded"))}
        done = subprocess.run([*python_command(), "-m", "apps.generate"], input=json.dumps(request), text=True,
                              capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise UserError(f"generate: the model took longer than {timeout_s:g}s (try fewer prompts or tokens)") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise UserError(f"generate: {lines[-1] if lines else 'failed with code ' + str(done.returncode)}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main() -> int:
    request = json.load(sys.stdin)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from local_grpo import backends, models
    from local_grpo.generation import GenerationSettings, generate

    try:
        path = models.resolve(str(request.get("model") or "embedded"))
    except UserError as error:
        print(f"model: {error}", file=sys.stderr)
        return 2
    tokenizer = backends.prepare_tokenizer(AutoTokenizer.from_pretrained(path))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    prompts = [str(p) for p in request["prompts"] if str(p).strip()]
    answers = list(request.get("answers") or []) + [None] * len(prompts)
    n = max(1, int(request.get("n", 4)))
    system = request.get("system_prompt")
    settings = GenerationSettings(samples=n, temperature=float(request.get("temperature", 1.0)),
                                  max_new_tokens=int(request.get("max_new_tokens", 64)), seed=int(request.get("seed", 0)))
    for index, (prompt, answer) in enumerate(zip(prompts, answers)):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        [sampled] = generate(model, tokenizer, [messages], settings, sample=True, batch_index=index)
        for completion, _ in sampled:
            print(json.dumps({"prompt": prompt, "answer": answer, "completion": completion, "group": prompt}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
