"""``install()`` across process boundaries, without torch at import.

Serving engines compile in workers they start with ``spawn`` (vLLM's CPU
platform forces it): a worker imports everything afresh, so the Inductor
hooks ``install()`` set in the launching process are not there. What a
spawned process does inherit is the environment. So ``install()`` records
itself in ``FXREWRITE_INSTALL`` (``1``, or its options as JSON), and
``vllm_plugin`` (the ``vllm.general_plugins`` entry point, which vLLM calls
in every process it starts) and ``sglang_plugin`` (the ``sglang.srt.plugins``
entry point, which SGLang calls in every process it starts) install
fxrewrite there when, and only when, that variable asks for it. Setting the
variable by hand does the same.
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


def install_if_requested() -> None:
    """``install()`` in this process if ``FXREWRITE_INSTALL`` asks for it;
    nothing otherwise. What both engines' entry points run."""
    options = requested()
    if options is None:
        return
    from ._install import install

    install(**options)


def vllm_plugin() -> None:
    """The ``vllm.general_plugins`` entry point: ``install()`` in this process
    if ``FXREWRITE_INSTALL`` asks for it; nothing otherwise (it is loaded in
    every vLLM process of every user who has fxrewrite installed)."""
    install_if_requested()


def sglang_plugin() -> None:
    """The ``sglang.srt.plugins`` entry point: SGLang's ``load_plugins()``
    calls each one with no arguments (its return value ignored) early in
    every SGLang process: the engine or server launcher, the spawned
    scheduler, the detokenizer and the data-parallel controller. As
    ``vllm_plugin``: ``install()`` when ``FXREWRITE_INSTALL`` asks for it,
    nothing otherwise."""
    install_if_requested()
