"""``fxrewrite.install()``: everything fxrewrite needs in a compile, in one
line, composed with the passes already installed.

It sets two Inductor hooks:

- ``joint_custom_pre_pass``: ``fxrewrite.pre_pass``, which records each
  call's alias groups before Inductor's ``remove_noop_ops`` deletes the
  user's clones (without the record, a call whose arguments share memory is
  left to Inductor: its sharing could be the program's or a deleted
  clone's, pytorch#198031);
- ``post_grad_custom_post_pass``: the rewrite itself (``fxrewrite.pass_``,
  or a ``Pass`` with the options given), after any pass already there.

``post_grad_custom_post_pass = fxrewrite.pass_`` alone stays supported and
is never wrong; it only leaves those calls to Inductor.

It also records itself in the environment (``FXREWRITE_INSTALL``), so that
processes started later with ``spawn`` install it too where something runs
fxrewrite's plugin there (vLLM and SGLang do in every process: ``_install_env``).
An engine that sets ``post_grad_custom_post_pass`` itself for each compile
(vLLM's VLLM_COMPILE path, the GPU default) replaces the rewrite hook: the
pre pass then says so, once per process, with what to write instead.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from ._install_record import INSTALL_ENV, encode_options
from ._pre_pass import PrePass, pre_pass
from .inductor_pass import Pass, compose, pass_, passes_of

__all__ = ["Installation", "install"]


def _with(hook: Any, ours: Any, *, first: bool) -> Any:
    """``hook`` with ``ours`` added, before or after what it already runs."""
    if hook is None:
        return ours
    if isinstance(hook, list | tuple):
        return [ours, *hook] if first else [*hook, ours]
    return compose(ours, hook) if first else compose(hook, ours)


class Installation:
    """What ``install()`` did; ``uninstall()`` (or leaving a ``with`` block)
    puts both hooks back as they were.

    Attributes:
        pass_: the rewrite pass in the compile: its ``last_report`` and
            ``reports`` say what it did (``fxrewrite.last_report()`` too,
            whichever pass object ran).
    """

    def __init__(
        self,
        config: Any,
        pass_: Pass,
        before: dict[str, Any],
        env_before: tuple[bool, str | None] = (False, None),
    ) -> None:
        self._config = config
        self.pass_ = pass_
        self._before = before
        self._env_before = env_before

    def uninstall(self) -> None:
        """Restores the hooks ``install()`` changed, and ``FXREWRITE_INSTALL``."""
        for name, value in self._before.items():
            setattr(self._config, name, value)
        self._before = {}
        changed, value = self._env_before
        if changed:
            if value is None:
                os.environ.pop(INSTALL_ENV, None)
            else:
                os.environ[INSTALL_ENV] = value
        self._env_before = (False, None)

    def __enter__(self) -> Installation:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.uninstall()


def install(*, strict: bool | None = None, leave: Sequence[Any] = (), config: Any = None) -> Installation:
    """Installs fxrewrite in Inductor's config: the pre pass as
    ``joint_custom_pre_pass`` (before any pre pass already there, so that
    it records the graph as functionalized) and the rewrite as
    ``post_grad_custom_post_pass`` (after any pass already there: engines
    run their own pattern passes on the functional graph first). A hook
    that already runs fxrewrite's pass is left as it is, so calling it
    twice installs once.

    Processes started later inherit the request through
    ``FXREWRITE_INSTALL``; vLLM's and SGLang's processes act on it
    (fxrewrite's ``vllm.general_plugins`` and ``sglang.srt.plugins`` entry
    points call ``install()`` there).

    Arguments:
        strict: as ``Pass(strict=...)``: raise instead of leaving a node.
        leave: as ``Pass(leave=...)``: operators always left to Inductor.
        config: the config module to change (default ``torch._inductor.config``).

    Returns:
        An ``Installation``: ``.pass_`` is the rewrite pass; ``.uninstall()``
        or a ``with`` block restores the hooks.

    Raises:
        ValueError: an entry of ``leave`` is not an operator.
    """
    import torch._inductor.config as inductor_config

    if config is None:
        config = inductor_config
    main = pass_ if strict is None and not leave else Pass(strict=strict, leave=leave)
    before: dict[str, Any] = {}
    env_before: tuple[bool, str | None] = (False, None)
    post = config.post_grad_custom_post_pass
    installed = passes_of(post, Pass)
    if installed:
        main = installed[0]
    else:
        before["post_grad_custom_post_pass"] = post
        config.post_grad_custom_post_pass = _with(post, main, first=False)
        if config is inductor_config:  # what a process that acts on the variable installs into
            env_before = (True, os.environ.get(INSTALL_ENV))
            os.environ[INSTALL_ENV] = encode_options(main.strict, list(main.leave))
    pre = config.joint_custom_pre_pass
    if not passes_of(pre, PrePass):
        before["joint_custom_pre_pass"] = pre
        config.joint_custom_pre_pass = _with(pre, pre_pass, first=True)
    return Installation(config, main, before, env_before)
