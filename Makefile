# tether's developer commands. `make check` is what a change must pass.
PY ?= .venv/bin/python
PIP ?= .venv/bin/pip

.PHONY: install install-dev lint typecheck test bench check demo

.venv:
	python3 -m venv .venv

install: .venv
	$(PIP) install -e .

install-dev: .venv
	$(PIP) install -e ".[dev]"

lint:
	$(PY) -m ruff check src tests bench
	$(PY) -m ruff format --check src tests bench

typecheck:
	$(PY) -m pyright

test:
	$(PY) -m pytest

bench:
	$(PY) bench/overhead.py

check: lint typecheck test

demo:
	.venv/bin/tether demo
