"""fencewatch.streaming.ingest."""
