"""The ``fencewatch`` commands, one module each, with ``register(subparsers)``: the CLI wiring,
the one place allowed to import every stage."""
