//! Engine rules on graphs built in Rust that mirror torch's post-grad graphs:
//! `auto_functionalized` (v1) and `auto_functionalized_v2` nodes over real aten
//! schemas and custom mutating operators, and the plans the engine makes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::{BTreeSet, HashMap, HashSet};

use fxrewrite::ir::schema::OpTags;
use fxrewrite::ir::{
    AliasInfo, ArgType, Graph, Node, NodeId, OpCode, OpSchema, SchemaArg, SchemaReturn, Target,
    TargetId, TargetKind, TensorMeta, Value,
};
use fxrewrite::plan::{Callee, MetaSource, NewId, PlanArg, ValueRef};
use fxrewrite::{plan, Action, Edit, Error, Plan};

// ----- schemas ---------------------------------------------------------------

/// A schema argument. `alias` is `""` (none), `"a"` (aliases, read) or `"a!"`
/// (written).
fn arg(name: &str, ty: ArgType, alias: &str) -> SchemaArg {
    SchemaArg {
        name: name.into(),
        ty,
        alias: alias_info(alias),
        kwarg_only: false,
    }
}

/// A keyword-only schema argument (after `*`).
fn kwarg_only(name: &str, ty: ArgType, alias: &str) -> SchemaArg {
    SchemaArg {
        kwarg_only: true,
        ..arg(name, ty, alias)
    }
}

fn ret(ty: ArgType, alias: &str) -> SchemaReturn {
    SchemaReturn {
        ty,
        alias: alias_info(alias),
    }
}

fn alias_info(alias: &str) -> Option<AliasInfo> {
    if alias.is_empty() {
        return None;
    }
    let is_write = alias.ends_with('!');
    Some(AliasInfo {
        set: alias.trim_end_matches('!').into(),
        is_write,
    })
}

fn schema(args: Vec<SchemaArg>, returns: Vec<SchemaReturn>) -> OpSchema {
    OpSchema {
        args,
        returns,
        tags: OpTags::default(),
    }
}

use ArgType::{OptionalTensor, Other, Tensor, TensorList};

/// An operator overload: qualified name and schema.
struct Op {
    name: &'static str,
    schema: OpSchema,
}

/// `aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None,
/// SymInt? end=None, SymInt step=1) -> Tensor(a)`
fn slice_op() -> Op {
    Op {
        name: "aten::slice.Tensor",
        schema: schema(
            vec![
                arg("self", Tensor, "a"),
                arg("dim", Other, ""),
                arg("start", Other, ""),
                arg("end", Other, ""),
                arg("step", Other, ""),
            ],
            vec![ret(Tensor, "a")],
        ),
    }
}

/// `aten::select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)`
fn select_op() -> Op {
    Op {
        name: "aten::select.int",
        schema: schema(
            vec![
                arg("self", Tensor, "a"),
                arg("dim", Other, ""),
                arg("index", Other, ""),
            ],
            vec![ret(Tensor, "a")],
        ),
    }
}

/// `aten::split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes,
/// int dim=0) -> Tensor(a)[]`, encoded as the Python encoder does: both
/// alias sets are `*`.
fn split_with_sizes_op() -> Op {
    Op {
        name: "aten::split_with_sizes.default",
        schema: schema(
            vec![
                arg("self", Tensor, "*"),
                arg("split_sizes", Other, ""),
                arg("dim", Other, ""),
            ],
            vec![ret(TensorList, "*")],
        ),
    }
}

/// `aten::slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None,
/// SymInt? end=None, SymInt step=1) -> Tensor`
fn slice_scatter_op() -> Op {
    Op {
        name: "aten::slice_scatter.default",
        schema: schema(
            vec![
                arg("self", Tensor, ""),
                arg("src", Tensor, ""),
                arg("dim", Other, ""),
                arg("start", Other, ""),
                arg("end", Other, ""),
                arg("step", Other, ""),
            ],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `aten::select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor`
fn select_scatter_op() -> Op {
    Op {
        name: "aten::select_scatter.default",
        schema: schema(
            vec![
                arg("self", Tensor, ""),
                arg("src", Tensor, ""),
                arg("dim", Other, ""),
                arg("index", Other, ""),
            ],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)`
fn copy_op() -> Op {
    Op {
        name: "aten::copy_.default",
        schema: schema(
            vec![
                arg("self", Tensor, "a!"),
                arg("src", Tensor, ""),
                arg("non_blocking", Other, ""),
            ],
            vec![ret(Tensor, "a!")],
        ),
    }
}

/// `aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor`
fn add_op() -> Op {
    Op {
        name: "aten::add.Tensor",
        schema: schema(
            vec![
                arg("self", Tensor, ""),
                arg("other", Tensor, ""),
                kwarg_only("alpha", Other, ""),
            ],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `aten::mul.Tensor(Tensor self, Tensor other) -> Tensor`
fn mul_op() -> Op {
    Op {
        name: "aten::mul.Tensor",
        schema: schema(
            vec![arg("self", Tensor, ""), arg("other", Tensor, "")],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `aten::mm(Tensor self, Tensor mat2) -> Tensor`
fn mm_op() -> Op {
    Op {
        name: "aten::mm.default",
        schema: schema(
            vec![arg("self", Tensor, ""), arg("mat2", Tensor, "")],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None,
/// Layout? layout=None, Device? device=None, bool? pin_memory=None,
/// MemoryFormat? memory_format=None) -> Tensor`
fn empty_op() -> Op {
    Op {
        name: "aten::empty.memory_format",
        schema: schema(
            vec![
                arg("size", Other, ""),
                kwarg_only("dtype", Other, ""),
                kwarg_only("layout", Other, ""),
                kwarg_only("device", Other, ""),
                kwarg_only("pin_memory", Other, ""),
                kwarg_only("memory_format", Other, ""),
            ],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `mylib::rms(Tensor(a!) out, Tensor x, Tensor w) -> ()`
fn rms_op() -> Op {
    Op {
        name: "mylib::rms.default",
        schema: schema(
            vec![
                arg("out", Tensor, "a!"),
                arg("x", Tensor, ""),
                arg("w", Tensor, ""),
            ],
            vec![],
        ),
    }
}

/// `mylib::add_rms(Tensor(a!) x, Tensor(b!) res, Tensor w) -> Tensor`
fn add_rms_op() -> Op {
    Op {
        name: "mylib::add_rms.default",
        schema: schema(
            vec![
                arg("x", Tensor, "a!"),
                arg("res", Tensor, "b!"),
                arg("w", Tensor, ""),
            ],
            vec![ret(Tensor, "")],
        ),
    }
}

/// `mylib::rot(Tensor(a!) q, Tensor(b!) k, Tensor cos) -> ()`
fn rot_op() -> Op {
    Op {
        name: "mylib::rot.default",
        schema: schema(
            vec![
                arg("q", Tensor, "a!"),
                arg("k", Tensor, "b!"),
                arg("cos", Tensor, ""),
            ],
            vec![],
        ),
    }
}

/// `mylib::opt(Tensor(a!) x, Tensor(b!)? res, Tensor w) -> ()`
fn opt_op() -> Op {
    Op {
        name: "mylib::opt.default",
        schema: schema(
            vec![
                arg("x", Tensor, "a!"),
                arg("res", OptionalTensor, "b!"),
                arg("w", Tensor, ""),
            ],
            vec![],
        ),
    }
}

/// `mylib::foreach(Tensor(a!)[] xs, Tensor w) -> ()`
fn foreach_op() -> Op {
    Op {
        name: "mylib::foreach.default",
        schema: schema(
            vec![arg("xs", TensorList, "a!"), arg("w", Tensor, "")],
            vec![],
        ),
    }
}

/// `mylib::mk(Tensor x, *, Tensor(a!) out) -> Tensor(a!)`, tagged `out`.
fn mk_op() -> Op {
    let mut s = schema(
        vec![arg("x", Tensor, ""), kwarg_only("out", Tensor, "a!")],
        vec![ret(Tensor, "a!")],
    );
    s.tags = OpTags {
        out: true,
        ..OpTags::default()
    };
    Op {
        name: "mylib::mk.default",
        schema: s,
    }
}

// ----- graph builder -----------------------------------------------------------

fn n(id: NodeId) -> Value {
    Value::Node(id)
}

fn ints(v: &[i64]) -> Value {
    Value::List(v.iter().map(|&i| Value::Int(i)).collect())
}

fn nodes(v: &[NodeId]) -> Value {
    Value::List(v.iter().map(|&i| Value::Node(i)).collect())
}

fn kw(pairs: Vec<(&str, Value)>) -> Vec<(String, Value)> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Metadata of a contiguous float32 tensor of `shape`.
fn meta(shape: &[i64]) -> TensorMeta {
    let mut stride = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        stride[i] = stride[i + 1] * shape[i + 1];
    }
    TensorMeta {
        dtype: "float32".into(),
        rank: u32::try_from(shape.len()).unwrap(),
        shape: Some(shape.to_vec()),
        stride: Some(stride),
        storage_offset: Some(0),
        itemsize: 4,
        storage: None,
        device: "cpu".into(),
    }
}

#[derive(Default)]
struct B {
    g: Graph,
    counts: HashMap<String, usize>,
}

impl B {
    fn new() -> Self {
        Self::default()
    }

    fn fresh_name(&mut self, base: &str) -> String {
        let c = self.counts.entry(base.to_string()).or_insert(0);
        let name = if *c == 0 {
            base.to_string()
        } else {
            format!("{base}_{c}")
        };
        *c += 1;
        name
    }

    fn target(&mut self, name: &str, kind: TargetKind, schema: Option<OpSchema>) -> TargetId {
        self.g.add_target(Target {
            name: name.into(),
            kind,
            schema,
        })
    }

    /// The target id of an operator (interned once).
    fn op(&mut self, op: &Op) -> TargetId {
        self.target(op.name, TargetKind::Operator, Some(op.schema.clone()))
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
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

    fn input(&mut self, name: &str, meta: Option<TensorMeta>) -> NodeId {
        let t = self.target(name, TargetKind::Other, None);
        self.push(OpCode::Placeholder, name, t, vec![], vec![], meta)
    }

    /// A call of an aten (or other) operator; the node is named after the
    /// operator's short name (`slice`, `slice_1`, ...).
    fn call(&mut self, op: &Op, args: Vec<Value>) -> NodeId {
        self.call_meta(op, args, None)
    }

    fn call_meta(&mut self, op: &Op, args: Vec<Value>, meta: Option<TensorMeta>) -> NodeId {
        let t = self.op(op);
        let short = op
            .name
            .split("::")
            .nth(1)
            .and_then(|s| s.split('.').next())
            .unwrap_or("call")
            .trim_end_matches('_')
            .to_string();
        self.push(OpCode::CallFunction, &short, t, args, vec![], meta)
    }

    fn empty(&mut self, shape: &[i64]) -> NodeId {
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

    fn getitem(&mut self, src: NodeId, i: i64) -> NodeId {
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

    fn af(&mut self, v2: bool, op: &Op, kwargs: Vec<(&str, Value)>) -> NodeId {
        let (name, kind) = if v2 {
            (
                "higher_order.auto_functionalized_v2",
                TargetKind::AutoFunctionalizedV2,
            )
        } else {
            (
                "higher_order.auto_functionalized",
                TargetKind::AutoFunctionalized,
            )
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

    fn v1(&mut self, op: &Op, kwargs: Vec<(&str, Value)>) -> NodeId {
        self.af(false, op, kwargs)
    }

    fn v2(&mut self, op: &Op, kwargs: Vec<(&str, Value)>) -> NodeId {
        self.af(true, op, kwargs)
    }

    fn output(mut self, vals: &[NodeId]) -> Graph {
        let t = self.target("output", TargetKind::Other, None);
        self.push(
            OpCode::Output,
            "output",
            t,
            vec![Value::Tuple(vals.iter().map(|&v| n(v)).collect())],
            vec![],
            None,
        );
        self.g
    }
}

/// `rms(out=<base 0>, x, w)` as a v2 node writing `base` whole.
fn rms_v2(b: &mut B, base: NodeId, x: NodeId, w: NodeId) -> NodeId {
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

// ----- plan inspection -----------------------------------------------------------

fn planned(g: &Graph) -> Plan {
    let p = plan(g).unwrap();
    check_structure(g, &p).unwrap();
    p
}

fn id_of(g: &Graph, name: &str) -> NodeId {
    let i = g.nodes.iter().position(|n| n.name == name).unwrap();
    NodeId(u32::try_from(i).unwrap())
}

fn replaced_with(p: &Plan, node: NodeId) -> Option<ValueRef> {
    p.edits.iter().find_map(|e| match e {
        Edit::Replace { node: m, with } if *m == node => Some(*with),
        _ => None,
    })
}

fn erased(p: &Plan, node: NodeId) -> bool {
    p.edits
        .iter()
        .any(|e| matches!(e, Edit::Erase { node: m } if *m == node))
}

/// The inserted in-place calls of the graph's operators (`Callee::Target`).
fn inserted_calls(p: &Plan) -> Vec<(NewId, &Vec<PlanArg>, &Vec<(String, PlanArg)>)> {
    p.edits
        .iter()
        .filter_map(|e| match e {
            Edit::Insert {
                id,
                callee: Callee::Target(_),
                args,
                kwargs,
                ..
            } => Some((*id, args, kwargs)),
            _ => None,
        })
        .collect()
}

fn inserted_aten(p: &Plan, name: &str) -> usize {
    p.edits
        .iter()
        .filter(|e| matches!(e, Edit::Insert { callee: Callee::Aten(c), .. } if *c == name))
        .count()
}

fn moves(p: &Plan) -> Vec<(NodeId, NodeId)> {
    p.edits
        .iter()
        .filter_map(|e| match e {
            Edit::Move { node, before } => Some((*node, *before)),
            _ => None,
        })
        .collect()
}

fn actions(p: &Plan) -> Vec<Action> {
    p.report.decisions.iter().map(|d| d.action).collect()
}

fn plan_arg_refs(a: &PlanArg, out: &mut Vec<ValueRef>) {
    match a {
        PlanArg::Ref(r) => out.push(*r),
        PlanArg::List(items) => items.iter().for_each(|i| plan_arg_refs(i, out)),
        _ => {}
    }
}

/// Simulates the plan on user sets: every reference must be to a live value,
/// `Replace` moves all users of a node to its replacement (which is never
/// itself replaced), `Erase` needs a node without users, and the output node
/// survives.
fn check_structure(g: &Graph, p: &Plan) -> Result<(), String> {
    let mut operands: HashMap<ValueRef, Vec<ValueRef>> = HashMap::new();
    let mut users: HashMap<ValueRef, HashSet<ValueRef>> = HashMap::new();
    for (i, node) in g.nodes.iter().enumerate() {
        let me = ValueRef::Old(NodeId(u32::try_from(i).unwrap()));
        let mut ops = Vec::new();
        node.for_each_operand(|o| ops.push(ValueRef::Old(o)));
        for o in &ops {
            users.entry(*o).or_default().insert(me);
        }
        operands.insert(me, ops);
    }
    let mut alive: BTreeSet<(u8, u32)> = (0..g.len())
        .map(|i| (0u8, u32::try_from(i).unwrap()))
        .collect();
    let k = |r: ValueRef| match r {
        ValueRef::Old(n) => (0u8, n.0),
        ValueRef::New(n) => (1u8, n.0),
    };
    let mut replaced: BTreeSet<(u8, u32)> = BTreeSet::new();
    let mut next_new = 0u32;
    for (ei, e) in p.edits.iter().enumerate() {
        match e {
            Edit::Move { node, before } => {
                for x in [node, before] {
                    if !alive.contains(&k(ValueRef::Old(*x))) {
                        return Err(format!("edit {ei}: move of dead node {x:?}"));
                    }
                }
            }
            Edit::Insert {
                id,
                before,
                args,
                kwargs,
                ..
            } => {
                if id.0 != next_new {
                    return Err(format!("edit {ei}: new id {id:?} out of order"));
                }
                next_new += 1;
                if !alive.contains(&k(ValueRef::Old(*before))) {
                    return Err(format!("edit {ei}: insert before dead node {before:?}"));
                }
                let mut refs = Vec::new();
                for a in args.iter().chain(kwargs.iter().map(|(_, a)| a)) {
                    plan_arg_refs(a, &mut refs);
                }
                let me = ValueRef::New(*id);
                for r in &refs {
                    if !alive.contains(&k(*r)) {
                        return Err(format!("edit {ei}: insert uses dead value {r:?}"));
                    }
                    users.entry(*r).or_default().insert(me);
                }
                alive.insert(k(me));
                operands.insert(me, refs);
            }
            Edit::Replace { node, with } => {
                let from = ValueRef::Old(*node);
                if !alive.contains(&k(from)) || !alive.contains(&k(*with)) {
                    return Err(format!("edit {ei}: replace involving a dead value"));
                }
                if replaced.contains(&k(*with)) {
                    return Err(format!("edit {ei}: replacement {with:?} is itself replaced"));
                }
                if from == *with {
                    return Err(format!("edit {ei}: self replacement"));
                }
                replaced.insert(k(from));
                let us = users.remove(&from).unwrap_or_default();
                for u in us {
                    if let Some(ops) = operands.get_mut(&u) {
                        for o in ops.iter_mut() {
                            if *o == from {
                                *o = *with;
                            }
                        }
                    }
                    users.entry(*with).or_default().insert(u);
                }
            }
            Edit::Erase { node } => {
                let me = ValueRef::Old(*node);
                if !alive.remove(&k(me)) {
                    return Err(format!("edit {ei}: erase of dead node {node:?}"));
                }
                if users.get(&me).is_some_and(|u| !u.is_empty()) {
                    return Err(format!(
                        "edit {ei}: erase of {node:?} ({}) with users {:?}",
                        g.node(*node).name,
                        users[&me]
                    ));
                }
                for o in operands.remove(&me).unwrap_or_default() {
                    if let Some(s) = users.get_mut(&o) {
                        s.remove(&me);
                    }
                }
            }
        }
    }
    if next_new != p.new_nodes {
        return Err(format!("new_nodes {} but {next_new} inserts", p.new_nodes));
    }
    let out = ValueRef::Old(NodeId(u32::try_from(g.len() - 1).unwrap()));
    if !alive.contains(&k(out)) {
        return Err("the output node was erased".into());
    }
    Ok(())
}

// ----- 1-4: v2 basics ----------------------------------------------------------

#[test]
fn v2_write_into_empty_buffer_is_reinplaced() {
    let mut b = B::new();
    let x = b.input("x", Some(meta(&[4, 8])));
    let w = b.input("w", Some(meta(&[8])));
    let buf = b.empty(&[4, 8]);
    let af = rms_v2(&mut b, buf, x, w);
    let g1 = b.getitem(af, 1);
    let g = b.output(&[g1]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced]);
    let d = &p.report.decisions[0];
    assert_eq!(d.rule, "reinplace_v2");
    assert_eq!(d.form, "v2");
    assert_eq!(d.op, "mylib::rms.default");
    assert!(d.clones.is_empty() && d.moved.is_empty());
    assert_eq!(replaced_with(&p, g1), Some(ValueRef::Old(buf)));
    assert!(erased(&p, g1) && erased(&p, af));
    // One in-place call, on the buffer itself, positional, with the read
    // arguments passed through from the node's kwargs.
    let calls = inserted_calls(&p);
    assert_eq!(calls.len(), 1);
    let (_, args, kwargs) = &calls[0];
    assert_eq!(args[0], PlanArg::Ref(ValueRef::Old(buf)));
    assert_eq!(
        args[1],
        PlanArg::FromKwarg {
            node: af,
            key: "x".into()
        }
    );
    assert!(kwargs.is_empty());
    assert_eq!(inserted_aten(&p, "aten::clone.default"), 0);
    assert!(matches!(
        p.edits.iter().find(|e| matches!(e, Edit::Insert { .. })),
        Some(Edit::Insert {
            meta: MetaSource::Nothing,
            before,
            ..
        }) if *before == af
    ));
}

#[test]
fn v2_later_pure_reader_is_moved_before_the_call() {
    let mut b = B::new();
    let a = b.input("a", Some(meta(&[4, 8])));
    let m = b.input("m", Some(meta(&[8, 8])));
    let w = b.input("w", Some(meta(&[8])));
    let buf = b.call_meta(&mm_op(), vec![n(a), n(m)], Some(meta(&[4, 8])));
    let af = rms_v2(&mut b, buf, a, w);
    let g1 = b.getitem(af, 1);
    // Reads the *old* value of `buf` after the call; its inputs all exist
    // before the call.
    let r = b.call(&mul_op(), vec![n(buf), n(a)]);
    let g = b.output(&[g1, r]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced]);
    assert_eq!(moves(&p), [(r, af)]);
    assert_eq!(p.report.decisions[0].moved, ["mul"]);
    assert_eq!(inserted_aten(&p, "aten::clone.default"), 0);
    assert!(p.report.decisions[0].clones.is_empty());
    // The move comes before the in-place call is inserted.
    let mv = p
        .edits
        .iter()
        .position(|e| matches!(e, Edit::Move { .. }))
        .unwrap();
    let ins = p
        .edits
        .iter()
        .position(|e| matches!(e, Edit::Insert { .. }))
        .unwrap();
    assert!(mv < ins);
}

#[test]
fn v2_reader_that_cannot_move_forces_a_clone() {
    let mut b = B::new();
    let a = b.input("a", Some(meta(&[4, 8])));
    let m = b.input("m", Some(meta(&[8, 8])));
    let w = b.input("w", Some(meta(&[8])));
    let buf = b.call_meta(&mm_op(), vec![n(a), n(m)], Some(meta(&[4, 8])));
    let af = rms_v2(&mut b, buf, a, w);
    let g1 = b.getitem(af, 1);
    // The output node reads the old value: it cannot move.
    let g = b.output(&[g1, buf]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned]);
    let d = &p.report.decisions[0];
    assert_eq!(d.clones.len(), 1);
    assert_eq!(d.clones[0].arg, "_all_bases[0]");
    assert_eq!(d.clones[0].reader.as_deref(), Some("output"));
    assert!(d.clones[0].reason.contains("output"), "{}", d.clones[0].reason);
    assert_eq!(d.clones[0].bytes, Some(4 * 8 * 4));
    assert!(moves(&p).is_empty());
    // The call writes the clone, and the new value is the clone.
    let clone_id = p
        .edits
        .iter()
        .find_map(|e| match e {
            Edit::Insert {
                id,
                callee: Callee::Aten("aten::clone.default"),
                args,
                ..
            } => {
                assert_eq!(args[0], PlanArg::Ref(ValueRef::Old(buf)));
                Some(*id)
            }
            _ => None,
        })
        .unwrap();
    let calls = inserted_calls(&p);
    assert_eq!(calls[0].1[0], PlanArg::Ref(ValueRef::New(clone_id)));
    assert_eq!(replaced_with(&p, g1), Some(ValueRef::New(clone_id)));
    assert_eq!(replaced_with(&p, buf), None);
}

/// `rms` on graph input `x`, then optionally the `copy_(x, new)` epilogue.
fn input_write(epilogue: bool) -> (Graph, NodeId, NodeId) {
    let mut b = B::new();
    let x = b.input("x", Some(meta(&[4, 8])));
    let y = b.input("y", Some(meta(&[4, 8])));
    let w = b.input("w", Some(meta(&[8])));
    let af = rms_v2(&mut b, x, y, w);
    let g1 = b.getitem(af, 1);
    let copy = if epilogue {
        Some(b.call(&copy_op(), vec![n(x), n(g1)]))
    } else {
        None
    };
    let g = b.output(&[g1]);
    (g, g1, copy.unwrap_or(NodeId(u32::MAX)))
}

#[test]
fn graph_input_written_back_is_reinplaced_and_the_copy_removed() {
    let (g, g1, copy) = input_write(true);
    let x = id_of(&g, "x");
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced]);
    assert_eq!(p.report.writebacks_removed, 1);
    assert_eq!(replaced_with(&p, g1), Some(ValueRef::Old(x)));
    assert!(erased(&p, copy));
    assert_eq!(inserted_aten(&p, "aten::clone.default"), 0);
}

#[test]
fn graph_input_not_written_back_is_cloned() {
    let (g, g1, _) = input_write(false);
    let x = id_of(&g, "x");
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned]);
    assert_eq!(p.report.writebacks_removed, 0);
    let note = &p.report.decisions[0].clones[0];
    assert!(note.reason.contains("not written back"), "{}", note.reason);
    assert!(note.reason.contains("`x`"), "{}", note.reason);
    assert_eq!(note.reader, None);
    assert_ne!(replaced_with(&p, g1), Some(ValueRef::Old(x)));
    assert_eq!(inserted_aten(&p, "aten::clone.default"), 1);
}

// ----- 5-8: v1 views, scatters, aliasing ---------------------------------------

#[test]
fn v1_rotary_on_split_qkv_removes_both_scatters() {
    let mut b = B::new();
    let a = b.input("a", Some(meta(&[3, 8])));
    let wq = b.input("wqkv", Some(meta(&[8, 16])));
    let cos = b.input("cos", Some(meta(&[3, 4])));
    let mm = b.call_meta(&mm_op(), vec![n(a), n(wq)], Some(meta(&[3, 16])));
    let split = b.call(
        &split_with_sizes_op(),
        vec![n(mm), ints(&[4, 4, 8]), Value::Int(-1)],
    );
    let q = b.getitem(split, 0);
    let k = b.getitem(split, 1);
    let v = b.getitem(split, 2);
    let af = b.v1(&rot_op(), vec![("q", n(q)), ("k", n(k)), ("cos", n(cos))]);
    let g1 = b.getitem(af, 1);
    let g2 = b.getitem(af, 2);
    let s1 = b.call_meta(
        &slice_scatter_op(),
        vec![n(mm), n(g1), Value::Int(1), Value::Int(0), Value::Int(4)],
        Some(meta(&[3, 16])),
    );
    let s2 = b.call_meta(
        &slice_scatter_op(),
        vec![n(s1), n(g2), Value::Int(1), Value::Int(4), Value::Int(8)],
        Some(meta(&[3, 16])),
    );
    let r = b.call(&add_op(), vec![n(s2), n(s2)]);
    let g = b.output(&[r, v]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced], "{:#?}", p.report);
    let d = &p.report.decisions[0];
    assert_eq!((d.form, d.rule), ("v1", "reinplace_v1"));
    assert_eq!(d.scatters_removed, 2);
    assert!(d.clones.is_empty());
    assert_eq!(replaced_with(&p, s2), Some(ValueRef::Old(mm)));
    assert_eq!(replaced_with(&p, s1), Some(ValueRef::Old(mm)));
    assert!(erased(&p, s1) && erased(&p, s2) && erased(&p, af));
    assert_eq!(replaced_with(&p, g1), Some(ValueRef::Old(q)));
    assert_eq!(replaced_with(&p, g2), Some(ValueRef::Old(k)));
    let calls = inserted_calls(&p);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].1[0], PlanArg::Ref(ValueRef::Old(q)));
    assert_eq!(calls[0].1[1], PlanArg::Ref(ValueRef::Old(k)));
    assert_eq!(p.new_nodes, 1);
}

#[test]
fn v1_rotary_scatter_with_other_bounds_is_kept() {
    // The second scatter puts k's new value somewhere else than where k was
    // cut from: not a pure write-back, so no scatter can be dropped.
    let mut b = B::new();
    let a = b.input("a", Some(meta(&[3, 8])));
    let wq = b.input("wqkv", Some(meta(&[8, 16])));
    let cos = b.input("cos", Some(meta(&[3, 4])));
    let mm = b.call_meta(&mm_op(), vec![n(a), n(wq)], Some(meta(&[3, 16])));
    let split = b.call(
        &split_with_sizes_op(),
        vec![n(mm), ints(&[4, 4, 8]), Value::Int(-1)],
    );
    let q = b.getitem(split, 0);
    let k = b.getitem(split, 1);
    let af = b.v1(&rot_op(), vec![("q", n(q)), ("k", n(k)), ("cos", n(cos))]);
    let g1 = b.getitem(af, 1);
    let g2 = b.getitem(af, 2);
    let s1 = b.call_meta(
        &slice_scatter_op(),
        vec![n(mm), n(g1), Value::Int(1), Value::Int(0), Value::Int(4)],
        Some(meta(&[3, 16])),
    );
    let s2 = b.call_meta(
        &slice_scatter_op(),
        vec![n(s1), n(g2), Value::Int(1), Value::Int(8), Value::Int(12)],
        Some(meta(&[3, 16])),
    );
    let g = b.output(&[s2]);
    let p = planned(&g);
    assert_eq!(p.report.decisions.len(), 1);
    let d = &p.report.decisions[0];
    assert_eq!(d.scatters_removed, 0);
    assert!(!erased(&p, s1) && !erased(&p, s2));
    // mm is read by the kept scatter after the call: the old value is needed.
    assert_eq!(d.action, Action::Cloned);
}

#[test]
fn v1_op_on_each_row_through_select_scatter_chains() {
    // for i in 0..2: op(x[i]) on an intermediate buffer, functionalised as
    // select -> auto_functionalized -> select_scatter.
    let mut b = B::new();
    let x = b.input("x", Some(meta(&[8])));
    let w = b.input("w", Some(meta(&[8])));
    let buf = b.empty(&[2, 8]);
    let s0 = b.call(&select_op(), vec![n(buf), Value::Int(0), Value::Int(0)]);
    let af0 = b.v1(&rms_op(), vec![("out", n(s0)), ("x", n(x)), ("w", n(w))]);
    let g0 = b.getitem(af0, 1);
    let sc0 = b.call_meta(
        &select_scatter_op(),
        vec![n(buf), n(g0), Value::Int(0), Value::Int(0)],
        Some(meta(&[2, 8])),
    );
    let s1 = b.call(&select_op(), vec![n(sc0), Value::Int(0), Value::Int(1)]);
    let af1 = b.v1(&rms_op(), vec![("out", n(s1)), ("x", n(x)), ("w", n(w))]);
    let g1 = b.getitem(af1, 1);
    let sc1 = b.call_meta(
        &select_scatter_op(),
        vec![n(sc0), n(g1), Value::Int(0), Value::Int(1)],
        Some(meta(&[2, 8])),
    );
    let g = b.output(&[sc1]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced, Action::Reinplaced]);
    let removed: Vec<usize> = p
        .report
        .decisions
        .iter()
        .map(|d| d.scatters_removed)
        .collect();
    assert_eq!(removed, [1, 1]);
    assert_eq!(replaced_with(&p, sc0), Some(ValueRef::Old(buf)));
    assert_eq!(replaced_with(&p, sc1), Some(ValueRef::Old(buf)));
    assert!(erased(&p, sc0) && erased(&p, sc1));
    let calls = inserted_calls(&p);
    assert_eq!(calls[0].1[0], PlanArg::Ref(ValueRef::Old(s0)));
    assert_eq!(calls[1].1[0], PlanArg::Ref(ValueRef::Old(s1)));
    assert_eq!(inserted_aten(&p, "aten::clone.default"), 0);
}

#[test]
fn v1_two_written_args_on_one_slice_clone_one() {
    let mut b = B::new();
    let a = b.input("a", Some(meta(&[3, 8])));
    let wq = b.input("wqkv", Some(meta(&[8, 16])));
    let cos = b.input("cos", Some(meta(&[3, 4])));
    let mm = b.call_meta(&mm_op(), vec![n(a), n(wq)], Some(meta(&[3, 16])));
    let sl = b.call(
        &slice_op(),
        vec![n(mm), Value::Int(1), Value::Int(0), Value::Int(4)],
    );
    let af = b.v1(&rot_op(), vec![("q", n(sl)), ("k", n(sl)), ("cos", n(cos))]);
    let g1 = b.getitem(af, 1);
    let g2 = b.getitem(af, 2);
    let g = b.output(&[g1, g2]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned]);
    let d = &p.report.decisions[0];
    assert_eq!(d.clones.len(), 1);
    assert_eq!(d.clones[0].arg, "k");
    assert!(d.clones[0].reason.contains("shares memory"), "{}", d.clones[0].reason);
    assert_eq!(inserted_aten(&p, "aten::clone.default"), 1);
    assert_eq!(replaced_with(&p, g1), Some(ValueRef::Old(sl)));
    assert!(matches!(replaced_with(&p, g2), Some(ValueRef::New(_))));
}

#[test]
fn written_buffer_also_read_is_cloned() {
    for v2 in [true, false] {
        let mut b = B::new();
        let a = b.input("a", Some(meta(&[4, 8])));
        let m = b.input("m", Some(meta(&[8, 8])));
        let w = b.input("w", Some(meta(&[8])));
        let buf = b.call_meta(&mm_op(), vec![n(a), n(m)], Some(meta(&[4, 8])));
        let af = if v2 {
            b.v2(
                &rms_op(),
                vec![
                    ("_out_base_index", Value::Int(0)),
                    ("x", n(buf)),
                    ("w", n(w)),
                    ("_all_bases", nodes(&[buf])),
                ],
            )
        } else {
            b.v1(&rms_op(), vec![("out", n(buf)), ("x", n(buf)), ("w", n(w))])
        };
        let g1 = b.getitem(af, 1);
        let g = b.output(&[g1]);
        let p = planned(&g);
        assert_eq!(actions(&p), [Action::Cloned], "v2={v2}");
        let note = &p.report.decisions[0].clones[0];
        assert!(
            note.reason.contains("read argument `mm`"),
            "v2={v2}: {}",
            note.reason
        );
        assert_eq!(inserted_aten(&p, "aten::clone.default"), 1);
    }
}

// ----- 9: nodes left alone ---------------------------------------------------------

fn v2_with_extra(key: &str, val: Value) -> Graph {
    let mut b = B::new();
    let x = b.input("x", Some(meta(&[4, 8])));
    let w = b.input("w", Some(meta(&[8])));
    let buf = b.empty(&[4, 8]);
    let af = b.v2(
        &rms_op(),
        vec![
            ("_out_base_index", Value::Int(0)),
            ("x", n(x)),
            ("w", n(w)),
            ("_all_bases", nodes(&[buf])),
            (key, val),
        ],
    );
    let g1 = b.getitem(af, 1);
    b.output(&[g1])
}

#[test]
fn unknown_v2_kwarg_is_left() {
    let p = planned(&v2_with_extra("_foo", Value::Int(1)));
    assert_eq!(actions(&p), [Action::Left]);
    let reason = p.report.decisions[0].reason.as_deref().unwrap();
    assert!(reason.contains("_foo"), "{reason}");
    assert!(p.edits.is_empty());
    assert_eq!(p.report.left(), 1);
}

#[test]
fn v2_already_processed_by_inductor_is_left() {
    let p = planned(&v2_with_extra("_only_clone_these_bases", ints(&[0])));
    assert_eq!(actions(&p), [Action::Left]);
    let reason = p.report.decisions[0].reason.as_deref().unwrap();
    assert!(reason.contains("_only_clone_these_bases"), "{reason}");
    assert!(p.edits.is_empty());
}

#[test]
fn v1_unknown_or_processed_kwargs_are_left() {
    for key in ["_foo", "_only_clone_these_tensors"] {
        let mut b = B::new();
        let x = b.input("x", Some(meta(&[4, 8])));
        let w = b.input("w", Some(meta(&[8])));
        let buf = b.empty(&[4, 8]);
        let af = b.v1(
            &rms_op(),
            vec![
                ("out", n(buf)),
                ("x", n(x)),
                ("w", n(w)),
                (key, Value::List(vec![])),
            ],
        );
        let g1 = b.getitem(af, 1);
        let g = b.output(&[g1]);
        let p = planned(&g);
        assert_eq!(actions(&p), [Action::Left], "{key}");
        let reason = p.report.decisions[0].reason.as_deref().unwrap();
        assert!(reason.contains(key), "{reason}");
        assert!(p.edits.is_empty());
    }
}

#[test]
fn af_result_used_directly_is_left() {
    let mut b = B::new();
    let x = b.input("x", Some(meta(&[4, 8])));
    let w = b.input("w", Some(meta(&[8])));
    let buf = b.empty(&[4, 8]);
    let af = rms_v2(&mut b, buf, x, w);
    let g = b.output(&[af]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Left]);
    assert!(p.edits.is_empty());
}
