//! The `fxrewrite._core` extension module: conversion between Python data and
//! the IR, and registration. No engine logic lives here.
//!
//! The encoder (`python/fxrewrite/encode.py`) hands over plain tuples; they
//! are converted to an owned [`Graph`] while the GIL is held, then the engine
//! runs with the GIL released, and the plan comes back as JSON text.

mod convert;
mod errors;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::ir::Graph;

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
            .map_err(|e| errors::InternalError::new_err(e.to_string()))
    }

    /// Plans the rewrite; returns the plan (edits and report) as JSON text.
    fn plan_json(&self, py: Python<'_>) -> PyResult<String> {
        let graph = &self.graph;
        let plan = py
            .detach(|| crate::engine::plan(graph))
            .map_err(errors::to_py)?;
        serde_json::to_string(&plan).map_err(|e| errors::InternalError::new_err(e.to_string()))
    }

    /// The graph in the text form `print(torch.fx.Graph)` uses.
    fn show(&self) -> String {
        crate::ir::show::to_fx_text(&self.graph)
    }

    /// Plans and applies the rewrite in Rust: the rewritten graph and the plan
    /// as JSON text (GIL released throughout).
    fn rewritten(&self, py: Python<'_>) -> PyResult<(Self, String)> {
        let graph = &self.graph;
        let (out, plan) = py
            .detach(|| -> crate::Result<_> {
                let plan = crate::engine::plan(graph)?;
                let out = crate::plan::apply::apply_plan(graph, &plan)?;
                Ok((out, plan))
            })
            .map_err(errors::to_py)?;
        let json = serde_json::to_string(&plan)
            .map_err(|e| errors::InternalError::new_err(e.to_string()))?;
        Ok((
            Self {
                graph: out,
                info: self.info.clone(),
            },
            json,
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
        crate::forms::form_names().join(",")
    )
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<PyGraph>()?;
    m.add_function(wrap_pyfunction!(engine_fingerprint, m)?)?;
    m.add("__version__", crate::ENGINE_VERSION)?;
    m.add("USER_ALIASED_READS", crate::forms::call::USER_ALIASED_READS)?;
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
