# Every target works from a clean clone: it creates .venv when missing and installs what it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: test lint bench demo install clean kafka faithful compare

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,spark,demo,dev]'
	@touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/ruff format --check src tests bench examples
	$(VENV)/bin/mypy
	# The library's packages promise Python 3.10 (minibroker needs 3.11): no newer API in them.
	$(VENV)/bin/mypy --python-version 3.10 src/failover_partitioner src/retry_buffer
	$(VENV)/bin/lint-imports

# A real Apache Kafka cluster (jars from Maven Central, tests/realkafka/pom.xml) until Ctrl-C.
kafka: $(STAMP)
	$(PY) -m tests.realkafka $(KAFKA_ARGS)

# The same scenarios on real Kafka and on minibroker, side by side (docs/minibroker.md, Faithfulness).
faithful: $(STAMP)
	$(PY) -m tests.faithful.compare $(FAITHFUL_ARGS)

demo: $(STAMP)
	$(VENV)/bin/failover-demo $(DEMO_ARGS)

# The table on the terminal, the libraries' logs in build/bench/<time>.log (BENCH_ARGS=-v: on the terminal).
bench: $(STAMP)
	$(PY) bench/run.py $(BENCH_ARGS)

# Scenarios 1-4 of docs/comparison.md on one real Kafka cluster (minutes; not part of test):
# tables on the terminal, report.json, plots and the logs in build/compare/<time>/.
compare: $(STAMP)
	PYTHONPATH=bench $(PY) -m compare $(COMPARE_ARGS)

clean:
	rm -rf $(VENV) build dist src/*.egg-info
