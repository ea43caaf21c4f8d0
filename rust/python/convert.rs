//! Python tuples <-> IR. The tuple layout is documented in
//! `python/fxrewrite/encode.py`, the only producer.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::ir::schema::OpTags;
use crate::ir::{
    AliasInfo, ArgType, Dim, Graph, Node, NodeId, OpCode, OpSchema, SchemaArg, SchemaReturn,
    Target, TargetId, TargetKind, TensorMeta, Value,
};

use crate::ir::wire::value_tag::{
    DEVICE as T_DEVICE, DTYPE as T_DTYPE, LAYOUT as T_LAYOUT, LIST as T_LIST,
    MEMORY_FORMAT as T_MEMFMT, NODE as T_NODE, OPAQUE as T_OPAQUE, TARGET as T_TARGET,
    TUPLE as T_TUPLE,
};

/// The encoder (ours) handed over tuples of another layout: a bug in
/// fxrewrite, an `InternalError`.
fn bad(what: &str) -> PyErr {
    super::errors::internal(format!("malformed encoded graph: {what}"))
}

/// A Python scalar (`None`, `bool`, `int`, `float`, `str`) as a value, or
/// `None` for anything else: the one reading of scalars, for the encoder's
/// tuples, the live-graph reader and the v2 keywords. An `int` beyond `i64`
/// is opaque (its text).
pub(super) fn scalar_from(obj: &Bound<'_, PyAny>) -> PyResult<Option<Value>> {
    Ok(Some(if obj.is_none() {
        Value::None
    } else if obj.is_instance_of::<PyBool>() {
        Value::Bool(obj.extract::<bool>()?)
    } else if obj.is_instance_of::<PyInt>() {
        match obj.extract::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => Value::Opaque(obj.str()?.to_string()),
        }
    } else if obj.is_instance_of::<PyFloat>() {
        Value::Float(obj.extract::<f64>()?)
    } else if let Ok(s) = obj.cast::<PyString>() {
        Value::Str(s.to_string())
    } else {
        return Ok(None);
    }))
}

fn value_from(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > crate::ir::validate::MAX_VALUE_DEPTH {
        return Err(bad("argument nested too deeply"));
    }
    if let Some(v) = scalar_from(obj)? {
        return Ok(v);
    }
    let t = obj
        .cast::<PyTuple>()
        .map_err(|_| bad("value is not a scalar or a tagged tuple"))?;
    if t.len() != 2 {
        return Err(bad("tagged value must have two items"));
    }
    let tag: u8 = t.get_item(0)?.extract()?;
    let payload = t.get_item(1)?;
    let items = |p: &Bound<'_, PyAny>| -> PyResult<Vec<Value>> {
        let l = p
            .cast::<PyList>()
            .map_err(|_| bad("list payload must be a list"))?;
        l.iter().map(|x| value_from(&x, depth + 1)).collect()
    };
    Ok(match tag {
        T_NODE => Value::Node(NodeId(payload.extract()?)),
        T_LIST => Value::List(items(&payload)?),
        T_TUPLE => Value::Tuple(items(&payload)?),
        T_DTYPE => Value::Dtype(payload.extract()?),
        T_DEVICE => Value::Device(payload.extract()?),
        T_LAYOUT => Value::Layout(payload.extract()?),
        T_MEMFMT => Value::MemoryFormat(payload.extract()?),
        T_TARGET => Value::Target(TargetId(payload.extract()?)),
        T_OPAQUE => Value::Opaque(payload.extract()?),
        _ => return Err(bad("unknown value tag")),
    })
}

fn value_to<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    let tagged = |tag: u8, payload: Bound<'py, PyAny>| -> PyResult<Bound<'py, PyAny>> {
        Ok(PyTuple::new(py, [tag.into_pyobject(py)?.into_any(), payload])?.into_any())
    };
    let list = |items: &[Value]| -> PyResult<Bound<'py, PyAny>> {
        let objs = items
            .iter()
            .map(|x| value_to(py, x))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyList::new(py, objs)?.into_any())
    };
    Ok(match v {
        Value::None => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Int(i) => i.into_pyobject(py)?.into_any(),
        Value::Float(f) => f.into_pyobject(py)?.into_any(),
        Value::Str(s) => s.into_pyobject(py)?.into_any(),
        Value::Node(n) => tagged(T_NODE, n.0.into_pyobject(py)?.into_any())?,
        Value::List(items) => tagged(T_LIST, list(items)?)?,
        Value::Tuple(items) => tagged(T_TUPLE, list(items)?)?,
        Value::Dtype(s) => tagged(T_DTYPE, s.into_pyobject(py)?.into_any())?,
        Value::Device(s) => tagged(T_DEVICE, s.into_pyobject(py)?.into_any())?,
        Value::Layout(s) => tagged(T_LAYOUT, s.into_pyobject(py)?.into_any())?,
        Value::MemoryFormat(s) => tagged(T_MEMFMT, s.into_pyobject(py)?.into_any())?,
        Value::Target(t) => tagged(T_TARGET, t.0.into_pyobject(py)?.into_any())?,
        Value::Opaque(s) => tagged(T_OPAQUE, s.into_pyobject(py)?.into_any())?,
    })
}

fn alias_from(set: Option<String>, write: bool) -> Option<AliasInfo> {
    set.map(|set| AliasInfo {
        set,
        is_write: write,
    })
}

fn ty(code: u8) -> PyResult<ArgType> {
    ArgType::from_code(code).ok_or_else(|| bad("unknown argument type code"))
}

type ArgTuple = (String, u8, Option<String>, bool, bool);
type RetTuple = (u8, Option<String>, bool);

/// Schema facts from `fxrewrite.encode.schema_facts`' tuple (`None`: no schema).
pub(super) fn schema_from(obj: &Bound<'_, PyAny>) -> PyResult<Option<OpSchema>> {
    if obj.is_none() {
        return Ok(None);
    }
    let (args, returns, tags): (Vec<ArgTuple>, Vec<RetTuple>, u8) = obj.extract()?;
    Ok(Some(OpSchema {
        args: args
            .into_iter()
            .map(|(name, t, set, write, kwarg_only)| {
                Ok(SchemaArg {
                    name,
                    ty: ty(t)?,
                    alias: alias_from(set, write),
                    kwarg_only,
                })
            })
            .collect::<PyResult<_>>()?,
        returns: returns
            .into_iter()
            .map(|(t, set, write)| {
                Ok(SchemaReturn {
                    ty: ty(t)?,
                    alias: alias_from(set, write),
                })
            })
            .collect::<PyResult<_>>()?,
        tags: OpTags::from_bits(tags),
    }))
}

type MetaTuple<'py> = (
    String,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    u32,
    Option<u64>,
    String,
);

/// One size, stride or offset: an `int`, or a `str` of a symbolic expression.
fn dim_from(obj: &Bound<'_, PyAny>) -> PyResult<Dim> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Dim::Symbolic(s.to_str()?.to_string()));
    }
    Ok(Dim::Static(obj.extract()?))
}

fn dims_from(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Dim>> {
    obj.try_iter()?.map(|d| dim_from(&d?)).collect()
}

fn dim_to<'py>(py: Python<'py>, d: &Dim) -> PyResult<Bound<'py, PyAny>> {
    Ok(match d {
        Dim::Static(v) => v.into_pyobject(py)?.into_any(),
        Dim::Symbolic(s) => s.into_pyobject(py)?.into_any(),
    })
}

fn dims_to<'py>(py: Python<'py>, dims: &[Dim]) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        dims.iter()
            .map(|d| dim_to(py, d))
            .collect::<PyResult<Vec<_>>>()?,
    )
}

/// Tensor metadata from `fxrewrite.encode.tensor_meta`'s tuple (`None`: none).
pub(super) fn meta_from(obj: &Bound<'_, PyAny>) -> PyResult<Option<TensorMeta>> {
    if obj.is_none() {
        return Ok(None);
    }
    let (dtype, sizes, strides, offset, itemsize, storage, device): MetaTuple = obj.extract()?;
    Ok(Some(TensorMeta {
        dtype,
        sizes: dims_from(&sizes)?,
        strides: if strides.is_none() {
            None
        } else {
            Some(dims_from(&strides)?)
        },
        offset: if offset.is_none() {
            None
        } else {
            Some(dim_from(&offset)?)
        },
        itemsize,
        storage,
        device,
    }))
}

/// Tensor metadata as the tuple [`meta_from`] reads.
fn meta_to<'py>(py: Python<'py>, m: &TensorMeta) -> PyResult<Bound<'py, PyAny>> {
    let strides = match &m.strides {
        None => py.None().into_bound(py),
        Some(s) => dims_to(py, s)?.into_any(),
    };
    let offset = match &m.offset {
        None => py.None().into_bound(py),
        Some(d) => dim_to(py, d)?,
    };
    Ok((
        m.dtype.clone(),
        dims_to(py, &m.sizes)?,
        strides,
        offset,
        m.itemsize,
        m.storage,
        m.device.clone(),
    )
        .into_pyobject(py)?
        .into_any())
}

/// Builds a graph from `(targets, nodes)` (see encode.py for the layout).
pub fn graph_from_parts(targets: &Bound<'_, PyAny>, nodes: &Bound<'_, PyAny>) -> PyResult<Graph> {
    let mut g = Graph::new();
    for t in targets.try_iter()? {
        let t = t?;
        let t = t
            .cast::<PyTuple>()
            .map_err(|_| bad("target must be a tuple"))?;
        let name: String = t.get_item(0)?.extract()?;
        let kind = TargetKind::from_code(t.get_item(1)?.extract()?)
            .ok_or_else(|| bad("unknown target kind"))?;
        let schema = schema_from(&t.get_item(2)?)?;
        g.targets.push(Target { name, kind, schema });
    }
    for n in nodes.try_iter()? {
        let n = n?;
        let n = n
            .cast::<PyTuple>()
            .map_err(|_| bad("node must be a tuple"))?;
        if n.len() != 7 {
            return Err(bad("node tuple must have 7 items"));
        }
        let op =
            OpCode::from_code(n.get_item(0)?.extract()?).ok_or_else(|| bad("unknown opcode"))?;
        let name: String = n.get_item(1)?.extract()?;
        let target = TargetId(n.get_item(2)?.extract()?);
        let args = n
            .get_item(3)?
            .try_iter()?
            .map(|a| value_from(&a?, 0))
            .collect::<PyResult<Vec<_>>>()?;
        let mut kwargs = Vec::new();
        for kv in n.get_item(4)?.try_iter()? {
            let kv = kv?;
            let (k, v): (String, Bound<'_, PyAny>) = kv.extract()?;
            kwargs.push((k, value_from(&v, 0)?));
        }
        let meta = meta_from(&n.get_item(5)?)?;
        let source: Option<String> = n.get_item(6)?.extract()?;
        g.nodes.push(Node {
            op,
            name,
            target,
            args,
            kwargs,
            meta,
            source,
        });
    }
    Ok(g)
}

/// The inverse of [`schema_from`]: `(args, returns, tag_bits)`.
pub(super) fn schema_to<'py>(py: Python<'py>, s: &OpSchema) -> PyResult<Bound<'py, PyAny>> {
    let alias =
        |a: Option<&AliasInfo>| a.map_or((None, false), |al| (Some(al.set.clone()), al.is_write));
    let args: Vec<ArgTuple> = s
        .args
        .iter()
        .map(|a| {
            let (set, w) = alias(a.alias.as_ref());
            (a.name.clone(), a.ty.code(), set, w, a.kwarg_only)
        })
        .collect();
    let rets: Vec<RetTuple> = s
        .returns
        .iter()
        .map(|r| {
            let (set, w) = alias(r.alias.as_ref());
            (r.ty.code(), set, w)
        })
        .collect();
    Ok((args, rets, s.tags.bits()).into_pyobject(py)?.into_any())
}

/// The inverse of [`graph_from_parts`].
pub fn graph_to_parts<'py>(py: Python<'py>, g: &Graph) -> PyResult<Bound<'py, PyAny>> {
    let mut targets = Vec::with_capacity(g.targets.len());
    for t in &g.targets {
        let schema = match &t.schema {
            None => py.None().into_bound(py),
            Some(s) => schema_to(py, s)?,
        };
        targets.push(PyTuple::new(
            py,
            [
                t.name.clone().into_pyobject(py)?.into_any(),
                t.kind.code().into_pyobject(py)?.into_any(),
                schema,
            ],
        )?);
    }
    let mut nodes = Vec::with_capacity(g.nodes.len());
    for n in &g.nodes {
        let args = n
            .args
            .iter()
            .map(|a| value_to(py, a))
            .collect::<PyResult<Vec<_>>>()?;
        let mut kwargs = Vec::with_capacity(n.kwargs.len());
        for (k, v) in &n.kwargs {
            kwargs.push(PyTuple::new(
                py,
                [k.into_pyobject(py)?.into_any(), value_to(py, v)?],
            )?);
        }
        let meta = match &n.meta {
            None => py.None().into_bound(py),
            Some(m) => meta_to(py, m)?,
        };
        let source = match &n.source {
            None => py.None().into_bound(py),
            Some(s) => s.into_pyobject(py)?.into_any(),
        };
        nodes.push(PyTuple::new(
            py,
            [
                n.op.code().into_pyobject(py)?.into_any(),
                n.name.clone().into_pyobject(py)?.into_any(),
                n.target.0.into_pyobject(py)?.into_any(),
                PyTuple::new(py, args)?.into_any(),
                PyTuple::new(py, kwargs)?.into_any(),
                meta,
                source,
            ],
        )?);
    }
    Ok(PyTuple::new(
        py,
        [
            PyList::new(py, targets)?.into_any(),
            PyList::new(py, nodes)?.into_any(),
        ],
    )?
    .into_any())
}
