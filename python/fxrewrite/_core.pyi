"""Stub of the native module ``fxrewrite._core`` (Rust, pyo3).

The engine runs here with the GIL released; everything else is Python.
"""

from typing import Any, ClassVar, TypedDict, final

from .report import Action, Cause, Form

__version__: str

#: The IR-only keyword of an auto_functionalized node holding the alias
#: groups ``fxrewrite.pre_pass`` recorded before Inductor's cleanups: lists
#: of slot labels (``out``, ``xs[1]``) that shared one storage.
ALIAS_GROUPS: str

#: The IR-only keyword of an auto_functionalized node holding the slots
#: ``fxrewrite.pre_pass`` found to hold the whole result of a ``clone``.
FRESH_SLOTS: str

#: Every IR-only keyword (the alias groups, and an earlier build's record,
#: which is read and ignored): never passed to the FX node.
IR_ONLY_KWARGS: tuple[str, ...]

#: The operators whose nodes Inductor's reinplace pass replaces before
#: lowering (dropping their meta): the applier realizes such a node through an
#: ``aten.alias`` of it inserted just after it.
REPLACED_BEFORE_LOWERING: list[str]

#: The names a report's enumerations take, by field (``form``, ``action``,
#: ``cause``): the values of ``fxrewrite.report``'s ``Form``, ``Action`` and
#: ``Cause``.
REPORT_VOCABULARY: dict[str, list[str]]

#: The wire codes of the encoder, the conversion and the ``.fxir`` format,
#: by table (``opcode``, ``target_kind``, ``arg_type``, ``value_tag``,
#: ``tag_bit``) and name: the one definition (``rust/ir/wire.rs``).
WIRE_CODES: dict[str, dict[str, int]]

__all__ = [
    "ALIAS_GROUPS",
    "FRESH_SLOTS",
    "IR_ONLY_KWARGS",
    "REPLACED_BEFORE_LOWERING",
    "REPORT_VOCABULARY",
    "WIRE_CODES",
    "CloneNote",
    "Decision",
    "DecodeError",
    "FileFormatError",
    "FxrewriteError",
    "Graph",
    "InternalError",
    "InvalidGraphError",
    "Plan",
    "UnsupportedGraphError",
    "VersionError",
    "engine_fingerprint",
    "inserted_op_schemas",
    "v2_written_views",
]

class FxrewriteError(Exception):
    """Base class of every error fxrewrite raises.

    An error from the engine is an instance of its kind's class (one per
    ``kind``: ``InvalidGraphError``, ``DecodeError``, ``VersionError``,
    ``UnsupportedGraphError``, ``InternalError``); branch on the class or on
    the attributes, not on the message.
    """

    #: A stable name: the class's (``"invalid_graph"``, ``"decode"``,
    #: ``"version"``, ``"unsupported"``, ``"internal"``; ``"error"`` for this
    #: base class, ``"decode"`` for ``FileFormatError`` raised from Python).
    kind: str
    #: The node concerned, when one is: its index in the graph (``int``, for
    #: ``InvalidGraphError`` and ``InternalError``) or its name (``str``, for
    #: ``UnsupportedGraphError``); ``None`` otherwise.
    node: int | str | None
    #: The mutating operator concerned (``UnsupportedGraphError``), else ``None``.
    op: str | None
    #: The byte offset where reading a ``.fxir`` file failed (``DecodeError``), else ``None``.
    offset: int | None

class InvalidGraphError(FxrewriteError):
    """The graph breaks an invariant of the IR (``kind`` ``"invalid_graph"``;
    ``node``: the offending node's index, when the problem is local to one)."""

    node: int | None

class FileFormatError(FxrewriteError):
    """A .fxir file is truncated, corrupt, hostile or of another format version
    (raised from Python for a torch.export archive that cannot be read)."""

class DecodeError(FileFormatError):
    """A .fxir file is truncated, corrupt or hostile (``kind`` ``"decode"``;
    ``offset``: the byte where decoding failed)."""

class VersionError(FileFormatError):
    """A .fxir file of a format version this build does not read (``kind`` ``"version"``)."""

class UnsupportedGraphError(FxrewriteError):
    """Strict mode: a node could not be rewritten (``kind`` ``"unsupported"``;
    ``node``: its name; ``op``: its mutating operator)."""

    node: str | None

class InternalError(FxrewriteError):
    """A bug in fxrewrite; the graph was left untouched (``kind`` ``"internal"``;
    ``node``: the index of the node whose rewrite failed, when one did)."""

    node: int | None

@final
class CloneNote:
    """One clone the plan keeps, and why it is needed (frozen; the engine's
    ``rust/plan/mod.rs`` ``CloneNote``, whose fields, names and order are
    the only declaration: positional arguments, attributes, ``to_dict``,
    ``repr`` and pickling are made from them at run time).

    Raises:
        TypeError: (constructor) an argument missing, unknown or given twice.
    """

    __match_args__: ClassVar[tuple[str, ...]]
    def __new__(
        cls,
        arg: str,
        reason: str,
        reader: str | None = None,
        reader_source: str | None = None,
        bytes: int | None = None,
        bytes_expr: str | None = None,
        bytes_at_trace: int | None = None,
    ) -> CloneNote: ...
    #: The written argument (``out``, ``xs[1]``, or a v2 base ``_all_bases[0]``).
    @property
    def arg(self) -> str: ...
    #: Why the buffer cannot be written in place.
    @property
    def reason(self) -> str: ...
    #: The node that reads the old value, when that is the reason.
    @property
    def reader(self) -> str | None: ...
    #: The reader's source line, when known.
    @property
    def reader_source(self) -> str | None: ...
    #: Bytes copied, where the shape is static (the engine knows it).
    @property
    def bytes(self) -> int | None: ...
    #: Where it is symbolic: the bytes as an expression of the graph's
    #: symbols (``"256*s0"``), filled by the pass from the live graph;
    #: ``None`` on saved graphs.
    @property
    def bytes_expr(self) -> str | None: ...
    #: ``bytes_expr`` at the sizes the graph was traced with.
    @property
    def bytes_at_trace(self) -> int | None: ...
    def with_live_facts(
        self,
        *,
        reader_source: str | None = None,
        bytes_expr: str | None = None,
        bytes_at_trace: int | None = None,
    ) -> CloneNote:
        """A copy with what only the live graph knows; each fact given
        replaces this note's, the others are kept."""
    def size_text(self) -> str:
        """The bytes copied in words (``2048 bytes``, ``4*s0 bytes (128 at
        the traced sizes)``, ``symbolic size``)."""
    def to_dict(self) -> dict[str, Any]:
        """The note as a JSON-ready dict, every field named."""

@final
class Decision:
    """What happened to one auto_functionalized node (frozen; the engine's
    ``rust/plan/mod.rs`` ``NodeReport``, the only declaration of its fields,
    as for ``CloneNote``).

    Raises:
        ValueError: (constructor) ``form``, ``rule``, ``action`` or ``cause``
            is a name the engine does not use.
        TypeError: (constructor) an argument missing, unknown or given twice.
    """

    __match_args__: ClassVar[tuple[str, ...]]
    def __new__(
        cls,
        node: str,
        op: str,
        form: Form,
        rule: str,
        action: Action,
        moved: list[str] = ...,
        clones: list[CloneNote] = ...,
        scatters_removed: int = 0,
        reason: str | None = None,
        cause: Cause | None = None,
        source: str | None = None,
    ) -> Decision: ...
    #: The node's name.
    @property
    def node(self) -> str: ...
    #: The mutating operator (``mylib::rms_norm.default``).
    @property
    def op(self) -> str: ...
    @property
    def form(self) -> Form: ...
    #: The rule that read the node (``engine_fingerprint`` lists them), or
    #: ``"none"``.
    @property
    def rule(self) -> str: ...
    @property
    def action(self) -> Action: ...
    #: Readers moved before the call instead of cloning.
    @property
    def moved(self) -> list[str]: ...
    #: The clones kept.
    @property
    def clones(self) -> list[CloneNote]: ...
    #: Write-back scatters made unnecessary.
    @property
    def scatters_removed(self) -> int: ...
    #: Why the node was left, for ``"left"``.
    @property
    def reason(self) -> str | None: ...
    #: The kind of reason, for ``"left"``.
    @property
    def cause(self) -> Cause | None: ...
    #: The node's own source line, when known.
    @property
    def source(self) -> str | None: ...
    def with_clones(self, clones: list[CloneNote]) -> Decision:
        """A copy with ``clones`` in place of this decision's."""
    def to_dict(self) -> dict[str, Any]:
        """The decision as a JSON-ready dict, clones as dicts."""

class ReportFields(TypedDict):
    """What ``Plan.report`` returns (a ``dict``): ``fxrewrite.report.Report``'s
    keywords. A name for type checkers only (``scripts/stubtest-allowlist.txt``)."""

    nodes: int
    decisions: list[Decision]
    writebacks_removed: int
    realized: int

@final
class Plan:
    """The engine's plan for one graph, kept in Rust until it is applied."""

    def report(self) -> ReportFields:
        """The report (what was rewritten, cloned, left, and why) as the
        keywords of ``fxrewrite.report.Report``."""

    def report_json(self) -> str:
        """The same report as the engine serializes it (JSON text)."""

    def require_complete(self) -> None:
        """Strict mode: raises if the plan leaves a node alone.

        Raises:
            UnsupportedGraphError: naming the first node left and why (``kind``
                ``"unsupported"``; ``node``: its name; ``op``: its operator).
        """

    def edits_json(self) -> str:
        """The edits as JSON text, for tools that draw them (``explain --html``)."""

    def __len__(self) -> int:
        """Number of edits."""

@final
class Graph:
    """A graph in fxrewrite's compact IR, owned by Rust."""

    @staticmethod
    def from_fx(
        fx_graph: Any, *, meta: str = "operands", sources: bool = False
    ) -> tuple[Graph, list[Any], list[Any]]:
        """Reads a live ``torch.fx.Graph`` in one walk over its nodes and validates it.

        Returns the graph, the FX nodes in order and the callables by target index.

        Arguments:
            meta: ``"all"``, ``"operands"`` (only where the engine reads it) or ``"none"``.
            sources: keep each node's user source line.

        Raises:
            InvalidGraphError: the graph breaks an invariant of the IR.
            ValueError: an unknown opcode, an argument that refers to a later node, a bad ``meta``.
        """

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
            DecodeError: truncated, corrupt or hostile (a ``FileFormatError``).
            VersionError: of another format version (a ``FileFormatError``).
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

    def rewritten(self, leave: list[str] | None = None) -> tuple[Graph, Plan]:
        """Plans and applies the rewrite in Rust (GIL released): the rewritten
        graph and the plan; ``leave`` as for ``plan``.

        Raises:
            InternalError: the plan did not fit the graph (a bug; nothing is returned).
        """

    def plan(self, leave: list[str] | None = None) -> Plan:
        """Plans the rewrite (GIL released).

        Arguments:
            leave: operators always left to Inductor, as ``ns::name`` (every
                overload) or ``ns::name.overload``.
        """

    def apply_fx(self, plan: Plan, fx_graph: Any, nodes: list[Any], targets: list[Any]) -> list[Any]:
        """Applies ``plan``, made from this graph, to ``fx_graph``, the live
        ``torch.fx.Graph`` this graph was encoded from and unchanged since
        (``nodes``: its nodes in order; ``targets``: the callables by target
        index). All or nothing: on any error the live graph is restored.
        Returns the nodes whose FX hash changed (created nodes, re-pointed users).

        Raises:
            InternalError: the plan does not fit the graph, or the graph refused an edit.
        """

    def to_parts(self) -> tuple[list[Any], list[Any]]:
        """The graph as the encoder's ``(targets, nodes)`` tuples."""

    def __len__(self) -> int:
        """Number of nodes."""

def engine_fingerprint() -> str:
    """The engine version and the registered rule names, for cache keys."""

def inserted_op_schemas() -> dict[str, tuple[list[Any], list[Any], int]]:
    """The schema facts of every aten operator the engine may insert, as the
    command line tool's applier knows them, in ``fxrewrite.encode.schema_facts``' layout."""

#: One written tensor of a v2 node: ``(label, base index, kind, keys)``; kind
#: ``"whole"``, ``"alias"``, ``"slice"`` or ``"as_strided"``, keys the three
#: keywords holding the slice's or the as_strided view's values.
_V2View = tuple[str, int, str, tuple[str, ...]]

def v2_written_views(
    schema: tuple[list[Any], list[Any], int], kwargs: dict[str, Any]
) -> list[tuple[str, list[_V2View | None] | None]]:
    """The written tensors of one ``auto_functionalized_v2`` node, read from
    its keywords by the engine's own parser of the v2 encoding. ``schema``:
    the operator's ``fxrewrite.encode.schema_facts``. Per written argument,
    in schema order, ``(name, items)``: ``items`` is ``None`` when the
    argument is ``None``, else one entry per tensor (``None`` for a ``None``
    item). Raises ``InvalidGraphError`` with the engine's reason when the
    keywords do not encode the arguments."""
