#!/usr/bin/env bash
# Run the streaming job on a Spark cluster with Spark's own Kafka connector.
#   MASTER=spark://host:7077 deploy/spark-submit.sh --bootstrap-servers kafka:9092 --checkpoint hdfs:///fencewatch/cp
# The fencewatch package must be installed in the executors' Python (PYSPARK_PYTHON), e.g. a
# virtualenv shipped with --archives or baked into the worker image.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
SPARK_VERSION="$(python3 -c 'import pyspark; print(pyspark.__version__)')"
SCALA="${SCALA:-2.13}"
exec spark-submit \
  --master "${MASTER:?set MASTER, e.g. spark://host:7077 or k8s://...}" \
  --name fencewatch \
  --packages "org.apache.spark:spark-sql-kafka-0-10_${SCALA}:${SPARK_VERSION}" \
  --conf spark.sql.streaming.stateStore.providerClass=org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider \
  --conf spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=true \
  --conf spark.sql.streaming.metricsEnabled=true \
  "$here/fencewatch_main.py" run --spark-master "" "$@"
