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
# Offline site: JS from npm (tools/web/package-lock.json) vendored into book/_assets/vendor/,
# Debian fonts-noto-cjk for CJK text and plots, strict build (any Sphinx warning fails).
WEB := tools/web
NPM_STAMP := $(WEB)/node_modules/.npm-ci.stamp
# --all: re-read every page (executions stay cached); an incremental build would not repeat
# the warnings of an unchanged page that failed last time, and strict mode would miss them.
BOOK_FLAGS ?= --all -W -n --keep-going

.PHONY: book-deps browser-deps vendor

book-deps:
	bash tools/book/ensure_deb.sh fonts-noto-cjk
	$(PY) tools/book/mpl_fonts.py

browser-deps:
	bash tools/book/ensure_deb.sh chromium

$(NPM_STAMP): $(WEB)/package.json $(WEB)/package-lock.json
	cd $(WEB) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

vendor: $(NPM_STAMP)
	$(PY) tools/book/vendor.py

book: setup book-deps vendor
	COURSE_UTILS_QUIZ_LIVE=0 $(VENV)/bin/jupyter-book build . $(BOOK_FLAGS)

# ---- tests ---------------------------------------------------------------
# The book tests (build output, links, nbval, headless Chromium) read _build/html: build once here.
test: setup book browser-deps lint
	bash tools/run_pytest.sh

# ruff (lint and format) and mypy, clean on src/; ruff lint on the tests too
lint: setup
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src
	$(VENV)/bin/mypy

clean:
	rm -rf _build .pytest_cache .artifacts book/_assets/vendor
