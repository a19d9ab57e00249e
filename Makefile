# Two commands on a fresh machine: `make run` (install + serve on the embedded defaults) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: run test generate check bench clean

$(VENV)/.runtime: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q -e .
	touch $@

$(VENV)/.dev: $(VENV)/.runtime pyproject.toml
	$(PIP) install -q -e '.[dev]'
	touch $@

run: $(VENV)/.runtime
	$(VENV)/bin/specway serve

test: $(VENV)/.dev
	$(PY) -m generator --check
	$(PY) -m pytest

generate: $(VENV)/.dev
	$(PY) -m generator

bench: $(VENV)/.dev
	$(PY) -m bench

clean:
	rm -rf $(VENV) *.egg-info
