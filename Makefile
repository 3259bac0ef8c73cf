# edgewise developer commands. `make help` lists them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: help install run run-hub test lint typecheck check bench fuzz mutate spark-expected clean

help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# the edge core only (no Spark, no dev tools): what `make run` needs
$(BIN)/.core: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(BIN)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(BIN)/.core $@

install: $(BIN)/.installed  ## create .venv and install edgewise with its dev tools and the spark extra (PySpark)

CITY ?= austin
run: $(BIN)/.core  ## the showcase: a day of Austin's bus fleet replayed live into an edge daemon, on a map (edge core only; CITY=helsinki: HSL's HFP recordings)
	$(BIN)/python examples/showcase.py --city $(CITY)

run-hub: $(BIN)/.installed  ## the Helsinki showcase as an edge and a hub from one file: edgewise serve and one continuous edgewise spark of examples/hsl/live.yaml, Spark's cells on the same map (needs Java 17)
	$(BIN)/python examples/showcase.py --city helsinki --hub

# the suite's time is mostly waiting (Spark micro-batches, daemons, a browser): three workers on two cores
TEST_WORKERS ?= 3
test: install  ## lint, type-check, then the test suite on TEST_WORKERS parallel workers (TEST_WORKERS=0: one process)
	$(BIN)/ruff check src tests bench tools examples
	$(BIN)/mypy
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

lint: install  ## ruff
	$(BIN)/ruff check src tests bench tools examples

typecheck: install  ## mypy --strict on src/
	$(BIN)/mypy

bench: install  ## the benchmark harness (writes bench/results/*.json; see BENCHMARKS.md); installs bytewax
	$(BIN)/python -m pip install --quiet bytewax
	$(BIN)/python bench/ysb_stateless.py
	$(BIN)/python bench/ysb_stateless_bounds.py
	$(BIN)/python bench/ysb_windowed.py
	$(BIN)/python bench/ysb_running.py
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/ingest.py --nice-rounds 4 --worker-nice 0,5 --out bench/results/ingest_worker_nice.json
	$(BIN)/python bench/spark_ysb.py
	$(BIN)/python bench/spark_ysb_start.py
	$(BIN)/python bench/spark_codegen.py
	$(BIN)/python bench/spark_keyed.py
	$(BIN)/python bench/spark_keyed_apis.py
	$(BIN)/python bench/hub_link.py

FUZZ_MINUTES ?= 30
FUZZ_ORACLES ?= crash,batch,reference,queue,partitions,split,spark,spark-reference,spark-split
fuzz: install  ## the differential pipeline fuzzer as a soak (FUZZ_MINUTES=30, FUZZ_ORACLES=all nine)
	$(BIN)/python -m tests.fuzz.soak --minutes $(FUZZ_MINUTES) --oracles $(FUZZ_ORACLES)

MUTATE_MINUTES ?= 1
mutate: install  ## planted bugs in a temporary copy: which the fuzzer and the suite catch (MUTATE_MINUTES=1 per bug)
	$(BIN)/python tools/mutate.py --minutes $(MUTATE_MINUTES)

spark-expected: install  ## recompute tests/data/spark_expected.json with real Spark (installs the spark extra)
	$(BIN)/python -m pip install --quiet -e '.[spark]'
	$(BIN)/python tools/spark_expected.py

clean:  ## remove .venv and outputs
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
