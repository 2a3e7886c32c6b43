"""``make bench``: run every benchmark and write its section of docs/benchmarks.md."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = ["bench_replay.py", "bench_bridge.py", "bench_sim.py", "bench_source.py", "bench_streaming.py",
           "bench_shipping.py", "bench_request_log.py", "bench_churn.py",
           "bench_soak.py"]  # the soak last: 30 minutes


def main() -> int:
    failed = []
    for name in BENCHES:
        script = HERE / name
        if not script.exists():
            continue
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, str(script), "--write-docs"]).returncode != 0:
            failed.append(name)
    print("benchmarks written to docs/benchmarks.md" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
