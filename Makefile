# Every install step lives here: `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed

.PHONY: install jars connector-jars streams-app maven test test-fast faults demo bench screenshot report-screenshot clean system-deps kustomize helm

# Tools built from source into a cache outside the repository (tests/deploy finds them there).
TOOLS ?= $(HOME)/.cache/fencewatch-tools
KUSTOMIZE_VERSION ?= v5.7.1
KUSTOMIZE := $(TOOLS)/kustomize-$(KUSTOMIZE_VERSION)/kustomize
HELM_VERSION ?= v3.22.0
HELM := $(TOOLS)/helm-$(HELM_VERSION)/helm

# Apache Kafka brokers the tests, the demo and the benchmarks start (streaming/brokers/kafka.py),
# fetched by Maven (pom.xml, profile kafka-broker) into a cache outside git, one folder per
# version; FENCEWATCH_JARS_DIR moves it (the broker code reads the same variable).
KAFKA_VERSIONS ?= 4.2.2 4.3.1 4.4.0
JARS_DIR ?= $(or $(FENCEWATCH_JARS_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/fencewatch/jars)

# Bytecode of the project's own modules. pip compiles an installed package but not an editable
# one, and with PYTHONDONTWRITEBYTECODE set (as on these machines) nothing else writes it: every
# command would first compile ~8k lines (a third of `fencewatch replay`'s start-up). Only
# changed files are recompiled.
BYTECODE := $(PY) -m compileall -q state streaming sinks sim dashboards

# The runtime's dependency tree installs at the versions deploy/constraints.txt pins (the image's),
# so the tests run on what ships and a release on the index cannot change them between two runs
# (tests/deploy/test_constraints.py holds the two equal).
$(STAMP): pyproject.toml deploy/constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q -c deploy/constraints.txt -e '.[test,demo]'
	$(BYTECODE)
	@touch $(STAMP)

install: $(STAMP) jars connector-jars streams-app

# A version is fetched once: its folder gets `.complete` only after Maven succeeded (a fetch cut
# short leaves `.part` behind and is redone), so with every version there this takes no time.
jars:
	@for v in $(KAFKA_VERSIONS); do \
	  dir="$(JARS_DIR)/kafka-$$v"; \
	  test -e "$$dir/.complete" && continue; \
	  command -v mvn >/dev/null 2>&1 || $(MAKE) --no-print-directory maven || exit 1; \
	  echo "fetching Apache Kafka $$v (broker jars) into $$dir"; \
	  rm -rf "$$dir.part" && mkdir -p "$$dir.part" || exit 1; \
	  mvn -q -B -f pom.xml -P kafka-broker -Dkafka.version=$$v dependency:copy-dependencies \
	    -DincludeScope=runtime -DoutputDirectory="$$dir.part" >"$$dir.log" 2>&1 \
	    || { cat "$$dir.log"; echo "Maven could not fetch Apache Kafka $$v (above)"; exit 1; }; \
	  touch "$$dir.part/.complete" && rm -rf "$$dir" "$$dir.log" && mv "$$dir.part" "$$dir" || exit 1; \
	done

# Spark's own Kafka connector (streaming.kafka_source: docs/kafka-source.md) at pyspark's version,
# fetched by Maven (pom-connector.xml, profile spark-kafka) into the same cache, where the job
# finds it (streaming/sources/connector.py). Fetched once, as the brokers' jars above.
connector-jars: $(STAMP)
	@v=$$($(PY) -c 'import pyspark; print(pyspark.__version__)') && dir="$(JARS_DIR)/spark-kafka-$$v" && \
	if test ! -e "$$dir/.complete"; then \
	  { command -v mvn >/dev/null 2>&1 || $(MAKE) --no-print-directory maven; } || exit 1; \
	  echo "fetching Spark's Kafka connector $$v into $$dir"; \
	  rm -rf "$$dir.part" && mkdir -p "$$dir.part" || exit 1; \
	  mvn -q -B -f pom-connector.xml -P spark-kafka -Dspark.version=$$v dependency:copy-dependencies \
	    -DincludeScope=runtime -DoutputDirectory="$$dir.part" >"$$dir.log" 2>&1 \
	    || { cat "$$dir.log"; echo "Maven could not fetch spark-sql-kafka-0-10_2.13:$$v (above)"; exit 1; }; \
	  touch "$$dir.part/.complete" && rm -rf "$$dir" "$$dir.log" && mv "$$dir.part" "$$dir"; \
	fi

# fencewatch's Kafka Streams application (streams-app/, issue 45), built by Maven against each
# Kafka Streams version into the same cache (jars/streams-app-<version>/: its jar and runtime
# classpath; compiled classes under build/ there), where fencewatch.streaming.brokers.streams_app
# finds it. Built once per version, as the brokers' jars are fetched; `.complete` holds a hash of
# the sources, so a changed source rebuilds it and a fresh clone of the same sources does not.
STREAMS_VERSIONS ?= $(KAFKA_VERSIONS)
STREAMS_SOURCES := streams-app/pom.xml $(shell find streams-app/src -type f 2>/dev/null | LC_ALL=C sort)

streams-app:
	@h=$$(cat $(STREAMS_SOURCES) | sha256sum | cut -c1-16); \
	for v in $(STREAMS_VERSIONS); do \
	  dir="$(JARS_DIR)/streams-app-$$v"; \
	  test "$$(cat "$$dir/.complete" 2>/dev/null)" = "$$h" && continue; \
	  command -v mvn >/dev/null 2>&1 || $(MAKE) --no-print-directory maven || exit 1; \
	  echo "building the Kafka Streams application against kafka-streams $$v into $$dir"; \
	  rm -rf "$$dir.part" && mkdir -p "$$dir.part" || exit 1; \
	  mvn -q -B -f streams-app/pom.xml -Dkafka.version=$$v -Dbuild.dir="$$dir.part/build" package \
	    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$$dir.part" >"$$dir.log" 2>&1 \
	    || { cat "$$dir.log"; echo "Maven could not build streams-app against kafka-streams $$v (above)"; exit 1; }; \
	  mv "$$dir.part/build/fencewatch-streams-app.jar" "$$dir.part/" && echo "$$h" > "$$dir.part/.complete" \
	    && rm -rf "$$dir" "$$dir.log" && mv "$$dir.part" "$$dir" || exit 1; \
	done

# Maven fetches the jars (Debian's package; Java is already on the machines).
maven:
	@command -v mvn >/dev/null 2>&1 || { echo "installing Debian's maven package (fetches the jars)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >/dev/null; }

# Debian packages the tests, the demo and the job use (Java is already on the machines).
system-deps: maven
	@command -v promtool >/dev/null 2>&1 || { echo "installing Debian's prometheus package"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null) \
	  || echo "warning: could not install prometheus; tests that need it will fail"; }
	@test -e /usr/lib/x86_64-linux-gnu/rsyslog/omkafka.so -o -e /usr/lib/aarch64-linux-gnu/rsyslog/omkafka.so \
	  || { echo "installing Debian's rsyslog-kafka package (log shipping test)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsyslog-kafka >/dev/null) \
	  || echo "warning: could not install rsyslog-kafka; tests/deploy will fail"; }
	@command -v chromium >/dev/null 2>&1 || { echo "installing Debian's chromium package (the report page's test)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "warning: could not install chromium; tests/sinks/report will fail"; }
	@test -e /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 -o -e /usr/lib/aarch64-linux-gnu/libjemalloc.so.2 \
	  || { echo "installing Debian's libjemalloc2 package (Spark's JVM allocator, docs/reliability.md)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libjemalloc2 >/dev/null) \
	  || echo "warning: could not install libjemalloc2; the job runs on glibc's malloc"; }

# kustomize renders deploy/kubernetes in tests/deploy, built with Go (on the machines) from its
# module. v5.7.1 needs Go 1.22.7 or later; the releases after it need a newer Go.
kustomize: $(KUSTOMIZE)
$(KUSTOMIZE):
	@command -v go >/dev/null 2>&1 || { echo "error: go not found; kustomize is built with it" >&2; exit 1; }
	GOBIN=$(dir $(KUSTOMIZE)) GOFLAGS=-mod=mod go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)

# helm lints and renders deploy/helm/fencewatch in tests/deploy (test_helm.py), built with Go from
# its module like kustomize. v3.22.0 builds with the machines' Go (1.26).
helm: $(HELM)
$(HELM):
	@command -v go >/dev/null 2>&1 || { echo "error: go not found; helm is built with it" >&2; exit 1; }
	GOBIN=$(dir $(HELM)) GOFLAGS=-mod=mod go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

# TEST_WORKERS=2 runs two pytest workers (pytest-xdist, each file on one): 16m02s against 22m13s
# in one process, but under that load the short fidelity run's librdkafka members missed their
# 60 s joins in 3 of 5 clean-clone runs (tests/README.md), so one process stays the default until
# they do not.
TEST_WORKERS ?= 0
test: $(STAMP) system-deps jars connector-jars streams-app kustomize helm
	$(PY) -m pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadfile -m "not full_fault_table"

# The long fault trials (tests/conftest.py FULL_TABLE_ONLY: one to four minutes each), which `make test` leaves
# out to stay near 20 minutes; CI runs them nightly with `make bench` (.ci/nightly, tests/README.md).
faults: $(STAMP) system-deps jars connector-jars
	$(PY) -m pytest -q --durations=25 -m full_fault_table

test-fast: $(STAMP) kustomize helm connector-jars
	$(PY) -m pytest -q -m "not slow"

demo: $(STAMP) system-deps jars connector-jars
	$(VENV)/bin/fencewatch demo $(DEMO_ARGS)

bench: $(STAMP) system-deps jars connector-jars
	$(BYTECODE)
	$(PY) bench/__main__.py

# docs/fencing-rate-zombie-storm.png: Prometheus graph during a zombie-storm demo, headless Chromium.
screenshot: $(STAMP) system-deps
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)
	$(PY) docs/make_screenshot.py

# docs/report.png: the top of a `fencewatch report` page for a simulated trace, headless Chromium.
report-screenshot: $(STAMP) system-deps
	$(PY) docs/make_report_screenshot.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
