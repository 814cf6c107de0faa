# The two commands a user needs (see README.md).
.PHONY: setup browser gguf quickstart test test-all

setup:
	bash scripts/setup.sh

# Debian's Chromium for the studio's real-browser test (Playwright drives it; it cannot download one).
browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
	  || echo "note: could not install chromium; the browser test will be skipped"

# Optional: llama.cpp for `export --format gguf` and its check: llama.cpp's converter, and the `gguf` extra
# (llama-cpp-python, compiled from its sdist: minutes). The llama.cpp tests are skipped without it; CI runs it.
gguf: setup
	bash scripts/setup_gguf.sh

# Set up, train the embedded SmolLM2-135M on the built-in arithmetic task (CPU is fine), then print
# held-out greedy pass@1 before and after training (the same 40 prompts, base model vs the adapter).
QUICKSTART_RUN := runs/quickstart-$(shell date +%Y%m%d-%H%M%S)
quickstart: setup
	.venv/bin/local-grpo train --config configs/cpu-quickstart.yaml --output $(QUICKSTART_RUN)
	.venv/bin/local-grpo eval --run $(QUICKSTART_RUN) --compare --samples 0

# Set up, then run the offline test suite.
test: setup browser
	.venv/bin/lint-imports
	.venv/bin/python -m pytest -q -m "not slow"

test-all: setup browser
	.venv/bin/lint-imports
	.venv/bin/python -m pytest -q
