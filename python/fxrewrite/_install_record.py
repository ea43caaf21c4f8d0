"""The record ``install()`` leaves in the environment (``FXREWRITE_INSTALL``)
and its reading: a leaf module, without torch, that ``install()``, the pre
pass and the plugins of ``_install_env`` all import (none of them imports
another through it).
"""

from __future__ import annotations

import json
import os
from typing import Any

#: The variable ``install()`` sets and the plugin reads.
INSTALL_ENV = "FXREWRITE_INSTALL"


def encode_options(strict: bool | None, leave: list[str]) -> str:
    """The variable's value for ``install(strict=..., leave=...)``."""
    if strict is None and not leave:
        return "1"
    return json.dumps({"strict": strict, "leave": leave}, sort_keys=True)


def requested() -> dict[str, Any] | None:
    """The ``install()`` options the environment asks for; None when it
    asks for nothing (unset, empty or ``0``).

    Raises:
        ValueError: the variable is neither ``1`` nor the JSON ``install()`` writes.
    """
    raw = os.environ.get(INSTALL_ENV, "").strip()
    if raw in ("", "0"):
        return None
    if raw == "1":
        return {}
    try:
        options = json.loads(raw)
    except json.JSONDecodeError:
        options = None
    if not isinstance(options, dict) or set(options) - {"strict", "leave"}:
        raise ValueError(f'{INSTALL_ENV}={raw!r}: expected 1 or {{"strict": ..., "leave": [...]}}')
    strict, leave = options.get("strict"), options.get("leave", [])
    if not (strict is None or isinstance(strict, bool)) or not (
        isinstance(leave, list) and all(isinstance(x, str) for x in leave)
    ):
        raise ValueError(
            f"{INSTALL_ENV}={raw!r}: strict must be true, false or null and leave a list of names"
        )
    return {"strict": strict, "leave": leave}
