"""The ``splice`` command: one module per subcommand, each building a job from its options.

The top layer: it may import every other package; nothing imports it.
"""

from splice.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
