# One task runner. Every target uses the project's own virtual environment in .venv.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python

.PHONY: venv test lint format typecheck bench bench-full demo clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"

venv: $(PY)

test: $(PY)
	$(PY) -m pytest

lint: $(PY)
	$(PY) -m ruff check src tests benchmarks scripts
	$(PY) -m ruff format --check src tests benchmarks scripts

format: $(PY)
	$(PY) -m ruff format src tests benchmarks scripts
	$(PY) -m ruff check --fix src tests benchmarks scripts

typecheck: $(PY)
	$(PY) -m mypy

# The fast subset (under 5 minutes on 2 cores); peers are set up on first use.
bench: $(PY)
	bash benchmarks/peers/setup.sh
	$(PY) benchmarks/bench_sql_engine.py --sizes 10000

# Everything, at every size.
bench-full: $(PY)
	bash benchmarks/peers/setup.sh
	$(PY) benchmarks/bench_sql_engine.py --sizes 10000 100000

demo: $(PY)
	$(PY) -m engramdb.demo

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
