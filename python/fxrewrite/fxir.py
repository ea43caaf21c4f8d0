"""Saved graphs: ``.fxir`` files (the engine's IR on disk) and ``torch.export``
archives.

``save`` writes a graph (with source lines, tensor metadata and provenance);
``load`` rebuilds a ``torch.fx.GraphModule`` when every operator it calls is
registered in this process. Reading ``.fxir`` for the command line tool needs
no torch: see ``read_native``.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import re
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _core
from ._core import ALIAS_GROUPS, FRESH_SLOTS, IR_ONLY_KWARGS, FileFormatError, FxrewriteError

SUFFIX = ".fxir"
EXPORT_SUFFIXES = (".pt2",)

MAX_FILE_SIZE_ENV = "FXREWRITE_MAX_FILE_SIZE"
"""Environment variable overriding the size limit on files read (bytes, or a K/M/G/T suffix)."""
DEFAULT_MAX_FILE_SIZE = 4 << 30
"""The size limit on files read when ``FXREWRITE_MAX_FILE_SIZE`` is not set: 4 GiB."""

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_CHUNK = 1 << 30  # Linux returns at most ~2 GiB per read(2)


def parse_size(text: str) -> int:
    """A size in bytes from ``"1500"``, ``"64K"``, ``"512M"``, ``"4G"`` or ``"1T"``
    (binary units; a trailing ``B``/``iB`` and case are ignored).

    Raises:
        ValueError: not a non-negative whole size.
    """
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1] if t and t[-1] in "KMGT" else ""
    digits = t[: len(t) - len(unit)].strip()
    if not digits.isdigit():
        raise ValueError(f"{text!r} is not a size (bytes, or a number with a K, M, G or T suffix)")
    return int(digits) * _UNITS[unit]


def format_size(n: int) -> str:
    """``n`` bytes in the largest binary unit that keeps it whole-ish: ``"4 GiB"``, ``"1.5 KiB"``."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} bytes"


def max_file_size() -> int:
    """The size limit on files read: ``FXREWRITE_MAX_FILE_SIZE`` if set, else 4 GiB.

    Raises:
        ValueError: the variable is set to something that is not a size.
    """
    value = os.environ.get(MAX_FILE_SIZE_ENV, "").strip()
    if not value:
        return DEFAULT_MAX_FILE_SIZE
    try:
        return parse_size(value)
    except ValueError as e:
        raise ValueError(f"{MAX_FILE_SIZE_ENV}={value}: {e}") from e


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def refusal(st: os.stat_result, max_bytes: int) -> OSError | None:
    """Why a file with status ``st`` must not be read, or ``None``. Only regular
    files are read (opening a FIFO blocks; a device such as ``/dev/zero`` never
    ends), and only up to ``max_bytes``."""
    if stat.S_ISDIR(st.st_mode):
        return IsADirectoryError(errno.EISDIR, "is a directory, a saved graph file was expected")
    if not stat.S_ISREG(st.st_mode):
        return OSError(errno.EINVAL, f"not a regular file ({_kind(st.st_mode)})")
    if st.st_size > max_bytes:
        return OSError(
            errno.EFBIG,
            f"{format_size(st.st_size)}, over the {format_size(max_bytes)} size limit ({MAX_FILE_SIZE_ENV})",
        )
    return None


def read_limited(path: str | os.PathLike[str], max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file (a symlink to one is followed), refusing
    anything else before opening it, and any file over ``max_bytes`` (default
    ``max_file_size()``) before reading it.

    Raises:
        OSError: the file is missing, unreadable, not a regular file or too large
            (``strerror`` says which; ``filename`` is ``path``).
        ValueError: ``FXREWRITE_MAX_FILE_SIZE`` is not a size.
    """
    limit = max_file_size() if max_bytes is None else max_bytes
    name = os.fspath(path)

    def refuse(st: os.stat_result) -> None:
        err = refusal(st, limit)
        if err is not None:
            err.filename = name
            raise err

    refuse(os.stat(name))
    # O_NONBLOCK: should the path turn into a FIFO between stat and open, open
    # returns instead of waiting for a writer; fstat then refuses it.
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        refuse(st)
        parts: list[bytes] = []
        total = 0
        while total <= limit:
            want = min(max(st.st_size - total, 1 << 16), limit + 1 - total, _CHUNK)
            chunk = os.read(fd, want)
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
        if total > limit:  # it grew while being read
            refuse(os.fstat(fd))
            raise OSError(errno.EFBIG, f"over the {format_size(limit)} size limit", name)
    finally:
        os.close(fd)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_native(path: str | os.PathLike[str], max_bytes: int | None = None) -> _core.Graph:
    """Reads a ``.fxir`` file into the native IR without importing torch.
    Only regular files up to ``max_bytes`` (default ``max_file_size()``) are read.

    Raises:
        FileFormatError: the file is truncated, corrupt or of another version.
        OSError: the file cannot be read, is not a regular file or is too large.
    """
    return _core.Graph.read(read_limited(path, max_bytes))


def save(graph_or_module: Any, path: str | os.PathLike[str], *, origin: str = "") -> None:
    """Writes ``graph_or_module`` (an ``fx.Graph`` or ``GraphModule``) to ``path``."""
    import torch
    import torch.fx

    from . import __version__
    from .encode import encode

    graph = graph_or_module.graph if isinstance(graph_or_module, torch.fx.GraphModule) else graph_or_module
    native = encode(graph, with_sources=True).native
    info = [("torch_version", str(torch.__version__)), ("producer", f"fxrewrite {__version__}")]
    if origin:
        info.append(("origin", origin))
    Path(path).write_bytes(native.write(info))


class _Keep(logging.Handler):
    """Keeps the log records it is given instead of printing them."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _unregistered_operator(e: BaseException) -> str | None:
    """The operator (``ns::name``) torch.export could not resolve, from the chain of ``e``."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        m = re.search(r"failed to resolve torch\.ops\.(\w+)\.(\w+)", str(cause))
        if m:
            return f"{m.group(1)}::{m.group(2)}"
        cause = cause.__cause__ or cause.__context__
    return None


def _is_aoti_package(data: bytes) -> bool:
    """A zip written by ``aoti_compile_and_package``: compiled code under
    ``<name>/data/aotinductor/`` and no exported program (``<name>/models/``)."""
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return False
    parts = [n.split("/") for n in names]
    compiled = any(p[1:3] == ["data", "aotinductor"] for p in parts)
    return compiled and not any(p[1:2] == ["models"] for p in parts)


def native_from_export(
    path: str | os.PathLike[str],
    max_bytes: int | None = None,
    *,
    import_hint: str = "import the library that defines it first",
) -> _core.Graph:
    """The graph of a ``torch.export.save`` archive, in native IR form, as
    Inductor (AOTInductor) sees it: the outputs the graph signature lists as
    user-input and buffer mutations become ``copy_`` write-backs (see
    ``materialize_writebacks``); the mutated inputs also go into the
    provenance pairs (``mutated_inputs``). The archive is read as
    ``read_limited`` reads (regular files up to ``max_bytes`` only).
    ``import_hint`` ends the message of an archive calling operators this
    process has not registered.

    Raises:
        OSError: as ``read_limited``.
        FileFormatError: not an archive torch can load (its operators may not be
            registered in this process).
        FxrewriteError: the program cannot be functionalized.
    """
    data = read_limited(path, max_bytes)
    import zipfile

    if _is_aoti_package(data):
        raise FileFormatError(
            f"{path}: an AOTInductor package (compiled code, no graph to read); read the "
            "torch.export.save archive of the same program instead"
        )

    import torch

    from .encode import encode

    # torch logs a full traceback before raising; the error we raise says it all.
    # torch logs a full traceback (naming the operator it could not resolve)
    # before raising a vaguer error; keep the records here instead of printing them.
    export_log = logging.getLogger("torch.export")
    saved = export_log.level, export_log.propagate, export_log.handlers
    kept = _Keep()
    export_log.handlers = [kept]
    export_log.setLevel(logging.WARNING)
    export_log.propagate = False
    try:
        with warnings.catch_warnings():
            # torch 2.11's loader warns that the archive's bytes are not a
            # writable buffer. Nothing here writes the loaded tensors (only
            # the graph is read), and on the command line tool's stderr the
            # warning reads as a second error.
            warnings.filterwarnings("ignore", message="The given buffer is not writable")
            ep = torch.export.load(io.BytesIO(data))
    except Exception as e:
        causes = [e, *(r.exc_info[1] for r in kept.records if r.exc_info and r.exc_info[1] is not None)]
        op = next((o for o in map(_unregistered_operator, causes) if o is not None), None)
        if isinstance(e, zipfile.BadZipFile):
            raise FileFormatError(f"{path}: not a torch.export archive (not a zip file)") from e
        if op is not None:
            raise FileFormatError(
                f"{path}: calls operator {op}, which is not registered in this process; {import_hint}"
            ) from e
        raise FileFormatError(
            f"{path}: not a readable torch.export archive ({type(e).__name__}: {str(e)[:300]}); if the program "
            f"uses custom operators, {import_hint}"
        ) from e
    finally:
        export_log.setLevel(saved[0])
        export_log.propagate, export_log.handlers = saved[1], saved[2]
    # torch.export keeps mutating operators as they are (a non-functional IR);
    # functionalizing it, with no decompositions, gives the graph Inductor sees.
    try:
        ep = ep.run_decompositions({})
    except Exception as e:
        raise FxrewriteError(
            f"{path}: could not functionalize the exported program: {type(e).__name__}: {e}"
        ) from e
    try:
        writebacks = materialize_writebacks(ep)
    except FxrewriteError as e:
        raise FxrewriteError(f"{path}: {e}") from e
    native = encode(ep.graph, with_sources=True).native
    sig = ep.graph_signature
    mutated = sorted(set(sig.user_inputs_to_mutate.values()) | set(sig.buffers_to_mutate.values()))
    info = [("torch_version", str(torch.__version__)), ("origin", f"torch.export archive {Path(path).name}")]
    if mutated:
        info.append(("mutated_inputs", ",".join(mutated)))
    if writebacks:
        info.append(("writebacks", str(writebacks)))
    return _core.Graph.read(native.write(info))


def materialize_writebacks(ep: Any) -> int:
    """Rewrites ``ep.graph`` (of a functionalized ``ExportedProgram``, in
    place) into the form Inductor compiles: each output the graph signature
    lists as a user-input mutation or a buffer mutation is not a value
    returned to the caller but the new content of that input, which the
    caller's tensor (or the module's buffer) takes. It becomes
    ``aten.copy_(input, new_value)`` before the output, the write-back
    epilogue of a post-grad graph, and leaves the output tuple, which keeps
    the user outputs only. Returns the number of write-backs made.

    Raises:
        FxrewriteError: the signature does not match the graph.
    """
    import torch
    from torch.export.graph_signature import InputKind, OutputKind

    sig = ep.graph_signature
    graph = ep.graph
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    buffers = {s.target: s.arg.name for s in sig.input_specs if s.kind == InputKind.BUFFER}
    output = graph.output_node()
    (values,) = output.args
    if not isinstance(values, list | tuple) or len(values) != len(sig.output_specs):
        raise FxrewriteError(
            f"the graph returns {len(values) if isinstance(values, list | tuple) else 1} values "
            f"but its signature lists {len(sig.output_specs)} outputs"
        )
    kept: list[Any] = []
    writebacks: list[tuple[torch.fx.Node, Any]] = []
    for spec, value in zip(sig.output_specs, values, strict=True):
        if spec.kind == OutputKind.USER_INPUT_MUTATION:
            name = spec.target
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            name = buffers.get(spec.target)
        else:
            kept.append(value)
            continue
        dst = placeholders.get(name) if name is not None else None
        if dst is None or not isinstance(value, torch.fx.Node):
            raise FxrewriteError(f"the signature's mutation of `{spec.target}` names no graph input")
        writebacks.append((dst, value))
    if not writebacks:
        return 0
    with graph.inserting_before(output):
        for dst, value in writebacks:
            node = graph.call_function(torch.ops.aten.copy_.default, (dst, value))
            node.meta["val"] = dst.meta.get("val")
    output.args = (tuple(kept),)
    return len(writebacks)


def load(path: str | os.PathLike[str]) -> Any:
    """Reads a ``.fxir`` file back into a ``torch.fx.GraphModule``.

    Raises:
        FileFormatError: the file is unreadable.
        FxrewriteError: an operator it calls is not registered in this process
            (import the library that defines it first), or the graph refers to
            module attributes the file does not store.
    """
    import operator

    import torch
    import torch.fx

    native = read_native(path)
    targets, nodes = native.to_parts()

    from .encode import AUTO_FUNCTIONALIZED

    kinds = _core.WIRE_CODES["target_kind"]
    tags = _core.WIRE_CODES["value_tag"]
    af_by_code = {code: op for op, (_name, code) in AUTO_FUNCTIONALIZED.items()}

    def resolve(t: tuple[str, int, Any], node_name: str, role: str = "calls") -> Any:
        name, kind, _schema = t
        if kind == kinds["operator"]:
            ns_name, overload = name.split(".", 1)
            ns, op = ns_name.split("::", 1)
            try:
                return getattr(getattr(getattr(torch.ops, ns), op), overload)
            except (AttributeError, RuntimeError) as e:
                raise FxrewriteError(
                    f"{path}: node {node_name} {role} operator {name}, which is not registered in this "
                    f"process; import the Python module that registers the {ns!r} operators before "
                    f"loading (on the command line: --import MODULE)"
                ) from e
        if kind == kinds["getitem"]:
            return operator.getitem
        if kind in af_by_code:
            return af_by_code[kind]
        if kind == kinds["higher_order"]:
            return getattr(torch.ops.higher_order, name.removeprefix("higher_order."))
        raise FxrewriteError(f"{path}: node {node_name} calls {name}, which cannot be resolved when loading")

    graph = torch.fx.Graph()
    made: list[torch.fx.Node] = []
    resolved: dict[int, Any] = {}

    def value(v: Any, node_name: str) -> Any:
        if not isinstance(v, tuple):
            return v
        tag, body = v
        if tag == tags["node"]:
            return made[body]
        if tag == tags["list"]:
            return [value(x, node_name) for x in body]
        if tag == tags["tuple"]:
            return tuple(value(x, node_name) for x in body)
        if tag in (tags["dtype"], tags["layout"], tags["memory_format"]):
            return getattr(torch, body)
        if tag == tags["device"]:
            return torch.device(body)
        if tag == tags["target"]:
            # An operator as an argument: the mutable op of an auto_functionalized node.
            return resolve(targets[body], node_name, "takes as argument the")
        raise FxrewriteError(f"{path}: a constant ({body}) cannot be rebuilt when loading")

    opnames = {code: name for name, code in _core.WIRE_CODES["opcode"].items()}
    for opcode, name, tid, args, kwargs, _meta, _source in nodes:
        op = opnames[opcode]
        if op in ("get_attr", "call_module"):
            raise FxrewriteError(
                f"{path}: node {name} refers to a module attribute, which .fxir does not store"
            )
        if op == "call_function":
            if tid not in resolved:
                resolved[tid] = resolve(targets[tid], name)
            target = resolved[tid]
        else:
            target = targets[tid][0]
        # The pre pass's record travels in the IR as a keyword; on the FX node
        # it is metadata again (an auto_functionalized node takes no such kwarg).
        fx_kwargs = {k: value(v, name) for k, v in kwargs if k not in IR_ONLY_KWARGS}
        n = graph.create_node(op, target, tuple(value(a, name) for a in args), fx_kwargs, name=name)
        groups = next((v for k, v in kwargs if k == ALIAS_GROUPS), None)
        if groups is not None:
            from .encode import ALIAS_GROUPS_META

            n.meta[ALIAS_GROUPS_META] = tuple(tuple(g) for g in value(groups, name))
        fresh = next((v for k, v in kwargs if k == FRESH_SLOTS), None)
        if fresh is not None:
            from .encode import FRESH_SLOTS_META

            n.meta[FRESH_SLOTS_META] = tuple(value(fresh, name))
        made.append(n)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


@dataclass(frozen=True)
class Skipped:
    """An entry met while searching a directory and not read, and why."""

    path: Path
    reason: str
    size: int | None = None
    """The file's size when it was skipped for being over the size limit."""


def find_graphs(paths: list[str], max_bytes: int | None = None) -> tuple[list[Path], list[Skipped]]:
    """The saved graphs to read: each named path that is not a directory, as
    given (reading it reports any problem), then, recursively and sorted, the
    ``*.fxir`` and ``*.pt2`` files inside named directories. Symbolic links to
    files are followed, links to directories are not. Nothing is opened: an
    entry that is not a regular file (a FIFO, a device, a broken link) or is
    over ``max_bytes`` (default ``max_file_size()``), and a directory that
    cannot be listed, are returned as skipped.

    Raises:
        ValueError: ``FXREWRITE_MAX_FILE_SIZE`` is not a size.
    """
    limit = max_file_size() if max_bytes is None else max_bytes
    files: list[Path] = []
    skipped: list[Skipped] = []
    suffixes = (SUFFIX, *EXPORT_SUFFIXES)
    for p in paths:
        path = Path(p)
        if not path.is_dir():
            files.append(path)
            continue
        found: list[Path] = []
        stack = [path]
        while stack:
            d = stack.pop()
            try:
                with os.scandir(d) as it:
                    entries = list(it)
            except OSError as e:
                skipped.append(Skipped(d, f"cannot list the directory: {reason_of(e)}"))
                continue
            for entry in entries:
                q = Path(entry.path)
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(q)
                        continue
                except OSError as e:
                    skipped.append(Skipped(q, reason_of(e)))
                    continue
                if q.suffix not in suffixes:
                    continue
                try:
                    st = os.stat(q)
                except FileNotFoundError:
                    skipped.append(Skipped(q, "a broken symbolic link"))
                    continue
                except OSError as e:
                    skipped.append(Skipped(q, reason_of(e)))
                    continue
                err = refusal(st, limit)
                if err is None:
                    found.append(q)
                elif stat.S_ISDIR(st.st_mode):
                    skipped.append(Skipped(q, "a symbolic link to a directory (not followed)"))
                else:
                    size = st.st_size if err.errno == errno.EFBIG else None
                    skipped.append(Skipped(q, reason_of(err), size))
        files.extend(sorted(found))
    skipped.sort(key=lambda s: s.path)
    return files, skipped


def reason_of(e: OSError) -> str:
    """The reason an ``OSError`` gives, without its errno and file name, starting in lower case."""
    text = e.strerror or str(e)
    return text[:1].lower() + text[1:]
