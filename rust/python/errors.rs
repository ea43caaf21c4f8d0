//! The Python exception hierarchy and the single `Error` -> `PyErr` mapping.
//!
//! One class per [`ErrorKind`], under `FxrewriteError`:
//!
//! ```text
//! FxrewriteError
//! ├── InvalidGraphError        invalid_graph
//! ├── FileFormatError
//! │   ├── DecodeError          decode
//! │   └── VersionError         version
//! ├── UnsupportedGraphError    unsupported
//! └── InternalError            internal
//! ```
//!
//! Every instance carries `kind` (its class's), and `node`, `op` and
//! `offset` (the error's, `None` when it has none), so callers branch on
//! fields instead of parsing messages. The class-level values make the same
//! attributes exist on errors raised from Python.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::error::{Error, ErrorKind, ErrorNode};

create_exception!(
    _core,
    FxrewriteError,
    PyException,
    "Base class of every error fxrewrite raises."
);
create_exception!(
    _core,
    InvalidGraphError,
    FxrewriteError,
    "The graph breaks an invariant of the IR."
);
create_exception!(
    _core,
    FileFormatError,
    FxrewriteError,
    "A .fxir file is truncated, corrupt, hostile or of another format version."
);
create_exception!(
    _core,
    DecodeError,
    FileFormatError,
    "A .fxir file is truncated, corrupt or hostile."
);
create_exception!(
    _core,
    VersionError,
    FileFormatError,
    "A .fxir file of a format version this build does not read."
);
create_exception!(
    _core,
    UnsupportedGraphError,
    FxrewriteError,
    "Strict mode: a node could not be rewritten."
);
create_exception!(
    _core,
    InternalError,
    FxrewriteError,
    "A bug in fxrewrite; the graph was left untouched."
);

/// The Python class of each kind: the one place the mapping is written.
fn class_of(py: Python<'_>, kind: ErrorKind) -> Bound<'_, PyType> {
    match kind {
        ErrorKind::InvalidGraph => py.get_type::<InvalidGraphError>(),
        ErrorKind::Decode => py.get_type::<DecodeError>(),
        ErrorKind::Version => py.get_type::<VersionError>(),
        ErrorKind::Unsupported => py.get_type::<UnsupportedGraphError>(),
        ErrorKind::Internal => py.get_type::<InternalError>(),
    }
}

/// Converts an engine error into an instance of its kind's class: the
/// message is the error's `Display`, and `node` (an index or a name), `op`
/// and `offset` are set where the error has them.
pub fn to_py(err: Error) -> PyErr {
    Python::attach(|py| {
        let py_err = PyErr::from_type(class_of(py, err.kind()), err.to_string());
        let value = py_err.value(py);
        // Setting an attribute on a fresh exception object cannot fail in
        // practice; if it did, the exception still carries its message and
        // the class's `None`.
        let _ = match err.node() {
            Some(ErrorNode::Index(i)) => value.setattr("node", i),
            Some(ErrorNode::Name(name)) => value.setattr("node", name),
            None => Ok(()),
        };
        if let Some(op) = err.op() {
            let _ = value.setattr("op", op);
        }
        if let Some(offset) = err.offset() {
            let _ = value.setattr("offset", offset);
        }
        py_err
    })
}

/// An [`Error::Internal`] that concerns no one node, as a Python exception:
/// for the binding's own failures (a report that cannot be serialized, a
/// live graph of another size than the planned one).
pub fn internal(detail: impl Into<String>) -> PyErr {
    to_py(Error::internal(detail))
}

/// Registers the exception classes on the module, with their class-level
/// attributes: each kind's class its `kind`; `FileFormatError` `"decode"`
/// (Python raises it for an unreadable torch.export archive); the base
/// class `"error"`, and `node`, `op` and `offset` `None`, inherited by all.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let base = py.get_type::<FxrewriteError>();
    base.setattr("kind", "error")?;
    for attr in ["node", "op", "offset"] {
        base.setattr(attr, py.None())?;
    }
    py.get_type::<FileFormatError>()
        .setattr("kind", ErrorKind::Decode.as_str())?;
    for kind in ErrorKind::ALL {
        class_of(py, kind).setattr("kind", kind.as_str())?;
    }
    m.add("FxrewriteError", base)?;
    m.add("FileFormatError", py.get_type::<FileFormatError>())?;
    for kind in ErrorKind::ALL {
        let class = class_of(py, kind);
        m.add(class.name()?, class)?;
    }
    Ok(())
}
