# The two commands a user needs (see README.md).
.PHONY: setup quickstart test test-all

setup:
	bash scripts/setup.sh

# Set up, then train the embedded SmolLM2-135M on the built-in arithmetic task (CPU is fine).
quickstart: setup
	.venv/bin/local-grpo train --config configs/cpu-quickstart.yaml

# Set up, then run the test suite (offline; about 15 minutes on 2 CPU cores).
test: setup
	.venv/bin/python -m pytest -q -m "not slow"

test-all: setup
	.venv/bin/python -m pytest -q
