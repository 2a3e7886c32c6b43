"""The versions a running fencewatch reports: its own (pyproject's, read from the installed
package's metadata, the one place it is defined), Python's and pyspark's.

What lives here: :func:`installed` and :func:`running_versions`, for ``fencewatch_build_info``,
``fencewatch --version``, the job's start-up line and Grafana change messages.
"""

from __future__ import annotations

import platform
from importlib import metadata


def installed(dist: str = "fencewatch") -> str:
    """The version of an installed distribution, ``unknown`` when it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


def running_versions() -> dict[str, str]:
    """Versions of fencewatch, Python and pyspark, for fencewatch_build_info and change messages."""
    return {
        "version": installed("fencewatch"),
        "python_version": platform.python_version(),
        "pyspark_version": installed("pyspark"),
    }
