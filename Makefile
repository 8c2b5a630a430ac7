# Two entry points: `make demo` and `make test`. Both create the environment on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch is pinned here (dev/test environment only) so pip never resolves a multi-GB CUDA build;
# the package itself requires a range.
TORCH_PIN := torch==2.13.0

.PHONY: env test demo bench clean browser

env: $(STAMP)

# Debian's Chromium for the browser tests (Playwright drives it; it never downloads a browser).
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		{ echo "browser tests need Debian's chromium: apt-get install chromium"; exit 1; }

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH_PIN)
	$(PY) -m pip install --quiet -e ".[test,demo]"
	touch $(STAMP)

test: $(STAMP) browser
	$(PY) -m pytest

demo: $(STAMP)
	$(PY) notebooks/run_notebook.py notebooks/quickstart.ipynb

bench: $(STAMP)
	$(PY) bench/launch_overhead.py
	$(PY) bench/step_overhead.py
	$(PY) bench/log_overhead.py

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
