//! The report as Python reads it: frozen views of the engine's own entry
//! types ([`crate::plan::CloneNote`], [`crate::plan::NodeReport`]), made
//! from them without a JSON round trip.
//!
//! The fields are declared once, in `crate::plan`. Everything Python sees of
//! them is made from the types' serde names and order: the constructors
//! (positional in that order, or by name), one read-only attribute per field
//! (added to the class when the module loads), `to_dict`, `repr`, pickling,
//! and `__match_args__`. serde-aux reads the names off the types'
//! `Deserialize`; pythonize converts values both ways, so a name the engine
//! would not write (a `form`, `rule`, `action` or `cause`) is refused with
//! serde's error, as it would be reading the engine's JSON. Python
//! (`fxrewrite.report.Report`) adds the pass's outcome (timings, error) and
//! the presentation (summary, totals, JSON).
//!
//! Like the frozen dataclasses they replace, they compare and hash by value.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyDict, PyList, PyString, PyTuple, PyType};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_aux::serde_introspection::serde_introspect;

use super::field_of::field_of;
use crate::plan::{CloneNote, NodeReport};

/// A decision's field that holds entries of their own: Python reads its
/// clones as `CloneNote` objects and may give them so to the constructor.
const NESTED_CLONES: &str = "clones";

/// The field names of `T`, in its declaration (and JSON) order.
fn names<T: DeserializeOwned>() -> &'static [&'static str] {
    serde_introspect::<T>()
}

/// `value` as a dict of every field, in order: serde's, with the fields its
/// JSON skips when empty filled in as `None`.
fn as_dict<'py, T: Serialize + DeserializeOwned>(
    py: Python<'py>,
    value: &T,
) -> PyResult<Bound<'py, PyDict>> {
    let serialized = pythonize::pythonize(py, value)
        .map_err(|e| PyValueError::new_err(e.to_string()))?
        .cast_into::<PyDict>()?;
    let dict = PyDict::new(py);
    for name in names::<T>() {
        let value = serialized.get_item(name)?;
        dict.set_item(name, value.unwrap_or(py.None().into_bound(py)))?;
    }
    Ok(dict)
}

/// A `T` from positional arguments (in field order) and keywords;
/// `given_as_entries` turns nested entries given as objects into the dicts
/// serde reads.
fn from_arguments<T: DeserializeOwned>(
    class: &str,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
    given_as_entries: impl Fn(&Bound<'_, PyDict>) -> PyResult<()>,
) -> PyResult<T> {
    let names = names::<T>();
    if args.len() > names.len() {
        return Err(PyTypeError::new_err(format!(
            "{class}() takes at most {} positional arguments ({}), {} given",
            names.len(),
            names.join(", "),
            args.len()
        )));
    }
    let fields = PyDict::new(args.py());
    for (name, arg) in names.iter().zip(args.iter()) {
        fields.set_item(name, arg)?;
    }
    for (name, value) in kwargs.into_iter().flatten() {
        if fields.contains(&name)? {
            return Err(PyTypeError::new_err(format!(
                "{class}() got multiple values for argument {name}"
            )));
        }
        fields.set_item(name, value)?;
    }
    given_as_entries(&fields)?;
    pythonize::depythonize::<T>(&fields).map_err(|e| {
        let text = format!("{class}(): {e}");
        // As Python words a call's missing or unknown argument.
        if text.contains("missing field") || text.contains("unknown field") {
            PyTypeError::new_err(text)
        } else {
            PyValueError::new_err(text)
        }
    })
}

/// Field `name` of `value`, made anew at each read (a list is the caller's
/// own: the entry stays frozen); `None` where serde skips it.
fn field<'py, T: Serialize>(py: Python<'py>, value: &T, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let found = field_of(py, value, name).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(found.unwrap_or_else(|| py.None().into_bound(py)))
}

/// `Class(field=value, ...)`, every field of `T` as `read` gives it, as a
/// dataclass writes it.
fn repr<'py, T: DeserializeOwned>(
    class: &str,
    read: impl Fn(&str) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<String> {
    let parts = names::<T>()
        .iter()
        .map(|name| Ok(format!("{name}={}", read(name)?.repr()?)))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(format!("{class}({})", parts.join(", ")))
}

/// The constructor's positional arguments that make the value again: every
/// field of `T` as `read` gives it.
fn arguments<'py, T: DeserializeOwned>(
    py: Python<'py>,
    read: impl Fn(&str) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let values = names::<T>()
        .iter()
        .map(|name| read(name))
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, values)
}

/// One clone the plan keeps, and why it is needed.
#[pyclass(name = "CloneNote", module = "fxrewrite._core", frozen, eq, hash)]
#[derive(PartialEq, Hash)]
pub(super) struct PyCloneNote(CloneNote);

impl PyCloneNote {
    fn field<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        field(py, &self.0, name)
    }
}

#[pymethods]
impl PyCloneNote {
    #[new]
    #[pyo3(signature = (*args, **kwargs))]
    fn new(args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        from_arguments("CloneNote", args, kwargs, |_| Ok(())).map(Self)
    }

    /// A copy with what only the live graph knows; each fact given replaces
    /// this note's, the others are kept.
    #[pyo3(signature = (*, reader_source = None, bytes_expr = None, bytes_at_trace = None))]
    fn with_live_facts(
        &self,
        reader_source: Option<String>,
        bytes_expr: Option<String>,
        bytes_at_trace: Option<u64>,
    ) -> Self {
        let mut note = self.0.clone();
        note.reader_source = reader_source.or(note.reader_source);
        note.bytes_expr = bytes_expr.or(note.bytes_expr);
        note.bytes_at_trace = bytes_at_trace.or(note.bytes_at_trace);
        Self(note)
    }

    /// The bytes copied in words (`2048 bytes`, `4*s0 bytes (128 at the
    /// traced sizes)`, `symbolic size`).
    fn size_text(&self) -> String {
        let n = &self.0;
        match (&n.bytes, &n.bytes_expr, n.bytes_at_trace) {
            (Some(bytes), _, _) => format!("{bytes} bytes"),
            (None, Some(expr), Some(at)) if !expr.is_empty() => {
                format!("{expr} bytes ({at} at the traced sizes)")
            }
            (None, Some(expr), None) if !expr.is_empty() => format!("{expr} bytes"),
            _ => "symbolic size".to_string(),
        }
    }

    /// The note as a JSON-ready dict, every field named.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        as_dict(py, &self.0)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        repr::<CloneNote>("CloneNote", |name| self.field(py, name))
    }

    /// Pickles as its constructor's arguments (a pass object holding
    /// reports may be pickled, e.g. by a serving engine's spawned workers).
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let args = arguments::<CloneNote>(py, |name| slf.get().field(py, name))?;
        Ok((slf.get_type(), args))
    }
}

/// What happened to one auto_functionalized node.
#[pyclass(name = "Decision", module = "fxrewrite._core", frozen, eq, hash)]
#[derive(PartialEq, Hash)]
pub(super) struct PyDecision(NodeReport);

impl PyDecision {
    fn field<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        if name != NESTED_CLONES {
            return field(py, &self.0, name);
        }
        let clones = self.0.clones.iter().cloned().map(PyCloneNote);
        Ok(PyList::new(py, clones.collect::<Vec<_>>())?.into_any())
    }
}

#[pymethods]
impl PyDecision {
    #[new]
    #[pyo3(signature = (*args, **kwargs))]
    fn new(args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let report = from_arguments("Decision", args, kwargs, |fields| {
            // Clones given as `CloneNote` objects are read as their fields.
            let Some(clones) = fields.get_item(NESTED_CLONES)? else {
                return Ok(());
            };
            let as_dicts = clones
                .try_iter()?
                .map(|c| {
                    let c = c?;
                    match c.cast::<PyCloneNote>() {
                        Ok(note) => Ok(as_dict(c.py(), &note.get().0)?.into_any()),
                        Err(_) => Ok(c),
                    }
                })
                .collect::<PyResult<Vec<_>>>()?;
            fields.set_item(NESTED_CLONES, as_dicts)
        })?;
        Ok(Self(report))
    }

    /// A copy with `clones` in place of this decision's (the pass adds
    /// what only the live graph knows to them).
    fn with_clones(&self, clones: Vec<PyRef<'_, PyCloneNote>>) -> Self {
        Self(NodeReport {
            clones: clones.iter().map(|c| c.0.clone()).collect(),
            ..self.0.clone()
        })
    }

    /// The decision as a JSON-ready dict, every field named, clones as dicts.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = as_dict(py, &self.0)?;
        let clones = self.0.clones.iter().map(|c| as_dict(py, c));
        dict.set_item(NESTED_CLONES, clones.collect::<PyResult<Vec<_>>>()?)?;
        Ok(dict)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        repr::<NodeReport>("Decision", |name| self.field(py, name))
    }

    /// Pickles as its constructor's arguments.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let args = arguments::<NodeReport>(py, |name| slf.get().field(py, name))?;
        Ok((slf.get_type(), args))
    }
}

/// The engine's report of a plan as the keywords of
/// `fxrewrite.report.Report`: its serde fields in order, the decisions as
/// [`PyDecision`]s in graph order.
pub(super) fn report_fields<'py>(
    py: Python<'py>,
    report: &crate::plan::Report,
) -> PyResult<Bound<'py, PyDict>> {
    const DECISIONS: &str = "decisions";
    let dict = PyDict::new(py);
    for &name in serde_introspect::<crate::plan::Report>() {
        if name == DECISIONS {
            // As objects, each field converted only when read.
            let decisions = report.decisions.iter().cloned().map(PyDecision);
            dict.set_item(name, decisions.collect::<Vec<_>>())?;
        } else {
            dict.set_item(name, field(py, report, name)?)?;
        }
    }
    Ok(dict)
}

/// Adds one read-only attribute per field of `T` to the class `C`, reading
/// it through `field`, and `__match_args__` in field order.
fn add_fields<C, T>(
    m: &Bound<'_, PyModule>,
    field: fn(&C, Python<'_>, &str) -> PyResult<Py<PyAny>>,
) -> PyResult<()>
where
    C: pyo3::PyClass<Frozen = pyo3::pyclass::boolean_struct::True> + Sync,
    T: Serialize + DeserializeOwned,
{
    let py = m.py();
    let class = py.get_type::<C>();
    let property = py.import("builtins")?.getattr("property")?;
    for &name in names::<T>() {
        let read = PyCFunction::new_closure(
            py,
            None,
            None,
            move |args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>| {
                let slf = args.get_item(0)?;
                let entry = slf.cast::<C>()?;
                field(entry.get(), args.py(), name)
            },
        )?;
        class.setattr(name, property.call1((read,))?)?;
    }
    let names = names::<T>().iter().map(|n| PyString::new(py, n));
    class.setattr("__match_args__", PyTuple::new(py, names)?)?;
    Ok(())
}

/// Registers the report classes on the module.
pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCloneNote>()?;
    m.add_class::<PyDecision>()?;
    add_fields::<PyCloneNote, CloneNote>(m, |note, py, name| Ok(note.field(py, name)?.unbind()))?;
    add_fields::<PyDecision, NodeReport>(m, |decision, py, name| {
        Ok(decision.field(py, name)?.unbind())
    })?;
    Ok(())
}
