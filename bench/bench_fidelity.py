"""``make bench``'s model-vs-broker run: Kafka 4.2, 4.3 and 4.4, each through the real chain
(broker -> request log -> rsyslog -> topic -> ``fencewatch run``), the agreement of the model
with the broker's answers written to docs/fidelity.md (bench/fidelity.py says how)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fidelity import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
