# `make demo` and `make test` create .venv when it is missing, install splice into it, and run.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/splice demo

lint: $(STAMP)
	$(BIN)/ruff check splice tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

# test files in parallel worker processes, one file per worker at a time: a file's tests share
# the kernels they compile, and the suite's time is mostly compiling them
test: $(STAMP) lint
	$(BIN)/python -m pytest -n auto --maxprocesses 4 --dist loadfile

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
