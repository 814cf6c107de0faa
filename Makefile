# The two commands a user needs (see README.md).
.PHONY: setup browser quickstart test test-all

setup:
	bash scripts/setup.sh

# Debian's Chromium for the studio's real-browser test (Playwright drives it; it cannot download one).
browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
	  || echo "note: could not install chromium; the browser test will be skipped"

# Set up, then train the embedded SmolLM2-135M on the built-in arithmetic task (CPU is fine).
quickstart: setup
	.venv/bin/local-grpo train --config configs/cpu-quickstart.yaml

# Set up, then run the offline test suite.
test: setup browser
	.venv/bin/lint-imports
	.venv/bin/python -m pytest -q -m "not slow"

test-all: setup browser
	.venv/bin/lint-imports
	.venv/bin/python -m pytest -q
