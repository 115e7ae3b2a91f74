"""The ``splice`` command's subcommands, each a job on the engine built from its options."""

__all__: list[str] = []
