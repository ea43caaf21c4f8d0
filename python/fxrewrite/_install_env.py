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

from ._install_record import INSTALL_ENV, encode_options, requested

__all__ = [
    "INSTALL_ENV",
    "encode_options",
    "install_if_requested",
    "requested",
    "sglang_plugin",
    "vllm_plugin",
]


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
