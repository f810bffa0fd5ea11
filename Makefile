# Sluice: the two commands a fresh machine needs are `make run` and `make test`.
# Everything else is set up by the targets they depend on; nothing is assumed installed
# beyond python3 (with venv), make and, for the interop and ZooKeeper tests, apt-get as root
# (kcat, zookeeper).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two stamps: `make run` needs only the broker's runtime dependencies (a few MB); the test and
# Spark extras (pytest, the interop clients, PySpark: about 1 GB) are installed for `make test`.
RUNTIME_STAMP := $(VENV)/.installed-runtime
TEST_STAMP := $(VENV)/.installed-test

.PHONY: setup run cluster test jepsen faults lint typecheck bench clean

$(RUNTIME_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e .
	@touch $(RUNTIME_STAMP)

# Quix Streams without its confluent-kafka pin (see pyproject.toml's test extras).
QUIXSTREAMS := quixstreams==3.28.1

$(TEST_STAMP): $(RUNTIME_STAMP)
	@echo 'Installing the test tools, the interop clients and PySpark (about 1 GB; pip shows its progress)'
	$(BIN)/pip install -e '.[test,spark]'
	$(BIN)/pip install --no-deps '$(QUIXSTREAMS)'
	@touch $(TEST_STAMP)

setup: $(TEST_STAMP)
	@bash scripts/install-system-deps.sh

run: $(RUNTIME_STAMP)
	$(BIN)/sluice-server --override log.dirs=./data

# A local 3-broker cluster with its own ZooKeeper on 127.0.0.1:9092-9094 (data in ./cluster-data),
# Prometheus metrics at http://127.0.0.1:9644-9646/metrics.
cluster: $(RUNTIME_STAMP)
	@bash scripts/install-system-deps.sh
	$(BIN)/python -m sluice.testing.cluster --brokers 3 --port 9092 --metrics-port 9644 --data ./cluster-data

test: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(TEST_STAMP)
	$(BIN)/mypy

bench: $(TEST_STAMP)
	$(BIN)/python -m bench

# Random-fault trials against a 3-broker cluster (tests/jepsen): `make jepsen TRIALS=100 SEED=1000`,
# extra flags in JEPSEN_ARGS (--no-idempotence, --acks 1, --out results.jsonl).
TRIALS ?= 10
SEED ?= 1
jepsen: setup
	$(BIN)/python -m tests.jepsen --trials $(TRIALS) --seed $(SEED) $(JEPSEN_ARGS)

# The single-node fault suite (tests/faults): kill -9 trials, disk full (root), fuzz, 1,000
# connections, with figures: `make faults TRIALS=30`, extra flags in FAULTS_ARGS
# (--fuzz-frames N, --connections N).
faults: setup
	$(BIN)/python -m tests.faults --trials $(TRIALS) --seed $(SEED) $(FAULTS_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
