//! The `fxrewrite._core` extension module: conversion between Python data and
//! the IR, and registration. No engine logic lives here.
//!
//! The encoder (`python/fxrewrite/encode.py`) hands over plain tuples; they
//! are converted to an owned [`Graph`] while the GIL is held, then the engine
//! runs with the GIL released. The plan stays in Rust (an opaque [`PyPlan`]):
//! the one applier (`crate::plan::apply`) applies it to the live graph
//! through [`fx_editor::FxEditor`], and only the report crosses to Python.

mod convert;
mod errors;
mod field_of;
mod fx_editor;
mod fx_reader;
mod report;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::ir::Graph;

/// A plan made by the engine, kept in Rust until it is applied.
#[pyclass(name = "Plan", module = "fxrewrite._core", frozen)]
struct PyPlan {
    plan: crate::plan::Plan,
}

#[pymethods]
impl PyPlan {
    /// The report (what was rewritten, cloned, left, and why) as the
    /// keywords of `fxrewrite.report.Report`: `nodes`, `decisions` (one
    /// `Decision` per auto_functionalized node, in graph order),
    /// `writebacks_removed`, `realized`.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        report::report_fields(py, &self.plan.report)
    }

    /// The same report as the engine serializes it (JSON text): the saved
    /// plans' snapshots (`scripts/plan_snapshot.py`) hold it byte for byte.
    fn report_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.plan.report).map_err(|e| errors::internal(e.to_string()))
    }

    /// Strict mode: raises `UnsupportedGraphError` naming the first node the
    /// plan leaves alone, if any.
    fn require_complete(&self) -> PyResult<()> {
        match self.plan.report.strict_error() {
            Some(e) => Err(errors::to_py(e)),
            None => Ok(()),
        }
    }

    /// The edits as JSON text, for tools that draw them (`explain --html`);
    /// the pass itself never reads them.
    fn edits_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.plan.edits).map_err(|e| errors::internal(e.to_string()))
    }

    /// Number of edits.
    fn __len__(&self) -> usize {
        self.plan.edits.len()
    }
}

/// What `Graph.from_fx` returns: the graph, the FX nodes by index and the
/// callables by target index.
type FromFx<'py> = (PyGraph, Vec<Bound<'py, PyAny>>, Vec<Bound<'py, PyAny>>);

/// A graph in fxrewrite's compact IR, owned by Rust.
#[pyclass(name = "Graph", module = "fxrewrite._core", frozen)]
struct PyGraph {
    graph: Graph,
    info: Vec<(String, String)>,
}

#[pymethods]
impl PyGraph {
    /// Builds a graph from the encoder's `(targets, nodes)` tuples and
    /// validates it.
    #[staticmethod]
    fn from_parts(targets: &Bound<'_, PyAny>, nodes: &Bound<'_, PyAny>) -> PyResult<Self> {
        let graph = convert::graph_from_parts(targets, nodes)?;
        crate::ir::validate::validate(&graph).map_err(errors::to_py)?;
        Ok(Self {
            graph,
            info: Vec::new(),
        })
    }

    /// Reads a live `torch.fx.Graph` in one walk over its nodes and validates
    /// it: the graph, its nodes in order and its callables by target index.
    /// `meta`: `"all"`, `"operands"` (only where the engine reads it) or
    /// `"none"`; `sources`: keep each node's user source line.
    #[staticmethod]
    #[pyo3(signature = (fx_graph, *, meta = "operands", sources = false))]
    fn from_fx<'py>(
        fx_graph: &Bound<'py, PyAny>,
        meta: &str,
        sources: bool,
    ) -> PyResult<FromFx<'py>> {
        let mode = match meta {
            "all" => fx_reader::MetaMode::All,
            "operands" => fx_reader::MetaMode::Operands,
            "none" => fx_reader::MetaMode::Nothing,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "meta must be \"all\", \"operands\" or \"none\", not {other:?}"
                )))
            }
        };
        let read = fx_reader::read(fx_graph, mode, sources)?;
        crate::ir::validate::validate(&read.graph).map_err(errors::to_py)?;
        Ok((
            Self {
                graph: read.graph,
                info: Vec::new(),
            },
            read.nodes,
            read.targets,
        ))
    }

    /// Reads a `.fxir` file's bytes (GIL released while decoding).
    #[staticmethod]
    fn read(py: Python<'_>, data: &[u8]) -> PyResult<Self> {
        let (graph, info) = py
            .detach(|| crate::ir::io::read(data))
            .map_err(errors::to_py)?;
        Ok(Self {
            graph,
            info: info.entries,
        })
    }

    /// The `.fxir` bytes of this graph, with the given provenance pairs.
    fn write<'py>(&self, py: Python<'py>, info: Vec<(String, String)>) -> Bound<'py, PyBytes> {
        let graph = &self.graph;
        let bytes =
            py.detach(|| crate::ir::io::write(graph, &crate::ir::io::FileInfo { entries: info }));
        PyBytes::new(py, &bytes)
    }

    /// Provenance pairs read from a file (empty for graphs built in memory).
    #[getter]
    fn info(&self) -> Vec<(String, String)> {
        self.info.clone()
    }

    /// The `inspect` summary as JSON text.
    fn inspect_json(&self) -> PyResult<String> {
        serde_json::to_string(&crate::inspect::inspect(&self.graph))
            .map_err(|e| errors::internal(e.to_string()))
    }

    /// Plans the rewrite (GIL released); the operators in `leave`
    /// (`ns::name` or `ns::name.overload`) are left to Inductor.
    #[pyo3(signature = (leave = None))]
    fn plan(&self, py: Python<'_>, leave: Option<Vec<String>>) -> PyResult<PyPlan> {
        let graph = &self.graph;
        let options = crate::engine::PlanOptions {
            leave: leave.unwrap_or_default(),
            ..Default::default()
        };
        let plan = py
            .detach(|| crate::engine::plan_with(graph, options))
            .map_err(errors::to_py)?;
        Ok(PyPlan { plan })
    }

    /// Applies `plan`, made from this graph, to `fx_graph`, the live
    /// `torch.fx.Graph` this graph was encoded from (`nodes`: its nodes in
    /// order; `targets`: the callables by target index), unchanged since.
    /// All or nothing: on any error the live graph is restored. Returns the
    /// nodes whose FX hash changed (created nodes, re-pointed users).
    fn apply_fx<'py>(
        &self,
        plan: &PyPlan,
        fx_graph: &Bound<'py, PyAny>,
        nodes: Vec<Bound<'py, PyAny>>,
        targets: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        if nodes.len() != self.graph.len() {
            return Err(errors::internal(format!(
                "the live graph has {} nodes, the planned one {}",
                nodes.len(),
                self.graph.len()
            )));
        }
        let mut editor = fx_editor::FxEditor::new(&self.graph, fx_graph.clone(), nodes, targets)?;
        crate::plan::apply::apply(&self.graph, &plan.plan, &mut editor).map_err(errors::to_py)?;
        Ok(editor.finish())
    }

    /// The graph in the text form `print(torch.fx.Graph)` uses.
    fn show(&self) -> String {
        crate::ir::show::to_fx_text(&self.graph)
    }

    /// Plans and applies the rewrite in Rust (GIL released throughout): the
    /// rewritten graph and the plan; `leave` as for `plan`.
    #[pyo3(signature = (leave = None))]
    fn rewritten(&self, py: Python<'_>, leave: Option<Vec<String>>) -> PyResult<(Self, PyPlan)> {
        let graph = &self.graph;
        let options = crate::engine::PlanOptions {
            leave: leave.unwrap_or_default(),
            ..Default::default()
        };
        let (out, plan) = py
            .detach(|| -> crate::Result<_> {
                let plan = crate::engine::plan_with(graph, options)?;
                let out = crate::plan::apply::apply_plan(graph, &plan)?;
                Ok((out, plan))
            })
            .map_err(errors::to_py)?;
        Ok((
            Self {
                graph: out,
                info: self.info.clone(),
            },
            PyPlan { plan },
        ))
    }

    /// The graph as the encoder's `(targets, nodes)` tuples.
    fn to_parts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::graph_to_parts(py, &self.graph)
    }

    /// Number of nodes.
    fn __len__(&self) -> usize {
        self.graph.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "<fxrewrite._core.Graph with {} nodes, {} targets>",
            self.graph.len(),
            self.graph.targets.len()
        )
    }
}

/// The engine version and the registered rule names, for cache keys.
#[pyfunction]
fn engine_fingerprint() -> String {
    format!(
        "{}:{}",
        crate::ENGINE_VERSION,
        crate::forms::rule_names().join(",")
    )
}

/// The schema facts of every aten operator the engine may insert, as the
/// command line tool's applier knows them (`rust/plan/apply/schemas.rs`),
/// in `fxrewrite.encode.schema_facts`' layout: checked against torch's own.
#[pyfunction]
fn inserted_op_schemas(py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyDict>> {
    let out = pyo3::types::PyDict::new(py);
    for name in crate::plan::apply::INSERTED_OPS {
        let schema = crate::plan::apply::aten_schema(name)
            .ok_or_else(|| errors::internal(format!("no schema for {name}")))?;
        out.set_item(*name, convert::schema_to(py, &schema)?)?;
    }
    Ok(out)
}

/// The tensors of one written argument, each `None` or a view tuple.
type WrittenItems<'py> = Vec<Option<Bound<'py, PyAny>>>;

/// The written tensors of one `auto_functionalized_v2` node, read from its
/// keywords by the engine's own parser of the v2 encoding
/// (`forms::reinplace_v2::read_written`), so that the pre pass, which
/// reads a live node before it is encoded, never parses it again (the
/// applier reads the encoded node: `forms::reinplace_v2::written_views`). `schema`: the operator's
/// `fxrewrite.encode.schema_facts`. Per written argument, in schema order,
/// `(name, items)`: `items` is `None` when the argument is `None`, else one
/// entry per tensor, `None` or `(label, base index, kind, keys)`, kind one of
/// `"whole"`, `"alias"`, `"slice"`, `"as_strided"` and keys the three
/// keywords holding the slice's or as_strided view's values.
///
/// Raises `InvalidGraphError` with the engine's reason when the keywords do
/// not encode the arguments.
#[pyfunction]
fn v2_written_views<'py>(
    py: Python<'py>,
    schema: &Bound<'py, PyAny>,
    kwargs: &Bound<'py, pyo3::types::PyDict>,
) -> PyResult<Vec<(String, Option<WrittenItems<'py>>)>> {
    use crate::forms::reinplace_v2::read_written;
    use crate::ir::Value;
    let schema = convert::schema_from(schema)?
        .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("no schema"))?;
    // Only the values the parser reads matter (indices, lengths, None);
    // the other keywords need only be present.
    let mut values: Vec<(String, Value)> = Vec::with_capacity(kwargs.len());
    for (k, v) in kwargs.iter() {
        let Ok(k) = k.extract::<String>() else {
            continue;
        };
        let value = match convert::scalar_from(&v)? {
            Some(scalar) => scalar,
            None => Value::Opaque(v.get_type().name()?.to_string()),
        };
        values.push((k, value));
    }
    let mut used = Vec::new();
    let mut out = Vec::new();
    for arg in schema.args.iter().filter(|a| a.is_written()) {
        let encoding = read_written(&values, arg, &mut used).map_err(|reason| {
            errors::to_py(crate::Error::InvalidGraph {
                node: None,
                detail: format!("auto_functionalized_v2 keywords: {reason}"),
            })
        })?;
        out.push((arg.name.clone(), encoding));
    }
    written_views_to_py(py, out)
}

/// The Python form of written arguments read by
/// `forms::reinplace_v2::read_written`, as [`v2_written_views`] documents it.
pub(crate) fn written_views_to_py(
    py: Python<'_>,
    written: Vec<(String, crate::forms::reinplace_v2::WrittenEncoding)>,
) -> PyResult<Vec<(String, Option<WrittenItems<'_>>)>> {
    use crate::forms::call::ViewOfBuffer;
    use crate::forms::reinplace_v2::{WrittenEncoding, WrittenView};
    let view_of = |w: WrittenView| -> PyResult<Bound<'_, PyAny>> {
        let (kind, keys): (&str, &[String]) = match &w.view {
            ViewOfBuffer::Whole => ("whole", &[]),
            ViewOfBuffer::Alias => ("alias", &[]),
            ViewOfBuffer::Slice { keys } => ("slice", keys),
            ViewOfBuffer::AsStrided { keys } => ("as_strided", keys),
        };
        let keys = pyo3::types::PyTuple::new(py, keys)?;
        Ok((w.label, w.base, kind, keys).into_pyobject(py)?.into_any())
    };
    written
        .into_iter()
        .map(|(name, encoding)| {
            let items = match encoding {
                WrittenEncoding::One(None) | WrittenEncoding::List(None) => None,
                WrittenEncoding::One(Some(w)) => Some(vec![Some(view_of(w)?)]),
                WrittenEncoding::List(Some(items)) => Some(
                    items
                        .into_iter()
                        .map(|w| w.map(&view_of).transpose())
                        .collect::<PyResult<_>>()?,
                ),
            };
            Ok((name, items))
        })
        .collect()
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    report::register(m)?;
    m.add_class::<PyGraph>()?;
    m.add_class::<PyPlan>()?;
    m.add_function(wrap_pyfunction!(engine_fingerprint, m)?)?;
    m.add_function(wrap_pyfunction!(inserted_op_schemas, m)?)?;
    m.add_function(wrap_pyfunction!(v2_written_views, m)?)?;
    m.add("__version__", crate::ENGINE_VERSION)?;
    m.add("ALIAS_GROUPS", crate::forms::call::ALIAS_GROUPS)?;
    m.add("FRESH_SLOTS", crate::forms::call::FRESH_SLOTS)?;
    m.add(
        "REPLACED_BEFORE_LOWERING",
        crate::plan::apply::REPLACED_BEFORE_LOWERING.to_vec(),
    )?;
    m.add(
        "IR_ONLY_KWARGS",
        (
            crate::forms::call::ALIAS_GROUPS,
            crate::forms::call::FRESH_SLOTS,
            crate::forms::call::LEGACY_USER_ALIASED_READS,
        ),
    )?;
    let vocabulary = pyo3::types::PyDict::new(m.py());
    for (field, names) in crate::plan::report_vocabulary() {
        vocabulary.set_item(field, names)?;
    }
    m.add("REPORT_VOCABULARY", vocabulary)?;
    let wire = pyo3::types::PyDict::new(m.py());
    for (section, entries) in crate::ir::wire::tables() {
        let table = pyo3::types::PyDict::new(m.py());
        for (name, code) in entries {
            table.set_item(name, code)?;
        }
        wire.set_item(section, table)?;
    }
    m.add("WIRE_CODES", wire)?;
    Ok(())
}
