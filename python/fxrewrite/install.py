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
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any

from .inductor_pass import ComposedPass, Pass, compose, pass_
from .pre_pass import PrePass, pre_pass

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
            ``reports`` say what it did.
    """

    def __init__(self, config: Any, pass_: Pass, before: dict[str, Any]) -> None:
        self._config = config
        self.pass_ = pass_
        self._before = before

    def uninstall(self) -> None:
        """Restores the hooks ``install()`` changed."""
        for name, value in self._before.items():
            setattr(self._config, name, value)
        self._before = {}

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
    if config is None:
        import torch._inductor.config as config
    main = pass_ if strict is None and not leave else Pass(strict=strict, leave=leave)
    before: dict[str, Any] = {}
    post = config.post_grad_custom_post_pass
    installed = _passes_of(post, Pass)
    if installed:
        main = installed[0]
    else:
        before["post_grad_custom_post_pass"] = post
        config.post_grad_custom_post_pass = _with(post, main, first=False)
    pre = config.joint_custom_pre_pass
    if not _passes_of(pre, PrePass):
        before["joint_custom_pre_pass"] = pre
        config.joint_custom_pre_pass = _with(pre, pre_pass, first=True)
    return Installation(config, main, before)


def _passes_of(hook: Any, kind: type) -> list[Any]:
    """The passes of ``kind`` a hook value runs, in order."""
    if isinstance(hook, kind):
        return [hook]
    if isinstance(hook, ComposedPass):
        return [q for p in hook.passes for q in _passes_of(p, kind)]
    if isinstance(hook, list | tuple):
        return [q for p in hook for q in _passes_of(p, kind)]
    return []
