"""fencewatch.streaming.runtime."""
