# edgewise developer commands. `make help` lists them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: help install run test lint typecheck check bench spark-expected clean

help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $@

install: $(BIN)/.installed  ## create .venv and install edgewise with its dev tools and the spark extra (PySpark)

run: install  ## run the main example: HSL vehicle positions (bundled data) in command mode
	$(BIN)/edgewise run examples/hsl/pipeline.yaml
	@echo "positions written to out/hsl-positions/"

test: install  ## lint, type-check, then the test suite
	$(BIN)/ruff check src tests bench tools
	$(BIN)/mypy
	$(BIN)/python -m pytest

lint: install  ## ruff
	$(BIN)/ruff check src tests bench tools

typecheck: install  ## mypy --strict on src/
	$(BIN)/mypy

bench: install  ## the benchmark harness (writes bench/results/*.json; see BENCHMARKS.md); installs bytewax
	$(BIN)/python -m pip install --quiet bytewax
	$(BIN)/python bench/ysb_stateless.py
	$(BIN)/python bench/ysb_windowed.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/spark_ysb.py

spark-expected: install  ## recompute tests/data/spark_expected.json with real Spark (installs the spark extra)
	$(BIN)/python -m pip install --quiet -e '.[spark]'
	$(BIN)/python tools/spark_expected.py

clean:  ## remove .venv and outputs
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
