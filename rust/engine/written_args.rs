//! The written arguments of a rewritten call, cut again from the value
//! each buffer has in the plan (the buffer itself, or its copy): a slice or
//! an `as_strided` with the node's own keyword arguments, or, for a v2 view
//! given by a symbolic storage offset, the graph's own view.

use crate::analysis::alias::{Role, ViewStep};
use crate::forms::call::{MutationCall, ViewOfBuffer};
use crate::ir::NodeId;
use crate::plan::{Callee, MetaSource, PlanArg, ValueRef};

use super::clone_reason::CloneReason;
use super::{Emitter, Model};

impl Emitter<'_, '_> {
    /// The written arguments of `call`, cut again from their buffers'
    /// values `buf_val`.
    pub(super) fn emit_written_args(
        &mut self,
        call: &MutationCall,
        buf_val: &[ValueRef],
        clone: &[Option<CloneReason>],
    ) -> Vec<ValueRef> {
        let af = call.node;
        let mut arg_val: Vec<ValueRef> = Vec::with_capacity(call.written.len());
        for w in &call.written {
            let b = PlanArg::Ref(buf_val[w.buffer]);
            let kw = |k: &String| PlanArg::FromKwarg {
                node: af,
                key: k.clone(),
            };
            let v = match &w.view {
                ViewOfBuffer::Whole => buf_val[w.buffer],
                ViewOfBuffer::Alias => ValueRef::New(self.plan.insert(
                    af,
                    Callee::Aten("aten::alias.default"),
                    vec![b],
                    vec![],
                    MetaSource::Compute,
                )),
                ViewOfBuffer::Slice { keys } => ValueRef::New(self.plan.insert(
                    af,
                    Callee::Aten("aten::slice.Tensor"),
                    vec![b, kw(&keys[0]), kw(&keys[1]), kw(&keys[2])],
                    vec![],
                    MetaSource::Compute,
                )),
                ViewOfBuffer::AsStrided { keys } => {
                    match self.view_named_by_offset(call, w.buffer, keys, clone) {
                        Some(v) => v,
                        None => ValueRef::New(self.plan.insert(
                            af,
                            Callee::Aten("aten::as_strided.default"),
                            vec![b, kw(&keys[0]), kw(&keys[1]), kw(&keys[2])],
                            vec![],
                            MetaSource::Compute,
                        )),
                    }
                }
            };
            arg_val.push(v);
        }
        arg_val
    }

    /// The graph's own view for a v2 written argument whose storage offset
    /// is symbolic: functionalization records it as `sym_storage_offset(x)`
    /// of the very view `x` the program passed, and `as_strided(base, ...,
    /// sym_storage_offset(x))` is what Inductor's lowering miscomputes (it
    /// wrote rows `0:2` for `x = a.flatten(0, 1)[4:6]`, issue 30). Written in
    /// place, `x` itself is that view: same storage, rank and dtype (and
    /// sizes, where static). `None` when that is not proven, or the buffer
    /// is cloned (`x` is then a view of the original, not of the copy).
    fn view_named_by_offset(
        &mut self,
        call: &MutationCall,
        buffer: usize,
        keys: &[String; 3],
        clone: &[Option<CloneReason>],
    ) -> Option<ValueRef> {
        use crate::ir::Value;
        if clone[buffer].is_some() {
            return None;
        }
        let n = self.facts.graph.node(call.node);
        let offset = n.kwarg(&keys[2])?.as_node()?;
        if self.facts.graph.target_of(offset).name != "aten::sym_storage_offset.default" {
            return None;
        }
        let x = self.facts.graph.node(offset).args.first()?.as_node()?;
        let base = call.buffers[buffer].node;
        if !matches!(self.facts.roles[x.idx()], Role::View { .. })
            || self.classes.root_of(x) != self.classes.root_of(base)
        {
            return None;
        }
        let size = match self.facts.graph.node(call.node).kwarg(&keys[0])? {
            Value::List(v) | Value::Tuple(v) => v.clone(),
            _ => return None,
        };
        let bm = self.facts.graph.node(base).meta.as_ref()?;
        match self.facts.graph.node(x).meta.as_ref() {
            Some(xm) => {
                if xm.dtype.is_empty() || xm.dtype != bm.dtype || xm.sizes.len() != size.len() {
                    return None;
                }
                if !same_static_dims(&size, &xm.sizes) {
                    return None;
                }
                // A view of another stride with the same offset (`t[-1, ::2]`
                // where `t[-1]` was traced first) is not the written view.
                if let (Some(stride), Some(Value::List(want) | Value::Tuple(want))) = (
                    &xm.strides,
                    self.facts.graph.node(call.node).kwarg(&keys[1]),
                ) {
                    if want.len() != stride.len() || !same_static_dims(want, stride) {
                        return None;
                    }
                }
            }
            // No metadata on the view (Inductor's graphs often have none on
            // views): its rank follows from its steps on the base, and steps
            // the engine models keep the dtype.
            None => {
                if self.model().rank_through_steps(base, x, bm.rank())? != size.len() {
                    return None;
                }
            }
        }
        Some(self.plan.resolve(x))
    }
}

impl Model<'_, '_> {
    /// The rank of view `x` of `base` (rank `base_rank`), from the steps
    /// of its geometry after `base`'s own; `None` when `x` is not a view of
    /// `base` through steps the engine models.
    fn rank_through_steps(&self, base: NodeId, x: NodeId, base_rank: u32) -> Option<usize> {
        let (gb, gx) = (self.geometry(base), self.geometry(x));
        if gb.root != gx.root || !gx.steps.starts_with(&gb.steps) {
            return None;
        }
        let mut rank = usize::try_from(base_rank).ok()?;
        for step in &gx.steps[gb.steps.len()..] {
            rank = match step {
                ViewStep::Slice { .. } => rank,
                ViewStep::Select { .. } | ViewStep::Squeeze { .. } => rank.checked_sub(1)?,
                ViewStep::Unsqueeze { .. } => rank + 1,
                ViewStep::Reshape { shape } => shape.len(),
                ViewStep::AsStrided { size, .. } => size.len(),
                ViewStep::Opaque(v) => opaque_rank(self.facts.graph, *v, rank)?,
            };
        }
        Some(rank)
    }
}

/// False when a dimension both sides know as a number differs: a symbolic
/// dimension on either side (a node in the kwargs, an expression in the
/// metadata) is not compared.
fn same_static_dims(want: &[crate::ir::Value], have: &[crate::ir::Dim]) -> bool {
    want.iter()
        .zip(have)
        .all(|(w, h)| match (w, h.as_static()) {
            (crate::ir::Value::Int(i), Some(d)) => *i == d,
            _ => true,
        })
}

/// The rank of an unmodelled view `v` of a rank-`rank` source, where its
/// operator alone says it: `select(-1)` under a symbolic size is opaque to
/// the geometry, yet drops one dimension.
fn opaque_rank(graph: &crate::ir::Graph, v: NodeId, rank: usize) -> Option<usize> {
    match graph.target_of(v).name.as_str() {
        "aten::select.int" | "aten::squeeze.dim" => rank.checked_sub(1),
        "aten::slice.Tensor" | "aten::narrow.default" | "aten::transpose.int" => Some(rank),
        "aten::unsqueeze.default" => Some(rank + 1),
        _ => None,
    }
}
