//! Hazards of re-inplacing a call: readers of an older version of the
//! written memory after the call, and the set of nodes that can move ahead of
//! the call instead of cloning.

use std::collections::BTreeSet;

use rustc_hash::FxHashSet as HashSet;

use crate::analysis::alias::{Geometry, Role, ViewStep};
use crate::analysis::liveness::for_each_reader;
use crate::forms::call::{MutationCall, ViewOfBuffer, WrittenArg};
use crate::ir::{NodeId, OpCode, TargetKind};

use super::storage::structural_root;
use super::{Facts, Model, MAX_MOVED};

impl Model<'_, '_> {
    /// Readers after position `p` of versions of class `root` older than the
    /// call being planned, among its members (`Context::drop_dead_members`
    /// has dropped those no node after the call reads).
    pub(super) fn hazards(
        &self,
        root: usize,
        af: NodeId,
        excluded: &HashSet<NodeId>,
        cut: Option<(NodeId, i64)>,
        written: Option<&[Geometry]>,
    ) -> Vec<(NodeId, NodeId)> {
        let p = self.pos.of(af);
        let mut found: Vec<(NodeId, NodeId)> = Vec::new();
        for &m in self.classes.members(root) {
            let in_input_family = cut.is_some_and(|(input, _)| {
                structural_root(&self.facts.roles, m) == input && self.versions.is_first(m)
            });
            let pos = &self.pos;
            for_each_reader(&self.facts.roles, &self.facts.uses, m, &mut |r, via| {
                // Readers after the write-back see the final value anyway; the
                // write-back itself reads its source and counts.
                let after_cut = cut.is_some_and(|(_, c)| pos.of(r) > c) && in_input_family;
                if pos.of(r) > p
                    && r != af
                    && !excluded.contains(&r)
                    && !after_cut
                    && !found.iter().any(|(x, _)| *x == r)
                {
                    // A reader of a part of the buffer the call does not
                    // write (the `v` of a split qkv) sees no change.
                    let untouched = written.is_some_and(|ws| {
                        let g = self.view_geometry(via, p);
                        ws.iter().all(|w| w.provably_disjoint(&g))
                    });
                    if !untouched {
                        found.push((r, m));
                    }
                }
                true
            });
        }
        found
    }

    /// True when read argument `read` provably touches no element that the
    /// call writes in buffer `b` (the other half of a `chunk`): the kernel
    /// may then read it while writing the buffer in place.
    pub(super) fn read_is_disjoint(&self, call: &MutationCall, b: usize, read: NodeId) -> bool {
        let Some(written) = self.written_geometries(call, &[b]) else {
            return false;
        };
        let g = self.view_geometry(read, self.pos.of(call.node));
        !written.is_empty() && written.iter().all(|w| w.provably_disjoint(&g))
    }

    /// Geometries of the regions the accepted buffers' written arguments
    /// cover, or `None` when one of them is not modelled.
    pub(super) fn written_geometries(
        &self,
        call: &MutationCall,
        accepted: &[usize],
    ) -> Option<Vec<Geometry>> {
        call.written
            .iter()
            .filter(|w| accepted.contains(&w.buffer))
            .map(|w| self.written_geometry(call, w))
            .collect()
    }

    /// Geometry of the region written argument `w` covers, or `None` when
    /// it is not modelled.
    fn written_geometry(&self, call: &MutationCall, w: &WrittenArg) -> Option<Geometry> {
        let n = self.facts.graph.node(call.node);
        let base = self.geometry(call.buffers[w.buffer].node);
        Some(match &w.view {
            ViewOfBuffer::Whole | ViewOfBuffer::Alias => base,
            ViewOfBuffer::Slice { keys } => {
                let get = |k: &String| n.kwarg(k).and_then(crate::ir::Value::as_int);
                let (dim, start, end) = (get(&keys[0])?, get(&keys[1])?, get(&keys[2])?);
                if dim < 0 || start < 0 || end < start {
                    return None;
                }
                base.then(&ViewStep::Slice {
                    dim,
                    start,
                    end,
                    step: 1,
                })
            }
            ViewOfBuffer::AsStrided { .. } => return None,
        })
    }

    /// True when the call provably writes no element of buffer `b`: every
    /// written argument in it has no element (an empty slice range, a size
    /// 0 in its static sizes). Such a write changes no memory, so nothing
    /// that reads the buffer, before or after the call, needs a clone.
    pub(super) fn writes_nothing(&self, call: &MutationCall, b: usize) -> bool {
        let n = self.facts.graph.node(call.node);
        let buf = call.buffers[b].node;
        let static_empty = |m: NodeId| {
            self.facts
                .graph
                .node(m)
                .meta
                .as_ref()
                .is_some_and(|m| m.sizes.contains(&crate::ir::Dim::Static(0)))
        };
        let buffer_empty = static_empty(buf) || self.geometry(buf).provably_empty();
        let mut args = call.written.iter().filter(|w| w.buffer == b).peekable();
        args.peek().is_some()
            && args.all(|w| match &w.view {
                // A view of an empty buffer cut by a slice is empty too.
                ViewOfBuffer::Whole | ViewOfBuffer::Alias => buffer_empty,
                ViewOfBuffer::Slice { keys } => {
                    buffer_empty
                        || self
                            .written_geometry(call, w)
                            .is_some_and(|g| g.provably_empty())
                        || matches!(
                            (n.kwarg(&keys[1]), n.kwarg(&keys[2])),
                            (Some(start), Some(end)) if self.facts.same_int(start, end)
                        )
                }
                // `as_strided` reaches any element of the storage: only its
                // own sizes tell.
                ViewOfBuffer::AsStrided { keys } => {
                    matches!(n.kwarg(&keys[0]), Some(crate::ir::Value::List(v) | crate::ir::Value::Tuple(v)) if v.contains(&crate::ir::Value::Int(0)))
                }
            })
    }

    pub(super) fn movable(&self, n: NodeId) -> bool {
        let node = self.facts.graph.node(n);
        if node.op != OpCode::CallFunction || self.bindings.scatter(n).is_some() {
            return false;
        }
        let target = self.facts.graph.target_of(n);
        match (&self.facts.roles[n.idx()], target.kind) {
            (
                Role::Fresh | Role::View { .. } | Role::MetaOnly | Role::Scatter { .. },
                TargetKind::Operator,
            ) => target
                .schema
                .as_ref()
                .is_some_and(|s| !s.is_mutable() && !s.tags.nondeterministic),
            (Role::Fresh | Role::View { .. }, TargetKind::Getitem) => true,
            _ => false,
        }
    }

    pub(super) fn closure(&self, n: NodeId, af: NodeId, set: &mut BTreeSet<NodeId>) -> bool {
        let p = self.pos.of(af);
        if self.pos.of(n) < p || set.contains(&n) {
            return true;
        }
        if n == af || !self.movable(n) || set.len() >= MAX_MOVED {
            return false;
        }
        // Moved ahead of the call, `n` would also come before every node
        // between the two: an in-place write there of memory `n` reads would
        // then happen after it, not before.
        if self.facts.writers.between(n, af) {
            return false;
        }
        set.insert(n);
        let mut ops = Vec::new();
        self.facts.graph.node(n).for_each_operand(|o| ops.push(o));
        ops.into_iter().all(|o| self.closure(o, af, set))
    }

    pub(super) fn plan_moves(
        &self,
        hazards: &[(NodeId, NodeId)],
        af: NodeId,
    ) -> std::result::Result<BTreeSet<NodeId>, NodeId> {
        let mut set = BTreeSet::new();
        for &(r, _) in hazards {
            if !self.closure(r, af, &mut set) {
                return Err(r);
            }
        }
        Ok(set)
    }
}

impl Facts<'_> {
    /// True when two int arguments provably hold the same value: equal
    /// constants, the same SymInt node, or one of them that value plus or
    /// minus 0 (`operator.add(s, 0)`: the end Inductor's functionalization
    /// gives an empty v2 slice `x[:, k:k]` whose start `s` is symbolic). A
    /// slice from a value to the same value is empty whatever the value and
    /// the dimension's size: negative bounds wrap, and bounds clamp, alike.
    fn same_int(&self, a: &crate::ir::Value, b: &crate::ir::Value) -> bool {
        use crate::ir::Value;
        // `x + 0`, `0 + x`, `x - 0` -> x.
        let plus_zero = |v: &Value| -> Option<Value> {
            let m = v.as_node()?;
            let node = self.graph.node(m);
            let t = self.graph.target_of(m);
            if node.op != OpCode::CallFunction
                || t.kind != TargetKind::Other
                || !node.kwargs.is_empty()
            {
                return None;
            }
            match (t.name.as_str(), node.args.as_slice()) {
                ("_operator.add" | "_operator.sub", [x, Value::Int(0)])
                | ("_operator.add", [Value::Int(0), x]) => Some(x.clone()),
                _ => None,
            }
        };
        match (a, b) {
            (Value::Int(x), Value::Int(y)) => x == y,
            (Value::Node(x), Value::Node(y)) if x == y => true,
            _ => {
                plus_zero(a).is_some_and(|a| self.same_int(&a, b))
                    || plus_zero(b).is_some_and(|b| self.same_int(a, &b))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{only_decision, plan_of};
    use super::super::Context;
    use super::*;
    use crate::analysis::test_graph::{add, add_, n, neg, B};
    use crate::plan::Action;
    use crate::plan::Edit;
    use crate::plan::Plan;

    #[test]
    fn a_later_pure_reader_of_the_old_value_moves_ahead_of_the_call() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let af = b.scale_v2("af", t);
        let nt = b.getitem("nt", af, 1);
        let r = b.call("r", &add(), vec![n(t), n(t)]);
        let g = b.output(&[r, nt]);
        let p = plan_of(&g);
        let d = only_decision(&p);
        assert_eq!(d.action, Action::Reinplaced);
        assert_eq!(d.moved, ["r"]);
        assert!(p.edits.contains(&Edit::Move {
            node: r,
            before: af
        }));
    }

    #[test]
    fn a_reader_that_also_needs_the_new_value_forces_a_clone() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let af = b.scale_v2("af", t);
        let nt = b.getitem("nt", af, 1);
        let r = b.call("r", &add(), vec![n(t), n(nt)]);
        let g = b.output(&[r]);
        let p = plan_of(&g);
        let d = only_decision(&p);
        assert_eq!(d.action, Action::Cloned);
        assert!(d.moved.is_empty());
        assert_eq!(d.clones.len(), 1);
        assert_eq!(d.clones[0].reader.as_deref(), Some("r"));
        assert!(!p.edits.iter().any(|e| matches!(e, Edit::Move { .. })));
    }

    /// `t[2:4]` read after a call that writes `t[0:end]`.
    fn read_after_slice_write(end: i64) -> Plan {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let v = b.slice("v", t, 0, 2, 4);
        let af = b.scale_slice_v2("af", t, 0, end);
        let nt = b.getitem("nt", af, 1);
        let r = b.call("r", &neg(), vec![n(v)]);
        plan_of(&b.output(&[r, nt]))
    }

    #[test]
    fn a_reader_of_a_part_the_call_does_not_write_is_no_hazard() {
        let p = read_after_slice_write(2);
        let d = only_decision(&p);
        assert_eq!(d.action, Action::Reinplaced);
        assert!(d.moved.is_empty(), "{:?}", d.moved);
        // Overlapping the written rows, the same reader must move.
        let p = read_after_slice_write(3);
        assert_eq!(only_decision(&p).moved, ["r"]);
    }

    #[test]
    fn only_pure_deterministic_operator_calls_and_getitems_can_move() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let s = b.slice("s", t, 0, 0, 2);
        let w = b.call("w", &add_(), vec![n(t), n(x)]);
        let af = b.scale_v2("af", t);
        let nt = b.getitem("nt", af, 1);
        let g = b.output(&[s, w, nt]);
        let cx = Context::new(&g);
        assert!(cx.model().movable(t) && cx.model().movable(s));
        assert!(!cx.model().movable(x), "an input");
        assert!(!cx.model().movable(w), "an in-place operator");
        assert!(
            !cx.model().movable(af) && !cx.model().movable(nt),
            "the call and its results"
        );
        // A reader's closure stops at what is already before the call, and
        // fails on the call's own results.
        let mut set = BTreeSet::new();
        assert!(cx.model().closure(t, af, &mut set) && set.is_empty());
        assert!(!cx.model().closure(nt, af, &mut set));
    }
}
