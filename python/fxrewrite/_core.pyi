"""Stub of the native module ``fxrewrite._core`` (Rust, pyo3).

The engine runs here with the GIL released; everything else is Python.
"""

from typing import Any, final

__version__: str

#: The IR-only keyword of an auto_functionalized node listing the read
#: arguments that shared memory with a written one before Inductor's
#: ``remove_noop_ops`` (recorded by ``fxrewrite.pre_pass``).
USER_ALIASED_READS: str

#: The wire codes of the encoder, the conversion and the ``.fxir`` format,
#: by table (``opcode``, ``target_kind``, ``arg_type``, ``value_tag``,
#: ``tag_bit``) and name: the one definition (``rust/ir/wire.rs``).
WIRE_CODES: dict[str, dict[str, int]]

__all__ = [
    "USER_ALIASED_READS",
    "WIRE_CODES",
    "FileFormatError",
    "FxrewriteError",
    "Graph",
    "InternalError",
    "InvalidGraphError",
    "UnsupportedGraphError",
    "engine_fingerprint",
]

class FxrewriteError(Exception):
    """Base class of every error fxrewrite raises.

    Raised from Rust, it carries ``kind``: the stable name of the engine error
    (``invalid_graph``, ``decode``, ``version``, ``unsupported``, ``internal``).
    """

    kind: str

class InvalidGraphError(FxrewriteError):
    """The graph breaks an invariant of the IR."""

class FileFormatError(FxrewriteError):
    """A .fxir file is truncated, corrupt, hostile or of another format version."""

class UnsupportedGraphError(FxrewriteError):
    """Strict mode: a node could not be rewritten."""

class InternalError(FxrewriteError):
    """A bug in fxrewrite; the graph was left untouched."""

@final
class Graph:
    """A graph in fxrewrite's compact IR, owned by Rust."""

    @staticmethod
    def from_parts(targets: Any, nodes: Any) -> Graph:
        """Builds a graph from the encoder's ``(targets, nodes)`` tuples and validates it.

        Arguments:
            targets: one ``(name, kind, schema)`` tuple per distinct callable.
            nodes: one ``(opcode, name, target, args, kwargs, meta, source)`` tuple per node.

        Raises:
            InvalidGraphError: an operand does not come before its user, an index is out of range, ...
            ValueError: the tuples do not have the encoder's layout.
        """

    @staticmethod
    def read(data: bytes) -> Graph:
        """Reads the bytes of a ``.fxir`` file (GIL released while decoding).

        Raises:
            FileFormatError: truncated, corrupt, hostile or of another format version.
            InvalidGraphError: well-formed bytes describing an invalid graph.
        """

    def write(self, info: list[tuple[str, str]]) -> bytes:
        """The ``.fxir`` bytes of this graph, with the given provenance pairs."""

    @property
    def info(self) -> list[tuple[str, str]]:
        """Provenance pairs read from a file (empty for graphs built in memory)."""

    def inspect_json(self) -> str:
        """The ``inspect`` summary (sizes, auto_functionalized nodes, mutated inputs) as JSON text."""

    def show(self) -> str:
        """The graph in the text form ``print(torch.fx.Graph)`` uses."""

    def rewritten(self) -> tuple[Graph, str]:
        """Plans and applies the rewrite in Rust: the rewritten graph and the plan as JSON text.

        Raises:
            InternalError: the plan did not fit the graph (a bug; nothing is returned).
        """

    def plan_json(self) -> str:
        """Plans the rewrite (GIL released); returns the plan, edits and report, as JSON text."""

    def to_parts(self) -> tuple[list[Any], list[Any]]:
        """The graph as the encoder's ``(targets, nodes)`` tuples."""

    def __len__(self) -> int:
        """Number of nodes."""

def engine_fingerprint() -> str:
    """The engine version and the registered rule names, for cache keys."""
