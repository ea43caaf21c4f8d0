//! The report as Python reads it: frozen views of the engine's own report
//! types ([`crate::plan::CloneNote`], [`crate::plan::NodeReport`]), made
//! from them without a JSON round trip. The fields, their names and their
//! vocabularies are defined once, in `crate::plan`; Python
//! (`fxrewrite.report.Report`) adds the pass's outcome (timings, error) and
//! the presentation (summary, totals, JSON).
//!
//! Like the frozen dataclasses they replace, they compare and hash by value.
//!
//! Python builds values of these classes too (tests, and the pass adding
//! what only the live graph knows): the constructors check the names of
//! `form`, `rule`, `action` and `cause` against the engine's, so a report
//! never holds a name the engine would not write.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyType};

use crate::forms::Form;
use crate::plan::{Action, CloneNote, LeftCause, NodeReport};

/// One clone the plan keeps, and why it is needed.
#[pyclass(
    name = "CloneNote",
    module = "fxrewrite._core",
    frozen,
    eq,
    hash,
    from_py_object
)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct PyCloneNote(CloneNote);

#[pymethods]
impl PyCloneNote {
    #[new]
    #[pyo3(signature = (
        arg, reason, reader = None, reader_source = None, bytes = None,
        bytes_expr = None, bytes_at_trace = None
    ))]
    fn new(
        arg: String,
        reason: String,
        reader: Option<String>,
        reader_source: Option<String>,
        bytes: Option<u64>,
        bytes_expr: Option<String>,
        bytes_at_trace: Option<u64>,
    ) -> Self {
        Self(CloneNote {
            arg,
            reason,
            reader,
            reader_source,
            bytes,
            bytes_expr,
            bytes_at_trace,
        })
    }

    /// The written argument (`out`, `xs[1]`, or a v2 base `_all_bases[0]`).
    #[getter]
    fn arg(&self) -> &str {
        &self.0.arg
    }

    /// Why the buffer cannot be written in place.
    #[getter]
    fn reason(&self) -> &str {
        &self.0.reason
    }

    /// The node that reads the old value, when that is the reason.
    #[getter]
    fn reader(&self) -> Option<&str> {
        self.0.reader.as_deref()
    }

    /// The reader's source line, when known.
    #[getter]
    fn reader_source(&self) -> Option<&str> {
        self.0.reader_source.as_deref()
    }

    /// Bytes copied, where the shape is static.
    #[getter]
    fn bytes(&self) -> Option<u64> {
        self.0.bytes
    }

    /// Where it is symbolic: the bytes as an expression of the graph's
    /// symbols (filled by the pass from the live graph).
    #[getter]
    fn bytes_expr(&self) -> Option<&str> {
        self.0.bytes_expr.as_deref()
    }

    /// That expression at the sizes the graph was traced with.
    #[getter]
    fn bytes_at_trace(&self) -> Option<u64> {
        self.0.bytes_at_trace
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
        match (&self.0.bytes, &self.0.bytes_expr, self.0.bytes_at_trace) {
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
        let d = PyDict::new(py);
        let n = &self.0;
        d.set_item("arg", &n.arg)?;
        d.set_item("reason", &n.reason)?;
        d.set_item("reader", &n.reader)?;
        d.set_item("reader_source", &n.reader_source)?;
        d.set_item("bytes", n.bytes)?;
        d.set_item("bytes_expr", &n.bytes_expr)?;
        d.set_item("bytes_at_trace", n.bytes_at_trace)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let n = &self.0;
        format!(
            "CloneNote(arg={:?}, reason={:?}, reader={}, bytes={})",
            n.arg,
            n.reason,
            repr_of(n.reader.as_ref()),
            n.bytes.map_or("None".to_string(), |b| b.to_string())
        )
    }

    /// Pickles as its constructor's arguments (a pass object holding
    /// reports may be pickled, e.g. by a serving engine's spawned workers).
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
        let n = &slf.get().0;
        let args = (
            &n.arg,
            &n.reason,
            &n.reader,
            &n.reader_source,
            n.bytes,
            &n.bytes_expr,
            n.bytes_at_trace,
        )
            .into_pyobject(slf.py())?;
        Ok((slf.get_type(), args))
    }
}

/// An optional text as Python writes it in a repr (`None` or quoted).
fn repr_of(text: Option<impl AsRef<str>>) -> String {
    text.map_or("None".to_string(), |t| format!("{:?}", t.as_ref()))
}

/// What happened to one auto_functionalized node.
#[pyclass(name = "Decision", module = "fxrewrite._core", frozen, eq, hash)]
#[derive(PartialEq, Eq, Hash)]
pub(super) struct PyDecision(NodeReport);

/// `value`, named by `field` of a report, if the engine knows the name.
fn named<T>(field: &str, value: &str, parse: impl Fn(&str) -> Option<T>) -> PyResult<T> {
    parse(value).ok_or_else(|| {
        PyValueError::new_err(format!(
            "{value:?} is no {field} of a report (fxrewrite._core.REPORT_VOCABULARY and the \
             rule names list them)"
        ))
    })
}

#[pymethods]
impl PyDecision {
    #[new]
    #[pyo3(signature = (
        node, op, form, rule, action, moved = Vec::new(), clones = Vec::new(),
        scatters_removed = 0, reason = None, source = None, cause = None
    ))]
    #[allow(clippy::too_many_arguments)] // the report's fields, as keywords
    fn new(
        node: String,
        op: String,
        form: &str,
        rule: &str,
        action: &str,
        moved: Vec<String>,
        clones: Vec<PyCloneNote>,
        scatters_removed: usize,
        reason: Option<String>,
        source: Option<String>,
        cause: Option<&str>,
    ) -> PyResult<Self> {
        Ok(Self(NodeReport {
            node,
            op,
            form: named("form", form, Form::from_name)?,
            rule: named("rule", rule, crate::forms::rule_named)?,
            action: named("action", action, Action::from_name)?,
            moved,
            clones: clones.into_iter().map(|c| c.0).collect(),
            scatters_removed,
            reason,
            cause: cause
                .map(|c| named("cause", c, LeftCause::from_name))
                .transpose()?,
            source,
        }))
    }

    /// The node's name.
    #[getter]
    fn node(&self) -> &str {
        &self.0.node
    }

    /// The mutating operator (`mylib::rms_norm.default`).
    #[getter]
    fn op(&self) -> &str {
        &self.0.op
    }

    /// `"v1"` (`auto_functionalized`) or `"v2"`.
    #[getter]
    fn form(&self) -> &'static str {
        self.0.form.as_str()
    }

    /// The rule that read the node, `"none"` when none did.
    #[getter]
    fn rule(&self) -> &'static str {
        self.0.rule
    }

    /// `"reinplaced"`, `"cloned"` or `"left"`.
    #[getter]
    fn action(&self) -> &'static str {
        self.0.action.as_str()
    }

    /// Readers moved before the call instead of cloning.
    #[getter]
    fn moved(&self) -> Vec<String> {
        self.0.moved.clone()
    }

    /// The clones kept.
    #[getter]
    fn clones(&self) -> Vec<PyCloneNote> {
        self.0.clones.iter().cloned().map(PyCloneNote).collect()
    }

    /// Write-back scatters made unnecessary.
    #[getter]
    fn scatters_removed(&self) -> usize {
        self.0.scatters_removed
    }

    /// Why the node was left, for `"left"`.
    #[getter]
    fn reason(&self) -> Option<&str> {
        self.0.reason.as_deref()
    }

    /// The node's own source line, when known.
    #[getter]
    fn source(&self) -> Option<&str> {
        self.0.source.as_deref()
    }

    /// The kind of reason, for `"left"`.
    #[getter]
    fn cause(&self) -> Option<&'static str> {
        self.0.cause.map(LeftCause::as_str)
    }

    /// A copy with `clones` in place of this decision's (the pass adds
    /// what only the live graph knows to them).
    fn with_clones(&self, clones: Vec<PyCloneNote>) -> Self {
        Self(NodeReport {
            clones: clones.into_iter().map(|c| c.0).collect(),
            ..self.0.clone()
        })
    }

    /// The decision as a JSON-ready dict, every field named, clones as dicts.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let r = &self.0;
        d.set_item("node", &r.node)?;
        d.set_item("op", &r.op)?;
        d.set_item("form", r.form.as_str())?;
        d.set_item("rule", r.rule)?;
        d.set_item("action", r.action.as_str())?;
        d.set_item("moved", &r.moved)?;
        let clones = r
            .clones
            .iter()
            .map(|c| PyCloneNote(c.clone()).to_dict(py))
            .collect::<PyResult<Vec<_>>>()?;
        d.set_item("clones", clones)?;
        d.set_item("scatters_removed", r.scatters_removed)?;
        d.set_item("reason", &r.reason)?;
        d.set_item("source", &r.source)?;
        d.set_item("cause", r.cause.map(LeftCause::as_str))?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let r = &self.0;
        format!(
            "Decision(node={:?}, op={:?}, form={:?}, action={:?}, clones={}, moved={}, cause={})",
            r.node,
            r.op,
            r.form.as_str(),
            r.action.as_str(),
            r.clones.len(),
            r.moved.len(),
            repr_of(r.cause.map(LeftCause::as_str))
        )
    }

    /// Pickles as its constructor's arguments.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let r = &slf.get().0;
        let clones = r.clones.iter().cloned().map(PyCloneNote);
        let args = PyTuple::new(
            py,
            [
                r.node.as_str().into_pyobject(py)?.into_any(),
                r.op.as_str().into_pyobject(py)?.into_any(),
                r.form.as_str().into_pyobject(py)?.into_any(),
                r.rule.into_pyobject(py)?.into_any(),
                r.action.as_str().into_pyobject(py)?.into_any(),
                r.moved.clone().into_pyobject(py)?.into_any(),
                clones.collect::<Vec<_>>().into_pyobject(py)?.into_any(),
                r.scatters_removed.into_pyobject(py)?.into_any(),
                r.reason.as_deref().into_pyobject(py)?.into_any(),
                r.source.as_deref().into_pyobject(py)?.into_any(),
                r.cause.map(LeftCause::as_str).into_pyobject(py)?.into_any(),
            ],
        )?;
        Ok((slf.get_type(), args))
    }
}

/// The engine's report of a plan as the keywords of
/// `fxrewrite.report.Report` (`nodes`, `decisions`, `writebacks_removed`,
/// `realized`), the decisions as [`PyDecision`]s in graph order.
pub(super) fn report_fields<'py>(
    py: Python<'py>,
    report: &crate::plan::Report,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("nodes", report.nodes)?;
    let decisions: Vec<PyDecision> = report.decisions.iter().cloned().map(PyDecision).collect();
    d.set_item("decisions", decisions)?;
    d.set_item("writebacks_removed", report.writebacks_removed)?;
    d.set_item("realized", report.realized)?;
    Ok(d)
}

/// Registers the report classes on the module.
pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCloneNote>()?;
    m.add_class::<PyDecision>()?;
    Ok(())
}
