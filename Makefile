# tailscope — the two quickstart commands are `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# (vllm, browser and prometheus are phony too: their scripts keep their own stamps and return at once when done)
.PHONY: vllm browser prometheus demo test check lint lint-imports fmt typecheck unit integration bench setup clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# the C source of the client's compiled hot loop is built in place by the install (hatch_build.py): re-run it on change
$(STAMP): pyproject.toml hatch_build.py src/tailscope/client/_hot.c | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

## demo: set up and run a bench against the built-in simulated engine
demo: $(STAMP)
	$(BIN)/tailscope bench --requests 200 --concurrency 16 --input-tokens uniform:100:900 --output-tokens 128 \
		--json .tailscope/demo.json
	$(BIN)/tailscope runs list
	@echo "Next: the whole loop (trace, fix, gate, degradation drill) on the reference app: docs/tutorial.md"

## vllm: install the real vLLM CPU server into .venv-vllm/ for the integration tests (once; quiet when done)
vllm:
	@PY=$(PY) scripts/setup_vllm.sh

## browser: Debian's chromium + playwright (never a downloaded browser) for the HTML report tests
browser: $(STAMP)
	@VENV=$(VENV) scripts/setup_browser.sh

## prometheus: Debian's prometheus + promtool for the alert-rule tests
prometheus:
	@scripts/setup_prometheus.sh

## test: set up and run the whole suite (lint, types, unit, integration)
test: $(STAMP) vllm browser prometheus
	$(MAKE) check

check: lint typecheck lint-imports
	BIN=$(BIN) scripts/run_suite.sh

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

## lint-imports: the layer rules of docs/architecture.md ([tool.importlinter] in pyproject.toml)
lint-imports: $(STAMP)
	$(BIN)/lint-imports --no-logo

fmt: $(STAMP)
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

clean:
	rm -rf $(VENV) .tailscope .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
