#!/usr/bin/env bash
# Run the streaming job on a Spark cluster with Spark's own Kafka connector.
#   MASTER=spark://host:7077 deploy/spark-submit.sh --bootstrap-servers kafka:9092 --checkpoint hdfs:///fencewatch/cp
# The fencewatch package must be installed in the executors' Python (PYSPARK_PYTHON), e.g. a
# virtualenv shipped with --archives or baked into the worker image.
# The connector's jars go with the application (--jars) from the cache `make connector-jars`
# fills (nothing fetched at submission); without them, --packages asks Maven Central for them.
#
# The JVMs log through fencewatch's log4j2 file (WARN and above), the driver's and the
# executors' alike: under spark-submit the driver JVM is started before fencewatch runs, so
# fencewatch cannot set it itself. LOG_FORMAT=json picks Spark's JSON layout; LOG4J2=/path sets
# another file. The executors read the file at the same path as this host (the package is
# installed the same way there); EXECUTOR_LOG4J2=/path if theirs differs.
# SPARK_SUBMIT names another spark-submit than the one on the PATH.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PYTHON="${PYTHON:-python3}"
SPARK_VERSION="$("$PYTHON" -c 'import pyspark; print(pyspark.__version__)')"
SCALA="${SCALA:-2.13}"
LOG4J2="${LOG4J2:-$("$PYTHON" -c 'import sys; from fencewatch.streaming.runtime.session import LOG4J2_FILES; print(LOG4J2_FILES[sys.argv[1]])' "${LOG_FORMAT:-text}")}"
EXECUTOR_LOG4J2="${EXECUTOR_LOG4J2:-$LOG4J2}"
[[ -f "$LOG4J2" ]] || { echo "spark-submit.sh: no log4j2 file at $LOG4J2" >&2; exit 2; }
JARS="$("$PYTHON" -c 'import sys; from fencewatch.streaming.sources.connector import connector_jars; print(",".join(connector_jars(sys.argv[1]) or []))' "$SPARK_VERSION")"
if [[ -n "$JARS" ]]; then CONNECTOR=(--jars "$JARS"); else
  CONNECTOR=(--packages "org.apache.spark:spark-sql-kafka-0-10_${SCALA}:${SPARK_VERSION}"); fi
exec "${SPARK_SUBMIT:-spark-submit}" \
  --master "${MASTER:?set MASTER, e.g. spark://host:7077 or k8s://...}" \
  --name fencewatch \
  "${CONNECTOR[@]}" \
  --conf spark.sql.streaming.stateStore.providerClass=org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider \
  --conf spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=true \
  --conf spark.sql.streaming.metricsEnabled=true \
  --conf "spark.driver.defaultJavaOptions=-Dlog4j2.configurationFile=file:$LOG4J2" \
  --conf "spark.executor.defaultJavaOptions=-Dlog4j2.configurationFile=file:$EXECUTOR_LOG4J2" \
  "$here/fencewatch_main.py" run --spark-master "" --kafka-source spark "$@"
