"""What Inductor's FX graph cache must key on besides the configuration:
the bytes of the native module and of this package's Python sources. The
version string alone stays the same between development builds, and a
cached graph compiled by an older pass would be reused after the pass
changed. Each is hashed once per process."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from . import _core


@functools.cache
def native_build_id() -> str:
    """Hash of the native module file: a rebuilt engine is a new cache key."""
    path = getattr(_core, "__file__", None)
    if not path or not os.path.exists(path):
        return "unknown"
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


@functools.cache
def python_sources_id() -> str:
    """Hash of the package's Python sources, by name and content: an edited
    pass (the pre pass's record, the metadata of edited nodes) is a new
    cache key."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]
