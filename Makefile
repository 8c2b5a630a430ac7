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

.PHONY: quick env test check demo bench clean browser labextension docs gpu-kit gpu-dry-run gpu-pass pictures

env: $(STAMP)

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

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH_PIN)
	if [ -L $(LABEXT_LINK) ]; then rm $(LABEXT_LINK); fi
	SKIP_JUPYTER_BUILDER=1 $(PY) -m pip install --quiet -e ".[test,demo,docs,ray]"
	$(PY) -m pip install --quiet --no-build-isolation $(DEEPSPEED_PIN)
	if [ -f $(LABEXT) ]; then $(VENV)/bin/jupyter-builder develop --overwrite . >/dev/null; fi
	touch $(STAMP)

# The JupyterLab extension: built with npm and JupyterLab's builder, linked into the environment.
$(LABEXT): $(STAMP) labextension/node_modules labextension/package.json labextension/package-lock.json labextension/tsconfig.json \
		$(wildcard labextension/src/*.ts) $(wildcard labextension/style/*)
	cd labextension && PATH="$(abspath $(VENV))/bin:$$PATH" npm run build:prod
	$(VENV)/bin/jupyter-builder develop --overwrite . >/dev/null
	touch $(LABEXT)

labextension: $(LABEXT)

# Colab's and Kaggle's kernel versions (README "Tested versions"): the kernel-level tests run again
# with kernels started from these environments. Colab: torch 2.11, ipykernel 6.17, ipywidgets 7.7
# without the standalone `comm` package, accelerate 1.14. Kaggle: torch 2.10, ipykernel 6.17,
# ipywidgets 8.1.5 (with `comm`). Those torch releases exist on the package index only as CUDA
# builds (~3 GB each with their CUDA libraries, which `import torch` needs even without a GPU); the
# environments are kept between local runs, as the XLA one is. Both drop triton (0.6 GB each), which
# only torch.compile uses and these tests never call: CI's disk holds every environment at once.
COLAB_VENV := .venv-colab
COLAB_STAMP := $(COLAB_VENV)/.installed-torch-2.11
KAGGLE_VENV := .venv-kaggle
KAGGLE_STAMP := $(KAGGLE_VENV)/.installed-torch-2.10
KERNEL_TESTS := tests/kernel
KERNEL_EXTRAS := cloudpickle psutil scikit-learn tqdm matplotlib safetensors

$(COLAB_STAMP): pyproject.toml
	rm -rf $(COLAB_VENV) && $(PYTHON) -m venv $(COLAB_VENV)
	$(COLAB_VENV)/bin/pip install --quiet torch==2.11.0
	$(COLAB_VENV)/bin/pip install --quiet ipykernel==6.17.1 ipywidgets==7.7.1 accelerate==1.14.0 $(KERNEL_EXTRAS)
	$(COLAB_VENV)/bin/pip uninstall --quiet --yes triton  # last: installing accelerate brings it back
	! $(COLAB_VENV)/bin/python -c "import comm" 2>/dev/null  # Colab's kernel has no standalone comm
	touch $(COLAB_STAMP)

$(KAGGLE_STAMP): pyproject.toml
	rm -rf $(KAGGLE_VENV) && $(PYTHON) -m venv $(KAGGLE_VENV)
	$(KAGGLE_VENV)/bin/pip install --quiet torch==2.10.0
	$(KAGGLE_VENV)/bin/pip install --quiet ipykernel==6.17.1 ipywidgets==8.1.5 accelerate $(KERNEL_EXTRAS)
	$(KAGGLE_VENV)/bin/pip uninstall --quiet --yes triton  # last: installing accelerate brings it back
	touch $(KAGGLE_STAMP)

# torch_xla 2.9 pins torch 2.9, a CUDA build whose CUDA libraries (4.3 GB) are the very releases
# torch 2.10 takes (CUDA 12.8), so this environment links Kaggle's instead of installing a second copy
# (CI's disk ran out with both). Its CPU device (PJRT_DEVICE=CPU) runs the XLA launch path here.
XLA_VENV := .venv-xla
XLA_STAMP := $(XLA_VENV)/.installed-sharing-cuda
TORCH_2_9_DEPS := filelock fsspec jinja2 networkx sympy typing-extensions
TORCH_XLA_2_9_DEPS := absl-py numpy pyyaml requests
SITE_PACKAGES = $$($(1)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')

$(XLA_STAMP): $(KAGGLE_STAMP)
	rm -rf $(XLA_VENV) && $(PYTHON) -m venv $(XLA_VENV)
	$(XLA_VENV)/bin/pip install --quiet --no-deps torch==2.9.0 torch_xla==2.9.0
	$(XLA_VENV)/bin/pip install --quiet $(TORCH_2_9_DEPS) $(TORCH_XLA_2_9_DEPS)
	ln -s $(call SITE_PACKAGES,$(abspath $(KAGGLE_VENV)))/nvidia $(call SITE_PACKAGES,$(XLA_VENV))/nvidia
	$(XLA_VENV)/bin/pip install --quiet ipykernel ipywidgets cloudpickle psutil scikit-learn safetensors
	PJRT_DEVICE=CPU $(XLA_VENV)/bin/python -c 'import torch_xla.core.xla_model as xm; xm.xla_device()'
	touch $(XLA_STAMP)

# JupyterLab with real-time collaboration (jupyter-collaboration), for the collaborator's view of a
# launch (tests/browser/test_collaboration_browser.py): the main environment's packages, through a .pth
# file, with jupyter-collaboration on top (its server extension and lab extension then load only in
# servers this environment starts; the main environment's JupyterLab stays without it).
RTC_VENV := .venv-rtc
RTC_STAMP := $(RTC_VENV)/.installed-collaboration-5

$(RTC_STAMP): $(STAMP)
	rm -rf $(RTC_VENV) && $(PYTHON) -m venv $(RTC_VENV)
	echo "import site; site.addsitedir('$(call SITE_PACKAGES,$(abspath $(VENV)))')" \
		> $(call SITE_PACKAGES,$(RTC_VENV))/main_environment.pth
	$(RTC_VENV)/bin/pip install --quiet jupyter-collaboration==5.0.4
	touch $(RTC_STAMP)

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

# The dry GPU pass comes first and its environment goes after it: CI's disk then holds the other
# environments (about 19 GB in all) without it.
test: check $(STAMP) $(LABEXT) browser $(RTC_STAMP)
	@echo "--- the GPU pass, dry (no GPU here: the kit is complete, the pass runs, the GPU tests skip) ---"
	$(MAKE) gpu-dry-run
	rm -rf $(GPU_DRY_VENV) .gpu-kit-dry
	$(MAKE) $(COLAB_STAMP) $(KAGGLE_STAMP) $(XLA_STAMP)
	$(PY) -m pytest --durations=25  # the slowest tests, for keeping CI under its 45 minutes
	@echo "--- again with Colab's kernel versions (torch 2.11, ipykernel 6.17, ipywidgets 7.7, no comm) ---"
	PYTHONPATH=$(CURDIR) NL_TEST_KERNEL_PYTHON=$(abspath $(COLAB_VENV))/bin/python $(PY) -m pytest $(KERNEL_TESTS)
	@echo "--- again with Kaggle's kernel versions (torch 2.10, ipykernel 6.17, ipywidgets 8.1.5) ---"
	PYTHONPATH=$(CURDIR) NL_TEST_KERNEL_PYTHON=$(abspath $(KAGGLE_VENV))/bin/python $(PY) -m pytest $(KERNEL_TESTS)
	@echo "--- the XLA path, on torch_xla's CPU device ---"
	PYTHONPATH=$(CURDIR) NL_TEST_XLA=1 NL_TEST_KERNEL_PYTHON=$(abspath $(XLA_VENV))/bin/python $(PY) -m pytest tests/xla/test_xla.py
	@echo "--- the documentation site ---"
	$(MAKE) docs

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
# `make gpu-dry-run` runs the same pass here in a venv built as the device is (torch first, then
# bench/gpu/device_base.txt, then the kit offline): a kit missing a wheel fails here, not there.
GPU_KIT ?= .gpu-kit
GPU_KIT_PYTHON ?= 3.12
GPU_KIT_PLATFORMS := $(foreach p,manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_17 manylinux2014 manylinux_2_12 manylinux2010 manylinux_2_5 manylinux1 linux,--platform $(p)_x86_64) --platform any
GPU_DRY_VENV := .venv-gpu-dry
GPU_DRY_STAMP := $(GPU_DRY_VENV)/.installed
LOCAL_PYTHON_VERSION = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
REPORT ?= build/gpu-pass

gpu-kit: $(STAMP)
	rm -rf $(GPU_KIT) && mkdir -p $(GPU_KIT)
	$(PY) -m pip download --quiet --no-deps --only-binary=:all: --python-version $(GPU_KIT_PYTHON) \
		--implementation cp --abi cp$(subst .,,$(GPU_KIT_PYTHON)) $(GPU_KIT_PLATFORMS) -d $(GPU_KIT) -r bench/gpu/kit.txt
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation $(DEEPSPEED_PIN) -w $(GPU_KIT)
	$(PY) bench/gpu/kit_check.py $(GPU_KIT) bench/gpu/kit.txt

$(GPU_DRY_STAMP): bench/gpu/device_base.txt
	$(PYTHON) -m venv $(GPU_DRY_VENV)
	$(GPU_DRY_VENV)/bin/pip install --quiet $(TORCH_PIN)
	$(GPU_DRY_VENV)/bin/pip install --quiet -r bench/gpu/device_base.txt
	touch $(GPU_DRY_STAMP)

gpu-dry-run: $(GPU_DRY_STAMP)
	$(MAKE) gpu-kit GPU_KIT=.gpu-kit-dry GPU_KIT_PYTHON=$(LOCAL_PYTHON_VERSION)
	GPU_PYTHON=$(abspath $(GPU_DRY_VENV))/bin/python GPU_KIT=.gpu-kit-dry GPU_PASS_QUICK=1 \
		bash bench/gpu/pass.sh $(if $(filter build/gpu-pass,$(REPORT)),build/gpu-dry-run,$(REPORT))

gpu-pass:
	bash bench/gpu/pass.sh $(REPORT)

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

clean:
	rm -rf $(VENV) $(COLAB_VENV) $(KAGGLE_VENV) $(XLA_VENV) $(RTC_VENV) $(GPU_DRY_VENV) .gpu-kit .gpu-kit-dry .pytest_cache test-artifacts labextension/node_modules labextension/lib notebook_launcher/labextension
