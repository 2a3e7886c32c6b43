"""state/ is sans-I/O: it imports with pyspark, pandas, confluent_kafka and prometheus_client blocked."""
import subprocess
import sys

CODE = r"""
import sys
class Block:
    BLOCKED = ("pyspark", "pandas", "pyarrow", "confluent_kafka", "prometheus_client", "fastavro", "logging", "time", "socket")
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.BLOCKED and name.split(".")[0] not in sys.modules:
            raise ImportError("blocked in state/: " + name)
        return None
sys.meta_path.insert(0, Block())
import importlib, pkgutil
import fencewatch.state as st
for m in pkgutil.iter_modules(st.__path__):
    importlib.import_module("fencewatch.state." + m.name)
print("ok")
"""


def test_state_imports_without_io_libraries():
    res = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


def test_spark_state_function_does_not_import_prometheus():
    """Every Spark Python worker imports ``streaming.state_fn``: the verdict summary it ships
    comes from ``state.status``, so the workers never load the exporter's client library."""
    code = "import sys, fencewatch.streaming.runtime.state_fn; print(sorted(m for m in sys.modules if 'prometheus' in m))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
