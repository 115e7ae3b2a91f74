"""``python -m splice.cli``: the ``splice`` command."""

from splice.cli.main import main

raise SystemExit(main())
