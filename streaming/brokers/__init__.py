"""fencewatch.streaming.brokers."""
