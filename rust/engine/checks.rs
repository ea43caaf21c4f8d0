//! The reasons to clone a written buffer instead of writing it in place,
//! each a small named check (as `torch/_inductor/fx_passes/reinplace.py`
//! has `can_inplace` and its helpers). `mutation.rs` reads the decision for
//! one call as the list of these checks; the text a reason gets in the
//! report is written once, in [`CloneReason::note`].
//!
//! Two kinds of check: those on one buffer, whatever the later readers
//! ([`Model::buffer_reason`] lists them), and those on the buffers of one
//! storage class that the call writes in place together (graph inputs, the
//! input's write-back, readers of the old value), run by
//! `Context::decide_class` in `mutation.rs`.
//!
//! Every check is a method of [`Model`], the walk's knowledge read-only
//! (the graph as it arrives and the model of the rewritten program): a
//! check cannot change what the next check reads.

use std::collections::BTreeSet;

use rustc_hash::FxHashSet as HashSet;

use crate::analysis::alias::Role;
use crate::forms::call::MutationCall;
use crate::ir::{NodeId, OpCode};

use super::clone_reason::CloneReason;
use super::sharing::Sharing;
use super::storage::structural_root;
use super::{writeback, Facts, Model};

impl Model<'_, '_> {
    /// Why buffer `b` of `call` must be a copy whatever the later readers:
    /// the first of the checks on one buffer that gives a reason, in this
    /// order.
    pub(super) fn buffer_reason(
        &self,
        call: &MutationCall,
        sharing: &Sharing,
        b: usize,
    ) -> Option<CloneReason> {
        self.written_view_may_overlap(call, b)
            .or_else(|| self.facts.written_by_another_operator(call, b))
            .or_else(|| self.scatter_into_overwritten_input(call, b))
            .or_else(|| sharing.split[b].clone())
    }

    /// [`CloneReason::OverlappingView`].
    pub(super) fn written_view_may_overlap(
        &self,
        call: &MutationCall,
        b: usize,
    ) -> Option<CloneReason> {
        self.overlapping_view(call.buffers[b].node)
            .then_some(CloneReason::OverlappingView)
    }

    /// [`CloneReason::ScatterIntoOverwrittenInput`]: buffer `b` is the
    /// result of an operator that Inductor's reinplace pass later makes
    /// write its first argument in place (`select_scatter`, `index_put`,
    /// ...), that argument is a graph input the graph writes back (`copy_`)
    /// with another value, and the buffer is read after that write-back.
    /// Inductor's `can_inplace` accepts such a scatter whatever the
    /// write-back's source, so the scatter's result becomes the input's
    /// memory and the write-back then overwrites what this call wrote in
    /// place (issue 30: a user's clone of an input written twice, `a1[1] =
    /// 7; t0 = a1.clone(); lin_out(out=a1); opt_list([t0])`). Unrewritten,
    /// Inductor writes a clone of it instead.
    pub(super) fn scatter_into_overwritten_input(
        &self,
        call: &MutationCall,
        b: usize,
    ) -> Option<CloneReason> {
        const REINPLACED_BY_INDUCTOR: &[&str] = &[
            "aten::slice_scatter.default",
            "aten::select_scatter.default",
            "aten::as_strided_scatter.default",
            "aten::index_put.default",
            "aten::_unsafe_index_put.default",
        ];
        let root = structural_root(&self.facts.roles, call.buffers[b].node);
        let node = self.facts.graph.node(root);
        if node.op != OpCode::CallFunction
            || !REINPLACED_BY_INDUCTOR.contains(&self.facts.graph.target_of(root).name.as_str())
        {
            return None;
        }
        let first = structural_root(&self.facts.roles, node.args.first()?.as_node()?);
        if self.facts.graph.node(first).op != OpCode::Placeholder {
            return None;
        }
        let copy = self.facts.writers.writeback_of(first)?;
        let Role::InputWriteBack { src, .. } = self.facts.roles[copy.idx()] else {
            return None;
        };
        let mut values = self.facts.result_nodes(call, b);
        if values.contains(&src) {
            return None;
        }
        values.push(root);
        let reader = self.reader_from(&values, self.pos.of(copy), Some(copy))?;
        Some(CloneReason::ScatterIntoOverwrittenInput {
            scatter: root,
            input: first,
            copy,
            reader,
        })
    }

    /// [`CloneReason::AliasesSeveralInputs`] or
    /// [`CloneReason::InputNotWrittenBack`], for the buffers of storage
    /// class `root` written in place by `af`: a graph input may change only
    /// where the graph writes it back after the call.
    pub(super) fn input_must_not_change(&self, root: usize, af: NodeId) -> Option<CloneReason> {
        match self.classes.inputs(root) {
            [] => None,
            [x] => self
                .write_back_after(*x, af)
                .is_none()
                .then_some(CloneReason::InputNotWrittenBack { input: *x }),
            _ => Some(CloneReason::AliasesSeveralInputs),
        }
    }

    /// The graph input of class `root` and the position of its write-back,
    /// when the class holds one input and the graph writes it back after
    /// `af` (where [`Self::input_must_not_change`] gives no reason).
    pub(super) fn write_back_cut(&self, root: usize, af: NodeId) -> Option<(NodeId, i64)> {
        let [x] = self.classes.inputs(root) else {
            return None;
        };
        self.write_back_after(*x, af).map(|c| (*x, c))
    }

    /// The position of input `x`'s write-back when it comes after `af`.
    fn write_back_after(&self, x: NodeId, af: NodeId) -> Option<i64> {
        let c = self.facts.writers.writeback_of(x)?;
        (self.pos.of(c) > self.pos.of(af)).then_some(self.pos.of(c))
    }

    /// [`CloneReason::ReadAfterWriteBack`]: the write-back of input `x` (at
    /// `cut`) overwrites the input with the final value, so a value this
    /// call leaves in the input's memory (a result of buffers `accepted`,
    /// or a removed write-back scatter of `chain`) must not be read after
    /// it, unless it is that final value.
    pub(super) fn read_after_write_back(
        &self,
        call: &MutationCall,
        accepted: &[usize],
        (x, cut): (NodeId, i64),
        chain: Option<&writeback::ScatterChain>,
    ) -> Option<CloneReason> {
        let copy = self.facts.writers.writeback_of(x);
        let wb_src = copy.and_then(|c| match self.facts.roles[c.idx()] {
            Role::InputWriteBack { src, .. } => Some(src),
            _ => None,
        });
        let mut values: Vec<NodeId> = accepted
            .iter()
            .flat_map(|&b| self.facts.result_nodes(call, b))
            .collect();
        if let Some(c) = chain {
            values.extend(c.iter().filter(|(_, (_, exact))| *exact).map(|(sc, _)| *sc));
        }
        values.retain(|&g| Some(g) != wb_src);
        let reader = self.reader_from(&values, cut, copy)?;
        Some(CloneReason::ReadAfterWriteBack { reader })
    }

    /// The readers of an older version of class `root` after the call that
    /// must move ahead of it for buffers `active` to be written in place,
    /// or [`CloneReason::OldValueRead`] for the first that cannot move.
    /// Nodes of the write-back `chain` are no readers (they go), nor are
    /// readers after input `cut`'s write-back.
    pub(super) fn readers_to_move(
        &self,
        call: &MutationCall,
        root: usize,
        active: &[usize],
        cut: Option<(NodeId, i64)>,
        chain: Option<&writeback::ScatterChain>,
    ) -> std::result::Result<BTreeSet<NodeId>, CloneReason> {
        if active.is_empty() {
            return Ok(BTreeSet::new());
        }
        let excluded: HashSet<NodeId> = chain
            .map(|c| c.keys().copied().collect())
            .unwrap_or_default();
        // Readers of the old value matter only where the call writes.
        let written = self.written_geometries(call, active);
        let hazards = self.hazards(root, call.node, &excluded, cut, written.as_deref());
        if hazards.is_empty() {
            return Ok(BTreeSet::new());
        }
        self.plan_moves(&hazards, call.node)
            .map_err(|reader| CloneReason::OldValueRead { reader })
    }
}

impl Facts<'_> {
    /// [`CloneReason::WrittenByAnotherOperator`].
    pub(super) fn written_by_another_operator(
        &self,
        call: &MutationCall,
        b: usize,
    ) -> Option<CloneReason> {
        self.writers
            .writes_foreign(structural_root(&self.roles, call.buffers[b].node))
            .then_some(CloneReason::WrittenByAnotherOperator)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{nid, Context};
    use super::*;
    use crate::analysis::test_graph::{add, add_, copy_, expand, n, neg, slice_scatter, B};
    use crate::forms::FormCall;
    use crate::ir::Graph;
    use crate::ir::Value;

    /// The walk of `g` up to (not including) node `af`, and the call `af`
    /// as its form reads it.
    fn at_call(g: &Graph, af: NodeId) -> (Context<'_>, MutationCall) {
        let mut cx = Context::new(g);
        for i in 0..af.idx() {
            cx.step(nid(i)).unwrap();
        }
        let Some(Ok(FormCall::Mutation(call))) = crate::forms::parse(g, af).map(|(_, c)| c) else {
            panic!("a mutation call");
        };
        (cx, call)
    }

    /// The class of buffer 0 of `call`.
    fn class_of(cx: &mut Context<'_>, call: &MutationCall) -> usize {
        cx.classes.find(call.buffers[0].node)
    }

    #[test]
    fn a_buffer_seen_through_an_expand_may_overlap_itself() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let e = b.call(
            "e",
            &expand(),
            vec![n(t), crate::analysis::test_graph::ints(&[2, 4, 8])],
        );
        let af = b.scale_v2("af", e);
        let g = b.output(&[af]);
        let (cx, call) = at_call(&g, af);
        assert_eq!(
            cx.model().written_view_may_overlap(&call, 0),
            Some(CloneReason::OverlappingView)
        );
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let af = b.scale_v2("af", t);
        let g = b.output(&[af]);
        let (cx, call) = at_call(&g, af);
        assert_eq!(cx.model().written_view_may_overlap(&call, 0), None);
    }

    #[test]
    fn a_buffer_an_inplace_operator_of_the_graph_writes_is_foreign() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let u = b.fresh("u", x);
        let w = b.call("w", &add_(), vec![n(t), n(x)]);
        let on_t = b.scale_v2("on_t", t);
        let on_u = b.scale_v2("on_u", u);
        let g = b.output(&[w, on_t, on_u]);
        let (cx, call) = at_call(&g, on_t);
        assert_eq!(
            cx.facts.written_by_another_operator(&call, 0),
            Some(CloneReason::WrittenByAnotherOperator)
        );
        let (cx, call) = at_call(&g, on_u);
        assert_eq!(cx.facts.written_by_another_operator(&call, 0), None);
    }

    /// `s = slice_scatter(x, v)` written by the call, `copy_(x, back)`
    /// after it, and `s` read by `r` after the write-back (or before it,
    /// when not `read_late`).
    fn scatter_of_written_back_input(read_late: bool) -> (Graph, NodeId, [NodeId; 4]) {
        let mut b = B::new();
        let x = b.input("x");
        let v = b.fresh("v", x);
        let s = b.call(
            "s",
            &slice_scatter(),
            vec![n(x), n(v), Value::Int(0), Value::Int(0), Value::Int(4)],
        );
        let af = b.scale_v2("af", s);
        let ns = b.getitem("ns", af, 1);
        let back = b.fresh("back", x);
        let early = (!read_late).then(|| b.call("r", &neg(), vec![n(ns)]));
        let copy = b.call("copy", &copy_(), vec![n(x), n(back)]);
        let r = early.unwrap_or_else(|| b.call("r", &neg(), vec![n(ns)]));
        (b.output(&[r]), af, [s, x, copy, r])
    }

    #[test]
    fn a_scatter_into_an_input_overwritten_before_it_is_read_is_a_reason() {
        let (g, af, [s, x, copy, r]) = scatter_of_written_back_input(true);
        let (cx, call) = at_call(&g, af);
        assert_eq!(
            cx.model().scatter_into_overwritten_input(&call, 0),
            Some(CloneReason::ScatterIntoOverwrittenInput {
                scatter: s,
                input: x,
                copy,
                reader: r
            })
        );
        let (g, af, _) = scatter_of_written_back_input(false);
        let (cx, call) = at_call(&g, af);
        assert_eq!(cx.model().scatter_into_overwritten_input(&call, 0), None);
    }

    #[test]
    fn an_input_may_change_only_where_the_graph_writes_it_back_after_the_call() {
        // `x` written back after the call, `y` never.
        let mut b = B::new();
        let x = b.input("x");
        let y = b.input("y");
        let on_x = b.scale_v2("on_x", x);
        let nx = b.getitem("nx", on_x, 1);
        let on_y = b.scale_v2("on_y", y);
        let copy = b.call("copy", &copy_(), vec![n(x), n(nx)]);
        let g = b.output(&[copy, on_y]);
        let (mut cx, call) = at_call(&g, on_x);
        let root = class_of(&mut cx, &call);
        assert_eq!(cx.model().input_must_not_change(root, on_x), None);
        assert_eq!(
            cx.model().write_back_cut(root, on_x),
            Some((x, cx.pos.of(copy)))
        );
        let (mut cx, call) = at_call(&g, on_y);
        let root = class_of(&mut cx, &call);
        assert_eq!(
            cx.model().input_must_not_change(root, on_y),
            Some(CloneReason::InputNotWrittenBack { input: y })
        );
        assert_eq!(cx.model().write_back_cut(root, on_y), None);
        // Two inputs in one class.
        cx.classes.union(x, y);
        let root = class_of(&mut cx, &call);
        assert_eq!(
            cx.model().input_must_not_change(root, on_y),
            Some(CloneReason::AliasesSeveralInputs)
        );
        // A fresh buffer holds no input.
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let af = b.scale_v2("af", t);
        let g = b.output(&[af]);
        let (mut cx, call) = at_call(&g, af);
        let root = class_of(&mut cx, &call);
        assert_eq!(cx.model().input_must_not_change(root, af), None);
    }

    /// `x` written in place and written back with the call's result, then
    /// `r` reading `late` (the result, or an older value of `x`) after the
    /// write-back.
    fn read_after_copy(read_result: bool) -> (Graph, NodeId, NodeId, NodeId) {
        let mut b = B::new();
        let x = b.input("x");
        let other = b.fresh("other", x);
        let af = b.scale_v2("af", x);
        let nx = b.getitem("nx", af, 1);
        let copy = b.call("copy", &copy_(), vec![n(x), n(other)]);
        let read = if read_result { nx } else { other };
        let r = b.call("r", &neg(), vec![n(read)]);
        (b.output(&[copy, r]), af, x, r)
    }

    #[test]
    fn a_result_read_after_the_write_back_of_another_value_is_a_reason() {
        let (g, af, x, r) = read_after_copy(true);
        let (mut cx, call) = at_call(&g, af);
        let root = class_of(&mut cx, &call);
        let cut = cx.model().write_back_cut(root, af).unwrap();
        assert_eq!(cut.0, x);
        assert_eq!(
            cx.model().read_after_write_back(&call, &[0], cut, None),
            Some(CloneReason::ReadAfterWriteBack { reader: r })
        );
        let (g, af, _, _) = read_after_copy(false);
        let (mut cx, call) = at_call(&g, af);
        let root = class_of(&mut cx, &call);
        let cut = cx.model().write_back_cut(root, af).unwrap();
        assert_eq!(
            cx.model().read_after_write_back(&call, &[0], cut, None),
            None
        );
    }

    #[test]
    fn a_reader_of_the_old_value_moves_unless_it_needs_the_new_one() {
        let plan = |needs_new: bool| {
            let mut b = B::new();
            let x = b.input("x");
            let t = b.fresh("t", x);
            let af = b.scale_v2("af", t);
            let nt = b.getitem("nt", af, 1);
            let second = if needs_new { nt } else { t };
            let r = b.call("r", &add(), vec![n(t), n(second)]);
            let g = b.output(&[r, nt]);
            let (mut cx, call) = at_call(&g, af);
            let root = class_of(&mut cx, &call);
            (cx.model().readers_to_move(&call, root, &[0], None, None), r)
        };
        let (moves, r) = plan(false);
        assert_eq!(moves, Ok(BTreeSet::from([r])));
        let (moves, r) = plan(true);
        assert_eq!(moves, Err(CloneReason::OldValueRead { reader: r }));
    }

    #[test]
    fn a_note_names_the_reader_and_its_source() {
        let mut b = B::new();
        let x = b.input("x");
        let r = b.call("r", &neg(), vec![n(x)]);
        let mut g = b.output(&[r]);
        g.nodes[r.idx()].source = Some("model.py:3".into());
        let note = CloneReason::OldValueRead { reader: r }.note(&g, "out", Some(128));
        assert_eq!(
            (
                note.arg.as_str(),
                note.reader.as_deref(),
                note.reader_source.as_deref()
            ),
            ("out", Some("r"), Some("model.py:3"))
        );
        assert_eq!(note.reason, "node `r` reads the old value after the call");
        assert_eq!(note.bytes, Some(128));
        let note = CloneReason::SplitSharing {
            other: "x".into(),
            read: true,
        }
        .note(&g, "out", None);
        assert!(note.reason.starts_with("read argument `x` shares memory"));
        assert_eq!(note.reader, None);
    }
}
