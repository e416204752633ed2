# Two set-up commands (README): `make book` and `make test`. Both work on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: book test setup lint clean

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

# ---- book (the main job) -------------------------------------------------
book: setup
	@echo "book target: filled in by the book toolchain"

# ---- tests ---------------------------------------------------------------
test: setup
	$(VENV)/bin/ruff check src tests
	bash tools/run_pytest.sh

lint: setup
	$(VENV)/bin/ruff check src tests

clean:
	rm -rf _build .pytest_cache
