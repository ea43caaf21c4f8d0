//! Small graphs for the unit tests of the analyses and the engine, built
//! inside the crate (the integration tests' builder in `tests/common/` links
//! the crate from outside and cannot be used here). Each test spells its
//! graph node by node, with the names its assertions use.

use crate::forms::Form;
use crate::ir::schema::{AliasInfo, ArgType, OpSchema, OpTags, SchemaArg, SchemaReturn};
use crate::ir::{Graph, Node, NodeId, OpCode, Target, TargetKind, TensorMeta, Value};

/// A reference to node `id`.
pub fn n(id: NodeId) -> Value {
    Value::Node(id)
}

/// A list of ints.
pub fn ints(v: &[i64]) -> Value {
    Value::List(v.iter().map(|&i| Value::Int(i)).collect())
}

/// Metadata of a contiguous float32 tensor of `shape`.
pub fn meta(shape: &[i64]) -> TensorMeta {
    let mut stride = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        stride[i] = stride[i + 1] * shape[i + 1];
    }
    TensorMeta::static_strided("float32", 4, shape, &stride, 0)
}

/// An operator: its qualified overload name and schema.
pub struct Op {
    name: &'static str,
    schema: OpSchema,
}

/// An operator from `(name, type, alias)` arguments and `(type, alias)`
/// returns; an alias is `""`, `"a"` (aliases) or `"a!"` (written).
pub fn op(name: &'static str, args: &[(&str, ArgType, &str)], returns: &[(ArgType, &str)]) -> Op {
    let alias = |a: &str| {
        (!a.is_empty()).then(|| AliasInfo {
            set: a.trim_end_matches('!').into(),
            is_write: a.ends_with('!'),
        })
    };
    Op {
        name,
        schema: OpSchema {
            args: args
                .iter()
                .map(|&(n, ty, a)| SchemaArg {
                    name: n.into(),
                    ty,
                    alias: alias(a),
                    kwarg_only: false,
                })
                .collect(),
            returns: returns
                .iter()
                .map(|&(ty, a)| SchemaReturn {
                    ty,
                    alias: alias(a),
                })
                .collect(),
            tags: OpTags::default(),
        },
    }
}

use ArgType::{Other, Tensor};

/// `aten::neg.default(Tensor self) -> Tensor`: a fresh pointwise result.
pub fn neg() -> Op {
    op(
        "aten::neg.default",
        &[("self", Tensor, "")],
        &[(Tensor, "")],
    )
}

/// `aten::add.Tensor(Tensor self, Tensor other) -> Tensor`.
pub fn add() -> Op {
    op(
        "aten::add.Tensor",
        &[("self", Tensor, ""), ("other", Tensor, "")],
        &[(Tensor, "")],
    )
}

/// `aten::slice.Tensor(Tensor(a) self, int dim, SymInt? start, SymInt? end,
/// SymInt step) -> Tensor(a)`.
pub fn slice() -> Op {
    op(
        "aten::slice.Tensor",
        &[
            ("self", Tensor, "a"),
            ("dim", Other, ""),
            ("start", Other, ""),
            ("end", Other, ""),
            ("step", Other, ""),
        ],
        &[(Tensor, "a")],
    )
}

/// `aten::expand.default(Tensor(a) self, SymInt[] size) -> Tensor(a)`.
pub fn expand() -> Op {
    op(
        "aten::expand.default",
        &[("self", Tensor, "a"), ("size", Other, "")],
        &[(Tensor, "a")],
    )
}

/// `aten::slice_scatter.default(Tensor self, Tensor src, int dim, SymInt?
/// start, SymInt? end, SymInt step) -> Tensor`.
pub fn slice_scatter() -> Op {
    op(
        "aten::slice_scatter.default",
        &[
            ("self", Tensor, ""),
            ("src", Tensor, ""),
            ("dim", Other, ""),
            ("start", Other, ""),
            ("end", Other, ""),
            ("step", Other, ""),
        ],
        &[(Tensor, "")],
    )
}

/// `aten::view.dtype(Tensor(a) self, ScalarType dtype) -> Tensor(a)`.
pub fn view_dtype() -> Op {
    op(
        "aten::view.dtype",
        &[("self", Tensor, "a"), ("dtype", Other, "")],
        &[(Tensor, "a")],
    )
}

/// `aten::copy_.default(Tensor(a!) self, Tensor src) -> Tensor(a!)`.
pub fn copy_() -> Op {
    op(
        "aten::copy_.default",
        &[("self", Tensor, "a!"), ("src", Tensor, "")],
        &[(Tensor, "a!")],
    )
}

/// `aten::add_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)`: an
/// in-place operator already in the graph.
pub fn add_() -> Op {
    op(
        "aten::add_.Tensor",
        &[("self", Tensor, "a!"), ("other", Tensor, "")],
        &[(Tensor, "a!")],
    )
}

/// `aten::sym_size.int(Tensor self, int dim) -> SymInt`: reads metadata only.
pub fn sym_size() -> Op {
    op(
        "aten::sym_size.int",
        &[("self", Tensor, ""), ("dim", Other, "")],
        &[(Other, "")],
    )
}

/// `m::scale_(Tensor(a!) x, float s) -> ()`: a custom op writing `x`.
pub fn scale_() -> Op {
    op(
        "m::scale_.default",
        &[("x", Tensor, "a!"), ("s", Other, "")],
        &[],
    )
}

/// `m::rms(Tensor(a!) out, Tensor x) -> ()`: writes `out`, reads `x`.
pub fn rms() -> Op {
    op(
        "m::rms.default",
        &[("out", Tensor, "a!"), ("x", Tensor, "")],
        &[],
    )
}

/// `m::scale.out(Tensor(a!) x, float s) -> ()`, tagged `out`: `x` is a
/// write-only output buffer.
pub fn scale_out() -> Op {
    let mut o = op(
        "m::scale.out",
        &[("x", Tensor, "a!"), ("s", Other, "")],
        &[],
    );
    o.schema.tags.out = true;
    o
}

/// A graph under construction.
#[derive(Default)]
pub struct B {
    /// The graph so far.
    pub g: Graph,
}

impl B {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    fn push(
        &mut self,
        op: OpCode,
        name: &str,
        target: Target,
        args: Vec<Value>,
        kwargs: Vec<(&str, Value)>,
        meta: Option<TensorMeta>,
    ) -> NodeId {
        let target = self.g.add_target(target);
        self.g.add_node(Node {
            op,
            name: name.into(),
            target,
            args,
            kwargs: kwargs
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            meta,
            source: None,
        })
    }

    /// A graph input: a contiguous `[4, 8]` float tensor.
    pub fn input(&mut self, name: &str) -> NodeId {
        let t = Target {
            name: name.into(),
            kind: TargetKind::Other,
            schema: None,
        };
        self.push(
            OpCode::Placeholder,
            name,
            t,
            vec![],
            vec![],
            Some(meta(&[4, 8])),
        )
    }

    /// A call of `op` on positional `args`, without metadata.
    pub fn call(&mut self, name: &str, op: &Op, args: Vec<Value>) -> NodeId {
        self.call_meta(name, op, args, None)
    }

    /// A call of `op` on positional `args`, with metadata.
    pub fn call_meta(
        &mut self,
        name: &str,
        op: &Op,
        args: Vec<Value>,
        meta: Option<TensorMeta>,
    ) -> NodeId {
        let t = Target {
            name: op.name.into(),
            kind: TargetKind::Operator,
            schema: Some(op.schema.clone()),
        };
        self.push(OpCode::CallFunction, name, t, args, vec![], meta)
    }

    /// A fresh `[4, 8]` tensor computed from `src` (`neg`), with metadata.
    pub fn fresh(&mut self, name: &str, src: NodeId) -> NodeId {
        self.call_meta(name, &neg(), vec![n(src)], Some(meta(&[4, 8])))
    }

    /// `getitem(src, i)`.
    pub fn getitem(&mut self, name: &str, src: NodeId, i: i64) -> NodeId {
        let t = Target {
            name: "operator.getitem".into(),
            kind: TargetKind::Getitem,
            schema: None,
        };
        let args = vec![n(src), Value::Int(i)];
        self.push(OpCode::CallFunction, name, t, args, vec![], None)
    }

    /// An `auto_functionalized` (v1) or `auto_functionalized_v2` node of `op`.
    pub fn af(&mut self, name: &str, v2: bool, op: &Op, kwargs: Vec<(&str, Value)>) -> NodeId {
        let op_t = self.g.add_target(Target {
            name: op.name.into(),
            kind: TargetKind::Operator,
            schema: Some(op.schema.clone()),
        });
        let (af_name, kind) = if v2 {
            ("higher_order.auto_functionalized_v2", Form::V2.kind())
        } else {
            ("higher_order.auto_functionalized", Form::V1.kind())
        };
        let t = Target {
            name: af_name.into(),
            kind,
            schema: None,
        };
        let args = vec![Value::Target(op_t)];
        self.push(OpCode::CallFunction, name, t, args, kwargs, None)
    }

    /// `rms(out=t, x=t)` (v2) on `t`, with the pre pass's record of alias
    /// groups `groups` (none: no record); returns the new value of `t`.
    pub fn rms_on_one_memory(
        &mut self,
        name: &str,
        t: NodeId,
        groups: Option<&[&[&str]]>,
    ) -> NodeId {
        let mut kwargs = vec![
            ("x", n(t)),
            ("_out_base_index", Value::Int(0)),
            ("_all_bases", Value::List(vec![n(t)])),
        ];
        if let Some(groups) = groups {
            let groups = groups
                .iter()
                .map(|g| Value::List(g.iter().map(|s| Value::Str((*s).into())).collect()))
                .collect();
            kwargs.push((crate::forms::call::ALIAS_GROUPS, Value::List(groups)));
        }
        let af = self.af(name, true, &rms(), kwargs);
        self.getitem(&format!("{name}_t"), af, 1)
    }

    /// `auto_functionalized_v2(scale_, _x_base_index=0, _all_bases=[base])`:
    /// writes `base` whole; result 1 is its new value.
    pub fn scale_v2(&mut self, name: &str, base: NodeId) -> NodeId {
        self.af(
            name,
            true,
            &scale_(),
            vec![
                ("s", Value::Float(2.0)),
                ("_x_base_index", Value::Int(0)),
                ("_all_bases", Value::List(vec![n(base)])),
            ],
        )
    }

    /// `auto_functionalized_v2(scale_, ...)` writing `base[start:end]`
    /// (dim 0); result 1 is the new value of `base`.
    pub fn scale_slice_v2(&mut self, name: &str, base: NodeId, start: i64, end: i64) -> NodeId {
        self.af(
            name,
            true,
            &scale_(),
            vec![
                ("s", Value::Float(2.0)),
                ("_x_base_index", Value::Int(0)),
                ("_x_slice_dim", Value::Int(0)),
                ("_x_slice_start", Value::Int(start)),
                ("_x_slice_end", Value::Int(end)),
                ("_all_bases", Value::List(vec![n(base)])),
            ],
        )
    }

    /// `slice(src, dim, start, end)` with step 1, without metadata.
    pub fn slice(&mut self, name: &str, src: NodeId, dim: i64, start: i64, end: i64) -> NodeId {
        let int = Value::Int;
        let args = vec![n(src), int(dim), int(start), int(end), int(1)];
        self.call(name, &slice(), args)
    }

    /// Ends the graph with an output node returning `vals`.
    pub fn output(mut self, vals: &[NodeId]) -> Graph {
        let t = Target {
            name: "output".into(),
            kind: TargetKind::Other,
            schema: None,
        };
        let v = Value::Tuple(vals.iter().map(|&v| n(v)).collect());
        self.push(OpCode::Output, "output", t, vec![v], vec![], None);
        self.g
    }
}
