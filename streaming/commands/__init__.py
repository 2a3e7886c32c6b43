"""The ``fencewatch`` commands, one module each, with ``register(subparsers)`` (see LAYOUT)."""
