//! The Python exception hierarchy and the single `Error` -> `PyErr` mapping.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use crate::error::Error;

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

/// Converts an engine error into the matching Python exception. The message
/// is the error's `Display`; the stable variant name is the `kind` attribute.
pub fn to_py(err: Error) -> PyErr {
    let kind = err.kind();
    let msg = err.to_string();
    let py_err = match err {
        Error::InvalidGraph { .. } => InvalidGraphError::new_err(msg),
        Error::Decode { .. } | Error::Version { .. } => FileFormatError::new_err(msg),
        Error::Unsupported { .. } => UnsupportedGraphError::new_err(msg),
        Error::Internal { .. } => InternalError::new_err(msg),
    };
    Python::attach(|py| {
        // Setting an attribute on a fresh exception object cannot fail in
        // practice; if it did, the exception still carries its message.
        let _ = py_err.value(py).setattr("kind", kind);
    });
    py_err
}

/// Registers the exception classes on the module.
///
/// Each class also gets a class-level `kind`, so that an error raised from
/// Python (a torch.export archive that cannot be read, a target that cannot
/// be resolved when loading) carries one too: the class's own kind, or
/// `"error"` for the base class. Errors from Rust set the variant's kind on
/// the instance (`decode` or `version` for a `FileFormatError`).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    py.get_type::<FxrewriteError>().setattr("kind", "error")?;
    py.get_type::<InvalidGraphError>()
        .setattr("kind", "invalid_graph")?;
    py.get_type::<FileFormatError>().setattr("kind", "decode")?;
    py.get_type::<UnsupportedGraphError>()
        .setattr("kind", "unsupported")?;
    py.get_type::<InternalError>().setattr("kind", "internal")?;
    m.add("FxrewriteError", py.get_type::<FxrewriteError>())?;
    m.add("InvalidGraphError", py.get_type::<InvalidGraphError>())?;
    m.add("FileFormatError", py.get_type::<FileFormatError>())?;
    m.add(
        "UnsupportedGraphError",
        py.get_type::<UnsupportedGraphError>(),
    )?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    Ok(())
}
