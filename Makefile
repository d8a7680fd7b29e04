# Two commands set everything up: `make demo` and `make test` (each installs what it needs).
PYTHON ?= python3
UV_VERSION := 0.13.9
TOOLS := .tools
VENV := .venv
UV := $(TOOLS)/bin/uv
export LITELLM_LOCAL_MODEL_COST_MAP := True
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: install dev demo test test-fast test-process bench lint clean

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet uv==$(UV_VERSION)

# The lock file pins every version; --frozen refuses to install anything else. The demo needs
# only the runtime, installed quietly; --inexact keeps the development tools if they are there.
$(VENV)/.installed: $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --inexact --quiet --compile-bytecode --python $(PYTHON)
	touch $@

# Tests, lint and the benchmark also need the development extras (pytest, moto, ruff).
$(VENV)/.installed-dev: $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --extra dev --compile-bytecode --python $(PYTHON)
	touch $@ $(VENV)/.installed

# The project's own bytecode, compiled now rather than on every start: a process that may
# not write it (PYTHONDONTWRITEBYTECODE, a read-only checkout) compiles all 230 modules from
# source each time, 0.3-0.6 s before a user error is printed or a shard starts. Incremental:
# 0.04 s when nothing changed.
BYTECODE := $(VENV)/bin/python -m compileall -q flows tasks judges

install: $(VENV)/.installed
	@$(BYTECODE)

dev: $(VENV)/.installed-dev
	@$(BYTECODE)

# The demo's temporary Prefect API keeps its database in its own folder, away from any other
# Prefect process on the machine (SQLite does not like sharing).
demo: export PREFECT_HOME := $(CURDIR)/.demo-prefect
demo: install
	$(VENV)/bin/judgeflow evaluate examples/rag_eval.jsonl --judge-model judgeflow/offline \
		--output ./results --suite demo
	$(VENV)/bin/judgeflow compare examples/pairs.jsonl --judge-model judgeflow/offline \
		--output ./results --suite demo-compare
	$(VENV)/bin/judgeflow evaluate examples/agent_eval.jsonl --judge-model judgeflow/offline \
		--output ./results --suite demo-agents

# Tests come in tiers derived from what each test uses (tests/tiers.py, docs/testing.md).
# The fast tier (pure code and in-process flows) is CPU-bound: FAST_WORKERS workers (one per
# core by default), each with its own Prefect API. The process tier mostly waits on the servers
# it starts: TEST_WORKERS workers. A file runs whole on one worker, in order (--dist loadfile),
# but for the fast tier the cases of a parametrized test spread (--cases-apart).
# Tests marked `serial` (timing against an in-process fake provider, which other busy workers
# skew) run alone after the parallel pass, from the files that mark them (no second collection
# of the whole suite). A pure or flow test that starts a process fails: the fast tier stays
# process-free. Each pass prints its slowest tests and the time per tier.
FAST_WORKERS ?= auto
TEST_WORKERS ?= 4
# pytest rewrites every test module's asserts as it imports it and keeps the result in
# __pycache__, unless PYTHONDONTWRITEBYTECODE forbids it: then each worker rewrites all 130
# modules on every run (about 5 CPU-s a worker). The tests' own bytecode is only a cache.
test test-fast test-process: export PYTHONDONTWRITEBYTECODE :=
SERIAL_FILES = $(shell grep -rl --include='test_*.py' 'mark.serial' tests)

# The inner loop: pure tests and in-process flows, no process started but each worker's API.
test-fast: dev
	status=0; \
	$(VENV)/bin/pytest -n $(FAST_WORKERS) --dist loadfile --cases-apart --durations=15 \
		-m "not process and not serial" || status=$$?; \
	$(VENV)/bin/pytest -m "serial and not process" --durations=5 $(SERIAL_FILES) || status=$$?; \
	exit $$status

# Every test: the fast tier, then the process tier (its own pass, so nothing runs twice),
# the second even when the first fails. The fast tier's wall clock and CPU seconds are printed;
# with FAST_CPU_BOUND (CI sets it: .ci/run says why) it fails beyond that many CPU seconds.
FAST_CPU_BOUND ?=
test: dev
	status=0; \
	$(VENV)/bin/python .ci/cpu_bound.py "$(FAST_CPU_BOUND)" \
		$(MAKE) --no-print-directory test-fast || status=$$?; \
	$(MAKE) --no-print-directory test-process || status=$$?; exit $$status

test-process: dev
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --durations=15 -m "process"

lint: dev
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(TOOLS) $(VENV) results .pytest_cache

# The benchmark of record (docs/performance.md): writes bench/results.json, prints the table.
# BENCH_ARGS="--scale 0.25 --repeat 1" for a quick look.
bench: dev
	$(VENV)/bin/python -m bench.run $(BENCH_ARGS)
