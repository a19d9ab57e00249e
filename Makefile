# Two commands on a fresh machine: `make run` (install + serve on the embedded defaults) and `make test`.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: run test generate console check bench clean mutate

$(VENV)/.runtime: pyproject.toml
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) install -qq -e . >&2
	@touch $@

$(VENV)/.dev: $(VENV)/.runtime pyproject.toml
	$(PIP) install -q -e '.[dev]'
	touch $@

# `make run PORT=9000`; recipes are not echoed, so on a fresh store the first key is alone on stdout.
run: $(VENV)/.runtime
	@$(VENV)/bin/specway serve $(if $(PORT),--port $(PORT))

test: $(VENV)/.dev
	$(PY) -m generator --check
	$(PY) -m pytest

generate: $(VENV)/.dev
	$(PY) -m generator

# The operator console's bundle (handlers/console/assets/console.js) from console/src: node and npm at build time
# only; tests/test_console_build.py fails when the committed bundle is not what this makes.
console:
	cd console && npm ci --no-audit --no-fund --ignore-scripts && node build.mjs

bench: $(VENV)/.dev
	$(PY) -m bench

# Mutation check (by hand, never in `make test` or CI): mutmut mutates the money/security modules listed in
# pyproject.toml's [tool.mutmut] in a copy under mutants/ (handlers/ is never written) and runs, for each mutant,
# only the tests that reached the mutated function. Fresh each time; afterwards `$(VENV)/bin/mutmut show NAME`
# prints a mutant's diff. MUTANTS='handlers.metering.*' limits the run to some mutants (fnmatch on their names).
mutate: $(VENV)/.dev
	rm -rf mutants
	$(VENV)/bin/mutmut run --max-children $${MUTATE_JOBS:-2} $(MUTANTS)
	$(VENV)/bin/mutmut results

clean:
	rm -rf $(VENV) *.egg-info
