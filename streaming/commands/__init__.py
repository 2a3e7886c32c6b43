"""fencewatch.streaming.commands."""
