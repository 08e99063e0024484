"""Measuring another checkout's tenure (``--tree DIR``) from this tree's benchmarks."""

from __future__ import annotations

import sys
from pathlib import Path


def use_tree(tree: Path) -> None:
    """Make ``import tenure`` load the package of the checkout ``tree``: first on the path, and
    any tenure module already imported (this tree's, through ``benchmarks``'s own imports)
    forgotten."""
    sys.path.insert(0, str(tree.resolve()))
    for name in [m for m in sys.modules if m == "tenure" or m.startswith("tenure.")]:
        del sys.modules[name]
