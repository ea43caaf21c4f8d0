"""``python -m fxrewrite``: the ``fxrewrite`` command, for environments where
the console script is not on ``PATH`` (or to pick the interpreter explicitly)."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
