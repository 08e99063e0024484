"""The ``tenure`` command line (``tenure --help``); ``main`` is the console script."""

from tenure.cli.main import main

__all__ = ["main"]
