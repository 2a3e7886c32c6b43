"""Every script ``make bench`` runs gets as far as its flags: a broken import or an undefined name
in an argument parser fails here, not after the half hour of benchmarks before it (bench_soak's
``--duration`` parser was such a name, found by a linter on 2026-11-28)."""
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH.parent))

from bench.__main__ import BENCHES  # noqa: E402


@pytest.mark.parametrize("name", BENCHES)
def test_the_script_parses_its_flags(name):
    res = subprocess.run([sys.executable, str(BENCH / name), "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "--write-docs" in res.stdout
