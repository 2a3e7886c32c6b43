"""Real clients against a real Kafka broker: scripted fencing cases (see README.md)."""
