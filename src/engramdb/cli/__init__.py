"""The ``engramdb`` command line (also ``python -m engramdb``); see ``docs/cli.md``."""

from engramdb.cli.app import cli, main
from engramdb.cli.support import Exit

__all__ = ["Exit", "cli", "main"]
