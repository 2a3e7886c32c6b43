"""fencewatch.streaming.ingest.consumer_offsets."""
