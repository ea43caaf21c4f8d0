"""Inputs and outputs of the ``fxrewrite`` command: finding and loading the
saved graphs, the one-line errors that name a path and a command that works,
progress on stderr, and writing to stdout or an output file. Apart from the
verbs (``_cli_commands``) and the parser (``cli``) so that each reads alone.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import _core
from .fxir import EXPORT_SUFFIXES, Skipped, find_graphs, reason_of

EXIT_OK, EXIT_REMAIN, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad input: reported on stderr, exit code 2."""


class _Progress:
    """A one-line progress display on stderr, only for interactive runs."""

    def __init__(self, total: int, label: str) -> None:
        self.total, self.label, self.done = total, label, 0
        self.enabled = total > 1 and sys.stderr.isatty()

    def step(self, what: str) -> None:
        self.done += 1
        if self.enabled:
            sys.stderr.write(f"\r{self.label} [{self.done}/{self.total}] {what[-60:]:<60}")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


def _rerun(args: argparse.Namespace, option: str, value: str) -> str:
    """The command line of this run with ``option value`` added at the end of
    the verb's options (``--max-size`` replacing any given), quoted for a shell."""
    argv: list[str] = list(args.argv)
    at = argv.index("--") if "--" in argv else len(argv)
    head, tail = argv[:at], argv[at:]
    if option == "--max-size":
        kept: list[str] = []
        skip = False
        for a in head:
            if skip:
                skip = False
            elif a == option:
                skip = True
            elif not a.startswith(f"{option}="):
                kept.append(a)
        head = kept
    return shlex.join(["fxrewrite", *head, option, value, *tail])


def _size_text(n: int) -> str:
    """A size ``--max-size`` reads back: the next power of two above ``n``, in the largest whole unit."""
    p = 1 << max(n, 1).bit_length()
    for unit, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if p >= 1 << shift:
            return f"{p >> shift}{unit}"
    return str(p)


def _unreadable(args: argparse.Namespace, path: Path, e: OSError) -> str:
    """One line naming ``path`` and why it cannot be read, with a command that reads it when one would."""
    if e.errno == errno.ENOENT:
        return f"{path}: no such file"
    if e.errno == errno.EFBIG:
        size = _file_size(path)
        if size is not None:
            return f"{path}: {reason_of(e)}; to read it: {_rerun(args, '--max-size', _size_text(size))}"
    return f"{path}: {reason_of(e)}"


def _file_size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _load(args: argparse.Namespace, path: Path) -> _core.Graph:
    from .fxir import native_from_export, read_native

    try:
        if path.suffix in EXPORT_SUFFIXES:
            hint = f"rerun with MODULE the library that defines it: {_rerun(args, '--import', 'MODULE')}"
            return native_from_export(path, args.max_size, import_hint=hint)
        return read_native(path, args.max_size)
    except _core.FileFormatError as e:
        message = str(e)
        raise UsageError(message if message.startswith(f"{path}: ") else f"{path}: {message}") from e
    except OSError as e:
        raise UsageError(_unreadable(args, path, e)) from e


def _files(args: argparse.Namespace) -> tuple[list[Path], list[Skipped]]:
    """The graphs named or found under directories, and what was skipped
    there (each skip is warned about on stderr)."""
    files, skipped = find_graphs(args.files, args.max_size)
    for s in skipped:
        line = f"{s.path}: {s.reason}"
        if s.size is not None:
            line += f"; to read it: {_rerun(args, '--max-size', _size_text(s.size))}"
        print(f"fxrewrite {args.command}: warning: skipped {line}", file=sys.stderr)
    if not files:
        raise UsageError("no saved graphs found (looked for *.fxir and *.pt2)")
    return files, skipped


def _one_file(args: argparse.Namespace) -> Path:
    """The FILE of a verb that reads one graph; a directory is an error naming how to list it."""
    path = Path(args.file)
    if path.is_dir():
        raise UsageError(
            f"{path}: is a directory, one saved graph file was expected; to list the graphs in it: "
            f"{shlex.join(['fxrewrite', 'inspect', str(path)])}"
        )
    return path


def _emit(args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    out = json.dumps(data, indent=2) if args.json else text()
    try:
        print(out, flush=True)
    except BrokenPipeError:
        raise
    except OSError as e:
        raise UsageError(f"cannot write to standard output: {reason_of(e)}") from e


def _skipped_json(skipped: list[Skipped]) -> list[dict[str, str]]:
    return [{"file": str(s.path), "skipped": s.reason} for s in skipped]


def _write_output(path: str, data: bytes) -> None:
    """Writes ``data`` to ``path``; any failure is a ``UsageError`` naming the path and the reason."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    try:
        # O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of hanging.
        fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0), 0o666)
    except OSError as e:
        why = "a FIFO with no reader" if e.errno == errno.ENXIO else reason_of(e)
        raise UsageError(f"{path}: cannot write the output: {why}") from e
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as e:
        raise UsageError(f"{path}: cannot write the output: {reason_of(e)}") from e
    finally:
        try:
            os.close(fd)
        except OSError as e:
            raise UsageError(f"{path}: cannot write the output: {reason_of(e)}") from e
