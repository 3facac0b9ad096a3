# Two entry points (the README's first screen): `make example` and `make test`.
# Both set up what they need on a fresh Debian/Ubuntu machine: redis-server (apt-get)
# and a virtual environment in .venv with the project installed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup example test test-quick test-deps coverage coverage-quick coverage-report docs clean

setup: $(VENV)/.installed

# uv installs what pip would (the same versions: pip freeze is identical), bytecode compiled
# as pip does, in under half the time: 25 s against 58 s from empty caches on this 2-core
# machine. (Without --compile-bytecode it took 16 s, and the first test run then compiled
# what it imported: make test-quick took 52 s instead of 44.) pip stays in the venv (rhtc
# pack installs the workers' wheels with it).
$(VENV)/.installed: setup.cfg pyproject.toml
	@command -v redis-server >/dev/null || { echo "installing redis-server (apt-get)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq redis-server >/dev/null; }
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip uv
	$(PY) -m uv pip install -q --compile-bytecode --python $(PY) -e '.[all]'
	@touch $@

example: setup
	$(PY) examples/dimuon.py

# Both test targets run in pytest-xdist workers (pyproject.toml's addopts: -n N --dist loadgroup;
# tests/parallel.py keeps the pool tests in one worker). In one process: make test PYTEST_ARGS='-n 0'
# COVERAGE=1 (CI; `make coverage`): the same run under coverage.py, the processes the tests start
# included (pyproject.toml's [tool.coverage.run]); then the summary: the total and every module
# under 80 % (the whole report: .coverage-data/report.txt, by line: .coverage-data/html)
COVERAGE ?=
# Bytecode caches (__pycache__, git-ignored) are written even where PYTHONDONTWRITEBYTECODE is
# set, as in this project's machine image: the checkout's modules are compiled ahead (as pip does
# for an installed package, not for an editable one), and pytest keeps the test modules it
# rewrites. Without them every Python process a run starts (each xdist worker, each rhtc worker,
# each command) compiled its modules from source again: make test-quick took 2-3 s longer
PYSRC := rhtc broker worker client condor bench examples tests
# pytest with the environment $(1) and the arguments $(2), under coverage.py if COVERAGE is set
define pytest_run
	@$(PY) -m compileall -q -j 0 $(PYSRC) >/dev/null
	@$(if $(COVERAGE),rm -rf .coverage-data && mkdir -p .coverage-data,true)
	@status=0; PYTHONDONTWRITEBYTECODE= $(1) $(PY) -m $(if $(COVERAGE),coverage run -m )pytest -q $(2) $(PYTEST_ARGS) || status=$$?; \
	  $(if $(COVERAGE),$(MAKE) --no-print-directory coverage-report || true;) exit $$status
endef

test: setup
	$(call pytest_run,,--durations=25)

coverage:
	@$(MAKE) --no-print-directory test COVERAGE=1

# the fast tier under coverage (CI prints its summary: the whole suite's is `make coverage`)
coverage-quick:
	@$(MAKE) --no-print-directory test-quick COVERAGE=1

coverage-report:
	@$(PY) -m coverage combine -q || true
	@$(PY) -m coverage report > .coverage-data/report.txt || true
	@$(PY) -m coverage html -q -d .coverage-data/html || true
	@echo "coverage by module (under 80 %; all: .coverage-data/report.txt, by line: .coverage-data/html/index.html):"
	@awk 'NR <= 2 || /^TOTAL/ || ($$NF + 0 < 80 && $$NF ~ /%$$/)' .coverage-data/report.txt

# the fast tier: tests/unit/ and the smoke tests marked quick by hand (tests/README.md); only
# those files are collected; property tests run a fifth of their examples (tests/helpers.py).
# It computes rather than waits, so one xdist worker per core (-n auto): a third worker on
# two cores added its collection and contention, ~10 s of CPU (PYTEST_ARGS='-n 3' overrides).
# The smoke tests first: they mostly wait on their workers, beside the unit tests' computing
test-quick: setup
	$(call pytest_run,RHTC_TEST_TIER=quick,-n auto -m quick $$(grep -rl --include='test_*.py' 'mark.quick' tests/integration tests/scenarios) tests/unit)

# what the full suite runs besides the package, made once per machine and cached (tests/provision.py):
# the HTCondor pool's chroot, the Slurm packages, the toxiproxy server, coffea's executor tests.
# make test makes what is missing when a test first needs it; CI runs this first and times it apart
test-deps: setup
	$(PY) -m tests.provision

# the documentation site (docs/, Sphinx + MyST) into docs/_build/html; strict: a broken link or
# reference, a missing heading anchor or a page outside the toctree fails it. Needs the [docs]
# extra (in [all]; installed here if missing) and Graphviz's dot (apt-get) for the diagrams
docs: setup
	@$(PY) -c 'import sphinx, myst_parser, furo' 2>/dev/null || $(PY) -m pip install -q -e '.[docs]'
	@command -v dot >/dev/null || { echo "installing graphviz (apt-get)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq graphviz >/dev/null; }
	$(PY) -m sphinx -W --keep-going -n -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

clean:
	rm -rf $(VENV) data/generated *.egg-info docs/_build .coverage-data
