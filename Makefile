PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALL := $(BIN)/python -m pip install --quiet
# pytest-xdist workers for `make test`: one per core. The suite mostly waits (PostgreSQL,
# Chromium, child processes), so more overlap that waiting: `make test WORKERS=4`.
WORKERS ?= auto

.PHONY: demo test install install-dev bench clean screenshots

$(BIN)/python:
	$(PY) -m venv $(VENV)

install: $(BIN)/python
	$(INSTALL) -e . -e ./plugins/builtin -e ./plugins/repurpose -e ./plugins/mcp -e ./plugins/otel \
		-e ./plugins/bedrock

install-dev: $(BIN)/python
	$(INSTALL) -e ".[dev]" -e ./plugins/builtin -e ./plugins/repurpose -e ./plugins/mcp \
		-e "./plugins/otel[test]" -e ./plugins/bedrock
	npm ci --prefix tests/inspector/axe --no-audit --no-fund

demo: install
	rm -rf .demo
	NRLLM_HOME=$(CURDIR)/.demo $(BIN)/python -m nrllm_core.demo

# The docs' images of the inspector (docs/images/*.png), from a fresh run of the demo.
screenshots: install-dev
	$(BIN)/python scripts/screenshots.py

test: install-dev
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup --durations=25
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .
	$(BIN)/python -m mypy

bench: $(BIN)/python
	$(INSTALL) -e ".[dev,bench]" -e ./plugins/builtin -e ./plugins/repurpose -e ./plugins/mcp \
		-e "./plugins/otel[test]" -e ./plugins/bedrock
	$(BIN)/python benchmarks/bench_peers.py
	$(BIN)/python benchmarks/bench_processes.py
	$(BIN)/python benchmarks/bench_seam.py
	$(BIN)/python benchmarks/bench_store.py
	$(BIN)/python benchmarks/bench_run.py
	$(BIN)/python benchmarks/bench_stream.py
	$(BIN)/python benchmarks/bench_parallel.py
	$(BIN)/python benchmarks/bench_async.py
	$(BIN)/python benchmarks/bench_redact_false_alarms.py
	$(BIN)/python benchmarks/bench_mcp.py
	$(BIN)/python benchmarks/bench_mcp_serve.py
	$(BIN)/python benchmarks/bench_mcp_serve.py --revision handshake
	$(BIN)/python benchmarks/bench_cli.py
	$(BIN)/python benchmarks/bench_inspector.py
	$(BIN)/python benchmarks/bench_agentdojo.py --suite banking
	$(BIN)/python benchmarks/bench_agentdojo.py --suite workspace

clean:
	rm -rf $(VENV)
