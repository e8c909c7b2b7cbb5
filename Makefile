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

# Every benchmark writes to benchmarks/out/ (untracked; ENGRAMDB_BENCH_OUT moves it), each results file
# with its provenance (commit, clean tree or not, machine, load, command). The committed figures in
# benchmarks/results/ change only when a script is given --out benchmarks/results/... on purpose.
#
# The fast subset (about a minute on 2 cores): the SQL engine against bare sqlite3 and naqsha; recall,
# reflection and scale at 10k; LoCoMo against grep and FTS5. The peers that take minutes (nooa; naqsha
# on LoCoMo) and the larger sizes are in bench-full.
bench: $(PY)
	bash benchmarks/peers/setup.sh
	$(PY) benchmarks/bench_sql_engine.py --sizes 10000
	$(PY) benchmarks/bench_recall.py --sizes 10000 --peer-sizes
	$(PY) benchmarks/bench_reflection.py --sizes 10000 --peer-sizes
	$(PY) benchmarks/bench_scale.py --sizes 10000 --name scale-quick
	$(PY) benchmarks/bench_locomo.py --systems grep,fts5,fts5-porter,engramdb

# Everything, at every size (two hours or more on 2 cores: the vector index run embeds 1M texts and the
# scale run builds 1M memories). SCALE_ARGS="--cache-dir .bench/scale" reuses built scale databases.
SCALE_ARGS ?=
bench-full: $(PY)
	bash benchmarks/peers/setup.sh
	$(PY) benchmarks/bench_sql_engine.py --sizes 10000 100000
	$(PY) benchmarks/bench_recall.py --sizes 10000 100000 --peer-sizes 10000
	$(PY) benchmarks/bench_reflection.py --sizes 10000 100000 --peer-sizes 10000
	$(PY) benchmarks/bench_tenancy.py
	$(PY) benchmarks/bench_embedders.py
	$(PY) benchmarks/bench_vector_index.py
	$(PY) benchmarks/bench_locomo.py
	$(PY) benchmarks/tune_scorer.py
	$(PY) benchmarks/bench_levers.py
	$(PY) benchmarks/bench_scale.py --sizes 10000 100000 1000000 $(SCALE_ARGS)

demo: $(PY)
	$(PY) -m engramdb.demo

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
