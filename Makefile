# Every target creates (or reuses) the virtual environment at .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: pyspark-wheel demo docs test test-unit test-airflow-oldest soak lint bench bench-spark bench-orchestration bench-id-pool bench-participants bench-peers bench-levers bench-wire bench-cluster clean

# devtools/ (the local broker and cluster, the demo, test helpers) is not installed with the
# package (tests/integration/test_wheel.py): a development venv finds it, and tests/ and benchmarks/, in
# the checkout from any directory (`python benchmarks/bench_peers.py`, a test's subprocess).
define CHECKOUT_ON_PATH
	echo "$(CURDIR)" > "$$($(1) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/kafka2pc-checkout.pth"
endef

# Packages are installed by uv (from PyPI, into the venv's own interpreter): the same
# versions pip resolves, in about half its time on a fresh machine (131 s against 76 s for
# this venv, measured side by side without a cache; docs/dependencies.md).
# --compile-bytecode, as pip does by default: uv writes no .pyc, and where
# PYTHONDONTWRITEBYTECODE is set (CI's machines) no Python process caches one either, so each
# would compile Airflow from source again: 7.7-8.5 s against 3.4-4.5 s to import Airflow
# and migrate a metadata DB, in every child process the tests start.
UV_INSTALL = $(dir $(1))uv pip install --quiet --compile-bytecode --python $(1) \
	--find-links $(WHEELS)

# pyspark is published as an sdist only (450 MB). uv revalidated it against this machine's
# index every time, so every venv built it again (20-40 s), and kept each build: 1.4 GB each,
# 44 GB in uv's cache, which filled the disk. So it is built once, into our own cache, where
# UV_INSTALL finds the wheel first. pip builds it (and caches the build too).
WHEELS := $(HOME)/.cache/kafka2pc/wheels
PYSPARK_WHEEL := $(WHEELS)/pyspark-4.3.0-py2.py3-none-any.whl

pyspark-wheel: $(PYSPARK_WHEEL)

$(PYSPARK_WHEEL):
	mkdir -p $(WHEELS)
	tmp=$$(mktemp -d $(WHEELS)/build.XXXXXX) && \
		$(PYTHON) -m pip wheel --quiet --no-deps --wheel-dir $$tmp pyspark==4.3.0 && \
		mv $$tmp/pyspark-4.3.0-*.whl $@ && rm -rf $$tmp

# __init__.py: it holds the version, which the installed metadata must follow.
$(STAMP): pyproject.toml airflow_provider_kafka2pc/__init__.py | $(PYSPARK_WHEEL)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv
	$(call UV_INSTALL,$(BIN)/python) -e '.[test,spark,docs]'
	# The Spark provider pulls pyspark-client, which overwrites pyspark's Python files
	# (pip check does not notice): put the full pyspark back on top.
	$(call UV_INSTALL,$(BIN)/python) --reinstall --no-deps pyspark==4.3.0
	$(call CHECKOUT_ON_PATH,$(BIN)/python)
	touch $(STAMP)

# The oldest Airflow the provider supports: the lower bound in pyproject.toml, read from there so
# the release tested is always the one declared. Its own venv, pinned where newer libraries
# break that release (.ci/airflow-oldest-constraints.txt says why for each).
OLDEST_AIRFLOW := $(shell sed -n 's/^ *"apache-airflow>=\([0-9.]*\)",.*/\1/p' pyproject.toml)
OLDEST_VENV := .venv-oldest
OLDEST_STAMP := $(OLDEST_VENV)/.installed
OLDEST_CONSTRAINTS := .ci/airflow-oldest-constraints.txt
# What proves the provider on that release, in a few minutes: provider discovery and the
# example DAG (parsed; `make demo` runs it on the newest), the dag.test() happy path (one
# writer: the writers are Spark's side) and re-run, the verdict (and the XCom-only copy
# without a task state store), a decision retried after its verdict and a failing prepare,
# recovery by the sensor and by its deferred trigger, OpenLineage, and a scheduled run under a
# real scheduler. Not the backfill of three intervals (make test runs it on the newest): it
# was this tier's longest test (175 s of 318 s), and what it adds to the scheduled run is the
# provider's id pool under concurrent runs, which does not depend on Airflow's version.
OLDEST_TESTS := tests/airflow/test_provider.py tests/airflow/test_example_dag.py \
	tests/airflow/test_parse_without_connections.py \
	'tests/airflow/test_export_happy.py::test_happy_path_commits_exactly_once_without_leaking_secrets[jvm]' \
	tests/airflow/test_export_happy.py::test_rerun_of_committed_interval_writes_nothing_and_skips_downstream \
	tests/airflow/test_verdict.py \
	tests/airflow/test_export_faults.py::test_decision_retried_after_raising_keeps_the_recorded_verdict \
	tests/airflow/test_export_faults.py::test_failing_prepare_aborts_fences_its_ids_and_fails_the_run \
	tests/airflow/test_recovery.py::test_sensor_resolves_dangling_batches_by_verdict_and_leaves_live_ones \
	tests/airflow/test_recovery.py::test_deferred_sensor_recovers_in_its_trigger \
	tests/airflow/test_openlineage.py \
	tests/airflow/test_scheduler.py::test_scheduled_run_is_exactly_once

$(OLDEST_STAMP): pyproject.toml $(OLDEST_CONSTRAINTS) | $(PYSPARK_WHEEL)
	test -n "$(OLDEST_AIRFLOW)" || { echo "no apache-airflow>= lower bound in pyproject.toml"; exit 1; }
	test -x $(OLDEST_VENV)/bin/python || $(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/pip install --quiet uv
	$(call UV_INSTALL,$(OLDEST_VENV)/bin/python) -c $(OLDEST_CONSTRAINTS) -e '.[test,spark]' \
		apache-airflow==$(OLDEST_AIRFLOW)
	$(call UV_INSTALL,$(OLDEST_VENV)/bin/python) --reinstall --no-deps pyspark==4.3.0
	$(call CHECKOUT_ON_PATH,$(OLDEST_VENV)/bin/python)
	touch $(OLDEST_STAMP)

# The provider's Airflow tests on the oldest supported Airflow (make test: the newest), on two
# workers grouped as make test's (the scheduler module's deployment on one): measured 566 s
# against 684 s on one, on a loaded machine.
test-airflow-oldest: $(OLDEST_STAMP)
	$(OLDEST_VENV)/bin/python -c 'import airflow; print("Airflow", airflow.__version__)'
	$(OLDEST_VENV)/bin/python -m pytest -n 2 --dist loadgroup --durations=5 $(OLDEST_TESTS)

demo: $(STAMP)
	$(BIN)/python -m devtools demo

# The unit tier alone (tests/README.md): no broker, no Spark, no Airflow; seconds.
test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	# The checkout's bytecode too, for the same reason as UV_INSTALL's (a changed file is
	# compiled again, as ever).
	$(BIN)/python -m compileall -q airflow_provider_kafka2pc devtools tests benchmarks
	$(BIN)/python -m pytest tests/unit
	# Two workers; tests sharing a cluster, a secured broker or module fixtures share one
	# (the groups: tests/conftest.py). Not the scheduler module: on the newest Airflow the
	# cluster's rolling restart runs its scheduled run, a backfill and its checks (one
	# Airflow deployment instead of two; its module is the oldest tier's below).
	$(BIN)/python -m pytest -n 2 --dist loadgroup --durations=40 --ignore=tests/unit \
		--ignore=tests/airflow/test_scheduler.py
	# The same provider on the oldest Airflow it supports: its own venv, its Airflow tests.
	$(MAKE) test-airflow-oldest

# The seeded chaos soak (issue 15; not part of `make test`, whose CI variant is short):
# a real scheduler backfills 30 intervals on a 3-node cluster while a nemesis injects faults.
# Options: SOAK_ARGS, e.g. make soak SOAK_ARGS="--seed 2026 --intervals 45".
soak: $(STAMP)
	$(BIN)/python -m tests.soak $(SOAK_ARGS)

# The documentation site, warnings as errors: docs/_build/html/index.html.
docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_transaction_core.py

# Compares with the official Airflow Kafka provider's ProduceToTopicOperator (a dependency).
bench-spark: $(STAMP)
	$(BIN)/python benchmarks/bench_spark_prepare.py

# A whole DAG run under dag.test() against the same prepare + commit called directly.
bench-orchestration: $(STAMP)
	$(BIN)/python benchmarks/bench_orchestration.py

# Pooled transactional ids against one fresh id per run and partition.
bench-id-pool: $(STAMP)
	$(BIN)/python benchmarks/bench_id_pool.py

# The decision, the commit and the ledger with 8, 64 and 256 participants (issue 13, item 5).
bench-participants: $(STAMP)
	$(BIN)/python benchmarks/bench_participants.py $(BENCH_ARGS)

# kafka2pc against Spark's Kafka sink, Flink's exactly-once KafkaSink and Kafka's
# ProducerPerformance (fetched once into ~/.cache/kafka2pc/peers). Options: BENCH_ARGS,
# e.g. make bench-peers BENCH_ARGS="--rows 500000 --rounds 3".
bench-peers: $(STAMP)
	$(BIN)/python benchmarks/bench_peers.py $(BENCH_ARGS)

# Registry Avro, JSON Schema and Protobuf values beside the JSON default, one
# registry started once. Options: BENCH_ARGS, e.g. make bench-wire BENCH_ARGS="--rows 500000".
bench-wire: $(STAMP)
	$(BIN)/python benchmarks/bench_wire.py $(BENCH_ARGS)

# The prepare's levers (Kafka-aligned partitioning, producer settings) against its defaults.
bench-levers: $(STAMP)
	$(BIN)/python benchmarks/bench_levers.py $(BENCH_ARGS)

# kafka2pc and Spark's Kafka sink on a Spark standalone cluster (a master, 2 one-core
# workers) against a three-node Kafka cluster (RF 3, min.insync.replicas 2, acks=all); the
# executors' start, with and without a class archive (issue 40, item 3). Options: BENCH_ARGS,
# e.g. make bench-cluster BENCH_ARGS="--rows 8M --rounds 2".
bench-cluster: $(STAMP)
	$(BIN)/python benchmarks/bench_cluster.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(OLDEST_VENV) build *.egg-info
