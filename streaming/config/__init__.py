"""fencewatch.streaming.config.settings."""
