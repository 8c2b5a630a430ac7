# Two entry points: `make demo` and `make test`. Both create the environment on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# torch is pinned here (dev/test environment only) so pip never resolves a multi-GB CUDA build;
# the package itself requires a range.
TORCH_PIN := torch==2.13.0
# DeepSpeed builds from source against the installed torch: without build isolation, or pip would
# resolve an unpinned torch into the build environment.
DEEPSPEED_PIN := deepspeed==0.19.8

# The tools: uv makes every environment (installing in parallel and hard-linking the files
# environments share from one cache beside them, .cache/uv), nox runs the suite's sessions
# (.ci/noxfile.py: one kind of test, or one runtime, each).
TOOLS := .venv-tools
TOOLS_STAMP := $(TOOLS)/.installed-uv-0.13.9-nox-2026.10.20
UV := $(abspath $(TOOLS))/bin/uv
NOX := $(TOOLS)/bin/nox -f .ci/noxfile.py
export UV_CACHE_DIR ?= $(CURDIR)/.cache/uv
export UV_LINK_MODE ?= hardlink
export UV_PYTHON_DOWNLOADS ?= never
# uv reads no pip.conf: it gets the folder of wheels pip is given here (this machine's CPU build of torch)
export UV_FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
export NL_PYTHON ?= $(shell command -v $(PYTHON))
UV_INSTALL := $(UV) pip install --quiet --python $(PY)

.PHONY: quick env tools test check demo bench clean browser labextension docs gpu-kit gpu-dry-run gpu-pass tpu-pass tpu-dry-run pictures

env: $(STAMP)

tools: $(TOOLS_STAMP)

$(TOOLS_STAMP):
	rm -rf $(TOOLS) && $(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet uv==0.13.9 nox==2026.10.20
	touch $(TOOLS_STAMP)

# Debian's Chromium for the browser tests (Playwright drives it; it never downloads a browser).
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
		{ echo "browser tests need Debian's chromium: apt-get install chromium"; exit 1; }

LABEXT := notebook_launcher/labextension/static/style.js

# The editable install writes the extension's shared data (install.json) into
# share/jupyter/labextensions/notebook-launcher; when that is already the development link into
# notebook_launcher/labextension, the file would land in the source tree. Unlink first, relink after.
LABEXT_LINK := $(VENV)/share/jupyter/labextensions/notebook-launcher

$(STAMP): pyproject.toml $(TOOLS_STAMP)
	$(PYTHON) -m venv $(VENV)
	$(UV_INSTALL) $(TORCH_PIN)
	if [ -L $(LABEXT_LINK) ]; then rm $(LABEXT_LINK); fi
	SKIP_JUPYTER_BUILDER=1 $(UV_INSTALL) -e ".[test,demo,docs,ray]"
	$(UV_INSTALL) --no-build-isolation $(DEEPSPEED_PIN)
	$(PY) -c "import torch; assert torch.version.cuda is None, 'the main environment needs the CPU build of torch'"
	if [ -f $(LABEXT) ]; then $(VENV)/bin/jupyter-builder develop --overwrite . >/dev/null; fi
	touch $(STAMP)

# The JupyterLab extension: built with npm and JupyterLab's builder, linked into the environment.
$(LABEXT): $(STAMP) labextension/node_modules labextension/package.json labextension/package-lock.json labextension/tsconfig.json \
		$(wildcard labextension/src/*.ts) $(wildcard labextension/style/*)
	cd labextension && PATH="$(abspath $(VENV))/bin:$$PATH" npm run build:prod
	$(VENV)/bin/jupyter-builder develop --overwrite . >/dev/null
	touch $(LABEXT)

labextension: $(LABEXT)

# The tests that start no process and no kernel: seconds in all.
PROCESS_FREE_TESTS = tests/unit

# Seconds: lint, format, types (Python and TypeScript), unit tests and doctests. `make test` runs it first.
check: $(STAMP) labextension/node_modules
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	cd labextension && npx tsc --noEmit -p . && npx eslint src
	$(PY) -m pytest -q $(PROCESS_FREE_TESTS) notebook_launcher trainer_core

# Minutes: make check, then every test but the slow ones (browsers, Ray clusters, whole notebooks,
# the fault soak: tests/conftest.py says which). `make test` runs them all.
quick: check
	$(PY) -m pytest -q -m "not slow" --durations=10

labextension/node_modules: labextension/package.json labextension/package-lock.json
	cd labextension && npm install --no-audit --no-fund --loglevel=error
	touch labextension/node_modules

# Everything: nox's sessions (.ci/noxfile.py: check; the GPU pass, dry; the docs site; the main suite;
# Ray clusters; browsers; collaboration; the kernel-level tests with Colab's and Kaggle's versions;
# torch_xla's CPU device) in stages (.ci/stages.py): sessions that leave the CPU idle much of the time
# run side by side (check beside the dry GPU pass and the docs); main, the clusters, the browsers
# and each runtime alone. A failed session does not stop the others; a table of every session's result and
# time ends the output, then the time taken and the environments' disk, the most they held at once
# too (CI removes the runtimes' CUDA builds of torch as it goes; CI keeps both under its targets:
# 35 minutes, 12 GB; du counts a file hard-linked in several once).
ENVIRONMENTS = $(VENV) $(TOOLS) .nox .cache/uv
test: $(STAMP) $(LABEXT) browser labextension/node_modules
	@start=$$(date +%s); rm -f .nox/disk.tsv; $(PY) .ci/stages.py; code=$$?; \
		echo "make test: $$(( $$(date +%s) - start )) s; the environments: $$($(PY) .ci/disk.py $(ENVIRONMENTS))"; \
		exit $$code

# The README's pictures, taken by the browser tests in a real JupyterLab (what a person sees), so they
# stay current: the live widget of test_browser and the sidebar of test_sidebar_browser.
pictures: $(STAMP) $(LABEXT) browser
	$(PY) -m pytest -q tests/browser/test_browser.py::test_the_live_widget_keeps_the_reader_then_the_notebook_keeps_the_launch \
		tests/browser/test_sidebar_browser.py::test_sidebar_sets_the_device_count_that_a_launch_uses
	cp test-artifacts/widget.png notebooks/images/widget.png
	cp test-artifacts/sidebar.png notebooks/images/sidebar.png

# The documentation site (MkDocs, Material, mkdocstrings) into build/site; --strict fails on any
# broken link, missing reference or docstring the API reference cannot read.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -f docs/mkdocs.yml

# The GPU pass (bench/gpu/pass.sh; docs/pages/how-to/gpus.md "The GPU pass"). `make gpu-kit` downloads here the wheels a
# lent GPU machine lacks (bench/gpu/kit.txt, for its Python 3.12; DeepSpeed's wheel built from its
# sdist), which travel with the working tree; `make gpu-pass REPORT=DIR` is what that machine runs.
# `make gpu-dry-run` runs the same pass here, in an environment built as the device's is (the nox
# session gpu_dry: torch first, then bench/gpu/device_base.txt, then the kit offline): a kit missing
# a wheel fails here, not there.
GPU_KIT ?= .gpu-kit
GPU_KIT_PYTHON ?= 3.12
GPU_KIT_PLATFORMS := $(foreach p,manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_17 manylinux2014 manylinux_2_12 manylinux2010 manylinux_2_5 manylinux1 linux,--platform $(p)_x86_64) --platform any
REPORT ?= build/gpu-pass

gpu-kit: $(STAMP)
	rm -rf $(GPU_KIT) && mkdir -p $(GPU_KIT)
	$(PY) -m pip download --quiet --no-deps --only-binary=:all: --python-version $(GPU_KIT_PYTHON) \
		--implementation cp --abi cp$(subst .,,$(GPU_KIT_PYTHON)) $(GPU_KIT_PLATFORMS) -d $(GPU_KIT) -r bench/gpu/kit.txt
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation $(DEEPSPEED_PIN) -w $(GPU_KIT)
	$(PY) bench/gpu/kit_check.py $(GPU_KIT) bench/gpu/kit.txt

gpu-dry-run: $(STAMP) $(TOOLS_STAMP)
	$(NOX) -s gpu_dry

gpu-pass:
	bash bench/gpu/pass.sh $(REPORT)

# The TPU pass (bench/tpu/pass.py): on a TPU machine (Colab, Kaggle, a Cloud TPU VM; torch_tpu or
# torch_xla installed there), the host's facts and a training launch on every chip with bf16,
# gather and a checkpoint, into REPORT_DIR/report.md. `make tpu-dry-run` runs it here on 2 CPU ranks.
TPU_REPORT ?= build/tpu-pass
tpu-pass:
	mkdir -p $(TPU_REPORT)
	python3 bench/gpu/contained.py $(TPU_REPORT)/leftover.txt -- python3 bench/tpu/pass.py $(TPU_REPORT)

tpu-dry-run: $(STAMP)
	mkdir -p $(TPU_REPORT)
	TPU_PASS_DEVICE=cpu $(PY) bench/gpu/contained.py $(TPU_REPORT)/leftover.txt -- $(PY) bench/tpu/pass.py $(TPU_REPORT)

demo: $(STAMP)
	$(PY) notebooks/run_notebook.py notebooks/quickstart.ipynb

bench: $(STAMP)
	$(PY) bench/output_path.py
	$(PY) bench/launch_overhead.py
	$(PY) bench/first_launch.py
	$(PY) bench/step_overhead.py
	$(PY) bench/log_overhead.py
	$(PY) bench/result_transfer.py
	$(PY) bench/spawn_start.py
	$(PY) bench/faults.py
	$(PY) bench/dist_cell.py
	$(PY) bench/big_model.py
	$(PY) bench/sharded_training.py
	$(PY) bench/compile_start.py

clean:
	rm -rf $(VENV) $(TOOLS) .nox .cache/uv .venv-colab .venv-kaggle .venv-xla .venv-rtc .venv-gpu-dry .gpu-kit .gpu-kit-dry .pytest_cache test-artifacts labextension/node_modules labextension/lib notebook_launcher/labextension
