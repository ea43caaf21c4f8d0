//! Reads a live `torch.fx.Graph` straight into the IR: one walk over
//! `graph.nodes`, no intermediate tuples.
//!
//! Values are converted here (node references, lists, dtypes, callables);
//! what only torch knows is asked of `fxrewrite.encode` once per distinct
//! callable (its name, kind and schema facts) and once per node whose tensor
//! metadata the engine reads (`meta['val']`'s layout and storage).

use std::collections::HashMap;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use super::convert::{meta_from, schema_from};
use crate::ir::{Graph, Node, NodeId, OpCode, Target, TargetId, TargetKind, Value};

/// Which nodes get tensor metadata.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum MetaMode {
    /// Every node (saved graphs).
    All,
    /// Only operands of the nodes the engine consults it on: views,
    /// scatters, write-backs and auto_functionalized nodes. Reading it off a
    /// fake tensor costs tens of microseconds, so the pass reads no more.
    Operands,
    /// None.
    Nothing,
}

/// The IR of a live graph, with the FX nodes by index and the callables by
/// target index (what the FX editor needs to map a plan back).
pub struct Read<'py> {
    pub graph: Graph,
    pub nodes: Vec<Bound<'py, PyAny>>,
    pub targets: Vec<Bound<'py, PyAny>>,
}

struct Types<'py> {
    node: Bound<'py, PyAny>,
    dtype: Bound<'py, PyAny>,
    device: Bound<'py, PyAny>,
    layout: Bound<'py, PyAny>,
    memory_format: Bound<'py, PyAny>,
    op_overload: Bound<'py, PyAny>,
    higher_order: Bound<'py, PyAny>,
}

struct Reader<'py> {
    encode: Bound<'py, PyModule>,
    types: Types<'py>,
    index: HashMap<usize, u32>,
    /// Interned callables: by object identity, and string targets
    /// (placeholder and attribute names) by `(op, name)`.
    by_object: HashMap<usize, TargetId>,
    by_name: HashMap<(String, String), TargetId>,
    graph: Graph,
    targets: Vec<Bound<'py, PyAny>>,
    /// Per target: do its nodes' operands need metadata?
    wants_meta: Vec<Option<bool>>,
}

fn opcode(op: &str) -> PyResult<OpCode> {
    [
        OpCode::Placeholder,
        OpCode::GetAttr,
        OpCode::CallFunction,
        OpCode::CallMethod,
        OpCode::CallModule,
        OpCode::Output,
    ]
    .into_iter()
    .find(|o| o.fx_name() == op)
    .ok_or_else(|| invalid(format!("unknown FX opcode {op:?}")))
}

/// The live graph cannot be read into the IR: an `InvalidGraphError`.
fn invalid(detail: impl Into<String>) -> PyErr {
    super::errors::to_py(crate::Error::InvalidGraph {
        node: None,
        detail: detail.into(),
    })
}

/// `str(x)` without the `torch.` prefix (`torch.float32` -> `float32`).
fn torch_name(x: &Bound<'_, PyAny>) -> PyResult<String> {
    let s = x.str()?.to_string();
    Ok(s.strip_prefix("torch.").map_or(s.clone(), str::to_string))
}

impl<'py> Reader<'py> {
    fn intern(&mut self, obj: &Bound<'py, PyAny>, op: &str) -> PyResult<TargetId> {
        if let Ok(s) = obj.cast::<PyString>() {
            let key = (op.to_string(), s.to_string());
            if let Some(&t) = self.by_name.get(&key) {
                return Ok(t);
            }
            let t = self.add_target(obj)?;
            self.by_name.insert(key, t);
            return Ok(t);
        }
        let key = obj.as_ptr() as usize;
        if let Some(&t) = self.by_object.get(&key) {
            return Ok(t);
        }
        let t = self.add_target(obj)?;
        self.by_object.insert(key, t);
        Ok(t)
    }

    fn add_target(&mut self, obj: &Bound<'py, PyAny>) -> PyResult<TargetId> {
        let desc = self.encode.call_method1("describe_target", (obj,))?;
        let desc = desc.cast::<PyTuple>()?;
        let name: String = desc.get_item(0)?.extract()?;
        let kind = TargetKind::from_code(desc.get_item(1)?.extract()?)
            .ok_or_else(|| super::errors::internal("describe_target gave an unknown kind"))?;
        let schema = schema_from(&desc.get_item(2)?)?;
        let id = TargetId(u32::try_from(self.graph.targets.len()).unwrap_or(u32::MAX));
        self.graph.targets.push(Target { name, kind, schema });
        self.targets.push(obj.clone());
        self.wants_meta.push(None);
        Ok(id)
    }

    fn value(
        &mut self,
        v: &Bound<'py, PyAny>,
        depth: usize,
        inputs: &mut Vec<u32>,
    ) -> PyResult<Value> {
        if depth > crate::ir::validate::MAX_VALUE_DEPTH {
            return Err(invalid("argument nested too deeply"));
        }
        if let Some(scalar) = super::convert::scalar_from(v)? {
            return Ok(scalar);
        }
        if v.is_instance(&self.types.node)? {
            let i = *self.index.get(&(v.as_ptr() as usize)).ok_or_else(|| {
                invalid("an argument refers to a node that is not earlier in the graph")
            })?;
            inputs.push(i);
            return Ok(Value::Node(NodeId(i)));
        }
        if let Ok(l) = v.cast::<PyList>() {
            return Ok(Value::List(
                l.iter()
                    .map(|x| self.value(&x, depth + 1, inputs))
                    .collect::<PyResult<_>>()?,
            ));
        }
        if let Ok(t) = v.cast::<PyTuple>() {
            return Ok(Value::Tuple(
                t.iter()
                    .map(|x| self.value(&x, depth + 1, inputs))
                    .collect::<PyResult<_>>()?,
            ));
        }
        let t = &self.types;
        if v.is_instance(&t.dtype)? {
            return Ok(Value::Dtype(torch_name(v)?));
        }
        if v.is_instance(&t.device)? {
            return Ok(Value::Device(v.str()?.to_string()));
        }
        if v.is_instance(&t.layout)? {
            return Ok(Value::Layout(torch_name(v)?));
        }
        if v.is_instance(&t.memory_format)? {
            return Ok(Value::MemoryFormat(torch_name(v)?));
        }
        if v.is_instance(&t.op_overload)? || v.is_instance(&t.higher_order)? {
            return Ok(Value::Target(self.intern(v, "call_function")?));
        }
        Ok(Value::Opaque(v.repr()?.to_string()))
    }

    fn wants_meta(&mut self, t: TargetId) -> PyResult<bool> {
        if let Some(w) = self.wants_meta[t.idx()] {
            return Ok(w);
        }
        let w: bool = self
            .encode
            .call_method1("operands_need_meta", (&self.targets[t.idx()],))?
            .extract()?;
        self.wants_meta[t.idx()] = Some(w);
        Ok(w)
    }

    fn tensor_meta(&self, node: &Bound<'py, PyAny>) -> PyResult<Option<crate::ir::TensorMeta>> {
        let py = node.py();
        let val = node
            .getattr(intern!(py, "meta"))?
            .call_method1(intern!(py, "get"), (intern!(py, "val"),))?;
        if val.is_none() {
            return Ok(None);
        }
        meta_from(&self.encode.call_method1("tensor_meta", (val,))?)
    }
}

/// Reads `graph` (a `torch.fx.Graph`).
///
/// # Errors
/// A node refers to a node that is not before it, an opcode is unknown, or
/// a torch call fails.
pub fn read<'py>(graph: &Bound<'py, PyAny>, meta: MetaMode, sources: bool) -> PyResult<Read<'py>> {
    let py = graph.py();
    let torch = py.import("torch")?;
    let ops = py.import("torch._ops")?;
    let encode = py.import("fxrewrite.encode")?;
    let groups_key = encode.getattr("ALIAS_GROUPS_META")?;
    let fresh_key = encode.getattr("FRESH_SLOTS_META")?;
    let mut r = Reader {
        types: Types {
            node: py.import("torch.fx")?.getattr("Node")?,
            dtype: torch.getattr("dtype")?,
            device: torch.getattr("device")?,
            layout: torch.getattr("layout")?,
            memory_format: torch.getattr("memory_format")?,
            op_overload: ops.getattr("OpOverload")?,
            higher_order: ops.getattr("HigherOrderOperator")?,
        },
        encode,
        index: HashMap::new(),
        by_object: HashMap::new(),
        by_name: HashMap::new(),
        graph: Graph::new(),
        targets: Vec::new(),
        wants_meta: Vec::new(),
    };
    let mut nodes = Vec::new();
    let mut needed: Vec<u32> = Vec::new();
    for n in graph.getattr(intern!(py, "nodes"))?.try_iter()? {
        let n = n?;
        let i = u32::try_from(nodes.len()).map_err(|_| invalid("graph too large"))?;
        r.index.insert(n.as_ptr() as usize, i);
        let op_obj = n.getattr(intern!(py, "op"))?;
        let op_name = op_obj.cast::<PyString>()?.to_str()?;
        let op = opcode(op_name)?;
        let target = r.intern(&n.getattr(intern!(py, "target"))?, op_name)?;
        let node_meta = n.getattr(intern!(py, "meta"))?;
        let node_meta = node_meta.cast::<PyDict>()?;
        let mut inputs = Vec::new();
        let mut kwargs = Vec::new();
        let kw = n.getattr(intern!(py, "kwargs"))?;
        for (k, v) in kw.cast::<PyDict>()?.iter() {
            kwargs.push((k.extract::<String>()?, r.value(&v, 0, &mut inputs)?));
        }
        if node_meta.contains(&groups_key)? {
            let groups = r
                .encode
                .call_method1("alias_groups", (&n,))?
                .extract::<Option<Vec<Vec<String>>>>()?;
            if let Some(groups) = groups {
                kwargs.push((
                    crate::forms::call::ALIAS_GROUPS.to_string(),
                    Value::List(
                        groups
                            .into_iter()
                            .map(|g| Value::List(g.into_iter().map(Value::Str).collect()))
                            .collect(),
                    ),
                ));
            }
        }
        if node_meta.contains(&fresh_key)? {
            let fresh = r
                .encode
                .call_method1("fresh_slots", (&n,))?
                .extract::<Vec<String>>()?;
            if !fresh.is_empty() {
                kwargs.push((
                    crate::forms::call::FRESH_SLOTS.to_string(),
                    Value::List(fresh.into_iter().map(Value::Str).collect()),
                ));
            }
        }
        let args = n
            .getattr(intern!(py, "args"))?
            .cast::<PyTuple>()?
            .iter()
            .map(|a| r.value(&a, 0, &mut inputs))
            .collect::<PyResult<Vec<_>>>()?;
        if meta == MetaMode::Operands && op == OpCode::CallFunction && r.wants_meta(target)? {
            needed.extend(&inputs);
        }
        let tensor_meta = if meta == MetaMode::All {
            r.tensor_meta(&n)?
        } else {
            None
        };
        let source = if sources {
            let trace = node_meta.get_item("stack_trace")?;
            match trace {
                Some(t) if !t.is_none() => r
                    .encode
                    .call_method1("source_line", (t,))?
                    .extract::<Option<String>>()?,
                _ => None,
            }
        } else {
            None
        };
        r.graph.nodes.push(Node {
            op,
            name: n.getattr(intern!(py, "name"))?.extract()?,
            target,
            args,
            kwargs,
            meta: tensor_meta,
            source,
        });
        nodes.push(n);
    }
    needed.sort_unstable();
    needed.dedup();
    for i in needed {
        r.graph.nodes[i as usize].meta = r.tensor_meta(&nodes[i as usize])?;
    }
    Ok(Read {
        graph: r.graph,
        nodes,
        targets: r.targets,
    })
}
