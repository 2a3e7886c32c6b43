#!/usr/bin/env bash
# The image's entrypoint. `fencewatch ARGS` by default; the two words Spark on Kubernetes puts
# first in a driver or executor pod's arguments run Spark instead (the contract of Spark's own
# image: resource-managers/kubernetes/docker/.../entrypoint.sh, written anew here for an image
# whose SPARK_HOME is the pyspark package).
#   driver   ARGS: spark-submit in client mode inside the driver pod (ARGS from the operator)
#   executor     : an executor backend, configured by the SPARK_* variables Spark sets on the pod
set -euo pipefail

SPARK_HOME="${SPARK_HOME:-$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}"
export SPARK_HOME

case "${1:-}" in
  driver)
    shift
    exec "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:?set by Spark on the driver pod}" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=${SPARK_DRIVER_BIND_ADDRESS}" \
      --deploy-mode client "$@"
    ;;
  executor)
    shift
    # Spark passes the executor's JVM options as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ... in order.
    java_opts=()
    while IFS='=' read -r name _; do
      java_opts+=("${!name}")
    done < <(env | grep -o '^SPARK_JAVA_OPT_[0-9]*=' | sort -t_ -k4 -n)
    classpath="$SPARK_HOME/jars/*${SPARK_CLASSPATH:+:$SPARK_CLASSPATH}"
    # The executors hold the RocksDB state: jemalloc, as `fencewatch run` preloads locally
    # (streaming.jemalloc; on glibc's malloc the JVM grew, docs/reliability.md "Soak"), unless the
    # pod sets LD_PRELOAD itself.
    jemalloc="/usr/lib/$(uname -m)-linux-gnu/libjemalloc.so.2"
    if [[ -z "${LD_PRELOAD:-}" && -e "$jemalloc" ]]; then
      export LD_PRELOAD="$jemalloc"
    fi
    exec "${JAVA_HOME:-/usr}/bin/java" "${java_opts[@]}" \
      -Xms"${SPARK_EXECUTOR_MEMORY:?}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
      -cp "$classpath" org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL:?}" --executor-id "${SPARK_EXECUTOR_ID:?}" \
      --cores "${SPARK_EXECUTOR_CORES:?}" --app-id "${SPARK_APPLICATION_ID:?}" \
      --hostname "${SPARK_EXECUTOR_POD_IP:?}" --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "${SPARK_EXECUTOR_POD_NAME:?}"
    ;;
  *)
    exec fencewatch "$@"
    ;;
esac
