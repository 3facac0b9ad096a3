# Two entry points (the README's first screen): `make example` and `make test`.
# Both set up what they need on a fresh Debian/Ubuntu machine: redis-server (apt-get)
# and a virtual environment in .venv with the project installed.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup example test test-quick docs clean

setup: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml
	@command -v redis-server >/dev/null || { echo "installing redis-server (apt-get)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq redis-server >/dev/null; }
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all]'
	@touch $@

example: setup
	$(PY) examples/dimuon.py

# Both test targets run in pytest-xdist workers (pyproject.toml's addopts: -n N --dist loadgroup;
# tests/parallel.py keeps the pool tests in one worker). In one process: make test PYTEST_ARGS='-n 0'
test: setup
	$(PY) -m pytest -q --durations=25 $(PYTEST_ARGS)

# the fast tier (tests/conftest.py): the pure tests and a few smoke tests on a real broker
test-quick: setup
	$(PY) -m pytest -q -m quick $(PYTEST_ARGS)

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
	rm -rf $(VENV) data/generated *.egg-info docs/_build
