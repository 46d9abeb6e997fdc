# psmatch: the two commands are `make run` and `make test`; everything else is a helper of theirs.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-fast lint bench clean system-deps jars

# The install also builds the compiled loops (the .c files under src/) in place, with gcc.
$(STAMP): pyproject.toml $(shell find src -name "*.c" -o -name "*.h") | system-deps
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Debian's redis-server, Java, Maven and prometheus (apt-get, only when missing).
system-deps:
	scripts/install-system-deps.sh

# Kafka broker jars and Spark's Kafka connector, resolved with Maven into .cache/.
jars: system-deps
	scripts/fetch-jars.sh

# The streaming service in the foreground: starts Kafka and Redis on 127.0.0.1:9092 and
# :6379 when nothing answers there (or reuses those a previous run left in var/), creates
# the topics. The servers outlive a crash of the job; Ctrl-C stops them too.
run: $(STAMP) system-deps jars
	$(VENV)/bin/psmatch run --start-local

test: $(STAMP) system-deps jars
	$(VENV)/bin/ruff check .
	$(PY) -m pytest

# The unit tests alone: everything but the tests marked integration (those that need
# Kafka, Redis, Spark or Prometheus; tests/conftest.py marks every user of their fixtures).
test-fast: $(STAMP)
	$(PY) -m pytest -m "not integration"

# The compiled loops under AddressSanitizer and UBSan: a copy of the package in build/asan
# whose extension psmatch.core._kernels is built with -fsanitize=address,undefined (any
# report aborts), imported first (PYTHONPATH; libasan preloaded into the interpreter), and
# the library's unit tests that run every kernel (tests/core has a property test per
# kernel) against it. Reports go to files (log_path): pytest's capture of fd 2 would
# swallow one written there when the sanitiser ends the process; a failing run prints them.
ASAN_DIR := build/asan
ASAN_TESTS := tests/core tests/pstree
ASAN_REPORT := $(CURDIR)/$(ASAN_DIR)/report
.PHONY: test-asan
test-asan: $(STAMP)
	rm -rf $(ASAN_DIR) && mkdir -p $(ASAN_DIR) && cp -r src/psmatch $(ASAN_DIR)/
	gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer -fvisibility=hidden \
	    -fsanitize=address,undefined -fno-sanitize-recover=all \
	    -I"$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
	    -o "$(ASAN_DIR)/psmatch/core/_kernels$$($(PY) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')" \
	    src/psmatch/core/_kernels.c src/psmatch/core/kernels/*.c
	export LD_PRELOAD="$$(gcc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0:log_path=$(ASAN_REPORT) \
	    UBSAN_OPTIONS=log_path=$(ASAN_REPORT) \
	    PYTHONMALLOC=malloc PYTHONPATH=$(ASAN_DIR) && \
	$(PY) -c 'import psmatch.core._kernels as k, sys; sys.exit(0 if "$(ASAN_DIR)/" in k.__file__ else "not the sanitised build: " + k.__file__)' && \
	$(PY) -m pytest -q -p no:cacheprovider $(ASAN_TESTS) || \
	    { cat $(ASAN_REPORT).* 2>/dev/null; exit 1; }

# The matcher benchmark on the PS-Tree paper's default workload (writes docs/bench-matchers.*).
bench: $(STAMP)
	$(PY) bench/bench_matchers.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
