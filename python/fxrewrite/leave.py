"""The escape hatch: operators always left to Inductor, whatever the engine
could do with them. It is for kernels that break their own schema, such as
one that writes outside the view it is given (vLLM's CPU
``_C.rotary_embedding`` on the MLA key view writes into the neighbouring
latent columns): in place on the real buffer a later reader sees the
damage, where Inductor's scratch copy hides it.

Named with ``Pass(leave=...)`` (operator overloads, packets, custom op
objects or names) and with ``FXREWRITE_LEAVE`` (names, comma separated),
for the pass and the command line tool alike. No torch import here: the
command line tool reads ``.fxir`` files without torch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["LEAVE_ENV", "leave_from_env", "op_names"]

#: The environment switch: ``FXREWRITE_LEAVE=_C::rotary_embedding,mylib::norm.default``.
LEAVE_ENV = "FXREWRITE_LEAVE"

_NAME = re.compile(r"^[A-Za-z_][\w]*::[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)?$")


def _name_of(op: Any) -> str:
    """``ns::name[.overload]`` of an operator given as a name or an object."""
    if isinstance(op, str):
        text = op.strip()
        if text.startswith("torch.ops."):
            ns, _, rest = text[len("torch.ops.") :].partition(".")
            text = f"{ns}::{rest}"
        if not _NAME.match(text):
            raise ValueError(
                f"{op!r} is not an operator name: write ns::name (every overload) or "
                "ns::name.overload, e.g. _C::rotary_embedding or mylib::rms_norm.default"
            )
        return text
    schema = getattr(op, "_schema", None)
    overload = getattr(op, "_overloadname", None)
    if schema is not None and overload is not None:  # an OpOverload
        return f"{schema.name}.{overload}"
    for attr in ("_qualified_op_name", "_qualname"):  # an OpOverloadPacket, a custom_op object
        name = getattr(op, attr, None)
        if isinstance(name, str):
            return _name_of(name)
    raise ValueError(f"{op!r} is neither an operator nor an operator name")


def op_names(ops: Iterable[Any]) -> list[str]:
    """The names of ``ops``, sorted and without repeats (they go into cache keys).

    Raises:
        ValueError: an entry is not an operator or an operator name.
    """
    return sorted({_name_of(op) for op in ops})


def leave_from_env() -> list[str]:
    """The operators ``FXREWRITE_LEAVE`` names.

    Raises:
        ValueError: an entry is not an operator name.
    """
    raw = os.environ.get(LEAVE_ENV, "")
    try:
        return op_names(part for part in raw.split(",") if part.strip())
    except ValueError as e:
        raise ValueError(f"{LEAVE_ENV}: {e}") from e
