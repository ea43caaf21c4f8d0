//! The one graph builder of the tests and benches: nodes named the way FX
//! names them (`getitem`, `getitem_1`, ...), targets interned once, and the
//! auto_functionalized (v1 / v2) nodes torch's functionalization emits.

use std::collections::HashMap;

use fxrewrite::forms::Form;
use fxrewrite::ir::{
    Dim, Graph, Node, NodeId, OpCode, OpSchema, Target, TargetId, TargetKind, TensorMeta, Value,
};

use super::ops::{empty_op, rms_op, Op};

pub fn n(id: NodeId) -> Value {
    Value::Node(id)
}

pub fn ints(v: &[i64]) -> Value {
    Value::List(v.iter().map(|&i| Value::Int(i)).collect())
}

pub fn nodes(v: &[NodeId]) -> Value {
    Value::List(v.iter().map(|&i| Value::Node(i)).collect())
}

pub fn kw(pairs: Vec<(&str, Value)>) -> Vec<(String, Value)> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Metadata of a contiguous float32 tensor of `shape`.
pub fn meta(shape: &[i64]) -> TensorMeta {
    let mut stride = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        stride[i] = stride[i + 1] * shape[i + 1];
    }
    TensorMeta::static_strided("float32", 4, shape, &stride, 0)
}

#[derive(Default)]
pub struct B {
    /// The graph built so far.
    pub g: Graph,
    counts: HashMap<String, usize>,
}

impl B {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn fresh_name(&mut self, base: &str) -> String {
        let c = self.counts.entry(base.to_string()).or_insert(0);
        let name = if *c == 0 {
            base.to_string()
        } else {
            format!("{base}_{c}")
        };
        *c += 1;
        name
    }

    pub fn target(&mut self, name: &str, kind: TargetKind, schema: Option<OpSchema>) -> TargetId {
        self.g.add_target(Target {
            name: name.into(),
            kind,
            schema,
        })
    }

    /// The target id of an operator (interned once).
    pub fn op(&mut self, op: &Op) -> TargetId {
        self.target(op.name, TargetKind::Operator, Some(op.schema.clone()))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        op: OpCode,
        name: &str,
        target: TargetId,
        args: Vec<Value>,
        kwargs: Vec<(String, Value)>,
        meta: Option<TensorMeta>,
    ) -> NodeId {
        let name = self.fresh_name(name);
        self.g.add_node(Node {
            op,
            name,
            target,
            args,
            kwargs,
            meta,
            source: None,
        })
    }

    pub fn input(&mut self, name: &str, meta: Option<TensorMeta>) -> NodeId {
        let t = self.target(name, TargetKind::Other, None);
        self.push(OpCode::Placeholder, name, t, vec![], vec![], meta)
    }

    /// A call of an aten (or other) operator; the node is named after the
    /// operator's short name (`slice`, `slice_1`, ...).
    pub fn call(&mut self, op: &Op, args: Vec<Value>) -> NodeId {
        self.call_meta(op, args, None)
    }

    pub fn call_meta(&mut self, op: &Op, args: Vec<Value>, meta: Option<TensorMeta>) -> NodeId {
        self.call_full(op, args, vec![], meta)
    }

    /// A call with keyword arguments.
    pub fn call_kw(&mut self, op: &Op, args: Vec<Value>, kwargs: Vec<(&str, Value)>) -> NodeId {
        self.call_full(op, args, kw(kwargs), None)
    }

    /// A call with keyword arguments and metadata.
    pub fn call_full(
        &mut self,
        op: &Op,
        args: Vec<Value>,
        kwargs: Vec<(String, Value)>,
        meta: Option<TensorMeta>,
    ) -> NodeId {
        let t = self.op(op);
        let short = op
            .name
            .split("::")
            .nth(1)
            .and_then(|s| s.split('.').next())
            .unwrap_or("call")
            .trim_end_matches('_')
            .to_string();
        self.push(OpCode::CallFunction, &short, t, args, kwargs, meta)
    }

    pub fn empty(&mut self, shape: &[i64]) -> NodeId {
        let t = self.op(&empty_op());
        self.push(
            OpCode::CallFunction,
            "empty",
            t,
            vec![ints(shape)],
            kw(vec![
                ("dtype", Value::Dtype("float32".into())),
                ("device", Value::Device("cpu".into())),
                ("pin_memory", Value::Bool(false)),
            ]),
            Some(meta(shape)),
        )
    }

    pub fn getitem(&mut self, src: NodeId, i: i64) -> NodeId {
        let t = self.target("operator.getitem", TargetKind::Getitem, None);
        self.push(
            OpCode::CallFunction,
            "getitem",
            t,
            vec![n(src), Value::Int(i)],
            vec![],
            None,
        )
    }

    pub fn af(&mut self, v2: bool, op: &Op, kwargs: Vec<(&str, Value)>) -> NodeId {
        let (name, kind) = if v2 {
            ("higher_order.auto_functionalized_v2", Form::V2.kind())
        } else {
            ("higher_order.auto_functionalized", Form::V1.kind())
        };
        let t = self.target(name, kind, None);
        let op_t = self.op(op);
        let base = if v2 {
            "auto_functionalized_v2"
        } else {
            "auto_functionalized"
        };
        self.push(
            OpCode::CallFunction,
            base,
            t,
            vec![Value::Target(op_t)],
            kw(kwargs),
            None,
        )
    }

    pub fn v1(&mut self, op: &Op, kwargs: Vec<(&str, Value)>) -> NodeId {
        self.af(false, op, kwargs)
    }

    pub fn v2(&mut self, op: &Op, kwargs: Vec<(&str, Value)>) -> NodeId {
        self.af(true, op, kwargs)
    }

    /// Ends the graph with an output node returning `v`.
    pub fn output_value(mut self, v: Value) -> Graph {
        let t = self.target("output", TargetKind::Other, None);
        self.push(OpCode::Output, "output", t, vec![v], vec![], None);
        self.g
    }

    /// Ends the graph with an output node returning the tuple of `vals`.
    pub fn output(self, vals: &[NodeId]) -> Graph {
        self.output_value(Value::Tuple(vals.iter().map(|&v| n(v)).collect()))
    }
}

/// `rms(out=<base 0>, x, w)` as a v2 node writing `base` whole.
pub fn rms_v2(b: &mut B, base: NodeId, x: NodeId, w: NodeId) -> NodeId {
    b.v2(
        &rms_op(),
        vec![
            ("_out_base_index", Value::Int(0)),
            ("x", n(x)),
            ("w", n(w)),
            ("_all_bases", nodes(&[base])),
        ],
    )
}

/// Metadata of a float32 tensor with an explicit layout.
pub fn strided_meta(shape: &[i64], stride: &[i64], offset: i64) -> TensorMeta {
    TensorMeta::static_strided("float32", 4, shape, stride, offset)
}

/// Metadata of a float32 tensor of rank `rank` compiled with dynamic shapes:
/// every size and stride symbolic (`s0`, `t0`, ...), the storage offset
/// static (`Some`) or symbolic (`u0`).
pub fn symbolic_meta(rank: u32, offset: Option<i64>) -> TensorMeta {
    let dims = |prefix: &str| -> Vec<Dim> {
        (0..rank)
            .map(|d| Dim::Symbolic(format!("{prefix}{d}")))
            .collect()
    };
    TensorMeta {
        sizes: dims("s"),
        strides: Some(dims("t")),
        offset: Some(offset.map_or_else(|| Dim::Symbolic("u0".into()), Dim::Static)),
        ..meta(&[])
    }
}

/// Metadata of a float32 tensor whose sizes, strides and offset are each
/// static or symbolic (`static_dims`-style numbers, or `Dim::Symbolic`).
pub fn mixed_meta(sizes: Vec<Dim>, strides: Vec<Dim>, offset: Dim) -> TensorMeta {
    TensorMeta {
        sizes,
        strides: Some(strides),
        offset: Some(offset),
        ..meta(&[])
    }
}
