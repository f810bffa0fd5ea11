# Sluice: the two commands a fresh machine needs are `make run` and `make test`.
# Everything else is set up by the targets they depend on; nothing is assumed installed
# beyond python3 (with venv), make and, for the interop tests, apt-get as root (kcat).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test lint typecheck bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,spark]'
	@touch $(STAMP)

setup: $(STAMP)
	@bash scripts/install-system-deps.sh

run: $(STAMP)
	$(BIN)/sluice-server --override log.dirs=./data

test: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
