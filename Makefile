# Every target creates (or reuses) the virtual environment at .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test soak lint bench bench-spark bench-orchestration bench-id-pool bench-peers clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,spark]'
	# The Spark provider pulls pyspark-client, which overwrites pyspark's Python files
	# (pip check does not notice): put the full pyspark back on top.
	$(BIN)/pip install --quiet --force-reinstall --no-deps pyspark==4.3.0
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m airflow_provider_kafka2pc.demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest tests/unit
	$(BIN)/python -m pytest --ignore=tests/unit

# The seeded chaos soak (issue 15; not part of `make test`, whose CI variant is short):
# a real scheduler backfills 30 intervals on a 3-node cluster while a nemesis injects faults.
# Options: SOAK_ARGS, e.g. make soak SOAK_ARGS="--seed 2026 --intervals 45".
soak: $(STAMP)
	$(BIN)/python -m tests.soak $(SOAK_ARGS)

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

# kafka2pc against Spark's Kafka sink, Flink's exactly-once KafkaSink and Kafka's
# ProducerPerformance (fetched once into ~/.cache/kafka2pc/peers). Options: BENCH_ARGS,
# e.g. make bench-peers BENCH_ARGS="--rows 500000 --rounds 3".
bench-peers: $(STAMP)
	$(BIN)/python benchmarks/bench_peers.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
