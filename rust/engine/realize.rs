//! After the walk: the nodes Inductor must compute where they stand, because
//! an in-place call after them writes memory they read.

use std::collections::BTreeSet;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::analysis::alias::Role;
use crate::analysis::liveness::reads;
use crate::ir::{NodeId, OpCode, TargetKind};
use crate::plan::ValueRef;

use super::{nid, Context, Facts, Model};

impl Context<'_> {
    /// Marks every node that reads memory an in-place call later writes,
    /// and stands before that call, to be computed where it stands.
    ///
    /// Why: the rewritten graph is right in FX order, but Inductor computes
    /// a pointwise or reduction node lazily, inside the kernel of whichever
    /// user first needs it in a buffer. When that user comes after the
    /// in-place call, the node reads the new value. Inductor does realize the
    /// pending readers of a buffer when a fallback kernel mutates it
    /// (`GraphLowering.mark_buffer_mutated`), but only after the kernel has
    /// registered its own operation (`ExternKernelAlloc.__init__` runs before
    /// `MutationOutput`), so the scheduler orders those readers after the
    /// write. A node realized at its own lowering is registered before the
    /// call, and the call then carries a dependency on it (the scheduler's
    /// write-after-read edge), which no fusion or reordering may break.
    ///
    /// This holds for moved readers and readers that were already before
    /// the call alike. Readers are taken through views (a view is not
    /// computed; its readers are). Realizing a node that Inductor computes
    /// in a buffer anyway (an extern kernel, a graph output) costs nothing.
    /// Storage classes at the end of the walk are the coarsest, so the set
    /// is a superset of what is needed, never a subset.
    pub(super) fn realize_early_readers(&mut self) {
        if self.in_place.is_empty() {
            return;
        }
        let mut last_write: HashMap<usize, i64> = HashMap::default();
        for &(b, p) in self.in_place.writes() {
            let r = self.classes.find(b);
            let e = last_write.entry(r).or_insert(p);
            *e = (*e).max(p);
        }
        let gone: HashSet<NodeId> = self.plan.erased().collect();
        let mut marked: BTreeSet<NodeId> = BTreeSet::new();
        for i in 0..self.facts.graph.len() {
            let id = nid(i);
            if gone.contains(&id) || !self.facts.computed_by_inductor(id) {
                continue;
            }
            let mut operands = Vec::new();
            self.facts
                .graph
                .node(id)
                .for_each_operand(|o| operands.push(o));
            let p = self.pos.of(id);
            let early = operands.into_iter().any(|o| {
                reads(&self.facts.roles, id, o)
                    && last_write
                        .get(&self.classes.find(o))
                        .is_some_and(|&w| w > p)
            });
            if early {
                marked.insert(id);
                // A tuple-returning reader (`var_mean`) is realized through
                // its getitems: Inductor only realizes single tensors.
                for &u in self.facts.uses.users(id) {
                    if self.facts.graph.target_of(u).kind == TargetKind::Getitem
                        && !gone.contains(&u)
                    {
                        marked.insert(u);
                    }
                }
            }
        }
        marked.extend(self.model().unrealized_view_sources());
        self.plan.realize(marked);
    }
}

impl Model<'_, '_> {
    /// The computations whose memory an in-place call gets through views
    /// (its written buffers, and read slots sharing them), when they are
    /// nodes Inductor would compute lazily.
    ///
    /// Why: Inductor lowers a view of a value it has not realized as a lazy
    /// view (a `DtypeView` for `view(dtype)`, a reindexing `View`), and a
    /// fallback kernel given one gets a *copy* of it in a buffer of its own
    /// (`ExternKernel.realize_input`). The call then writes the copy, and
    /// two slots that share memory in the graph (`op(t, t.view(int32))`)
    /// get two memories. Realized where it stands, the source is a buffer,
    /// and every view of it lowers to a `ReinterpretView` of that buffer.
    fn unrealized_view_sources(&self) -> BTreeSet<NodeId> {
        let mut out = BTreeSet::new();
        for &n in self.in_place.given() {
            let ValueRef::Old(mut cur) = self.plan.resolve(n) else {
                continue;
            };
            // Given directly, a lazy value is realized into its own buffer
            // by the kernel's lowering, in place: only a view needs this.
            let mut through_a_view = false;
            while let Role::View { src, .. } = self.facts.roles[cur.idx()] {
                through_a_view = true;
                cur = match self.plan.resolve(src) {
                    ValueRef::Old(s) => s,
                    ValueRef::New(_) => break,
                };
            }
            if through_a_view && self.facts.computed_by_inductor(cur) {
                out.insert(cur);
            }
        }
        out
    }
}

impl Facts<'_> {
    /// True for a node Inductor lowers to a computation of its own (not a
    /// view, a metadata query, a mutation or a higher-order operator).
    pub(super) fn computed_by_inductor(&self, n: NodeId) -> bool {
        let node = self.graph.node(n);
        node.op == OpCode::CallFunction
            && self.graph.target_of(n).kind == TargetKind::Operator
            && matches!(self.roles[n.idx()], Role::Fresh | Role::Scatter { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{only_decision, plan_of};
    use super::*;
    use crate::analysis::test_graph::{add, n, neg, B};
    use crate::plan::{Action, Plan};

    fn realized(p: &Plan) -> Vec<NodeId> {
        p.realized_nodes().collect()
    }

    #[test]
    fn readers_before_an_inplace_write_are_computed_where_they_stand() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let r = b.call("r", &add(), vec![n(t), n(t)]);
        let v = b.slice("v", t, 0, 0, 2);
        let r2 = b.call("r2", &neg(), vec![n(v)]);
        let w = b.call("w", &neg(), vec![n(x)]);
        let af = b.scale_v2("af", t);
        let nt = b.getitem("nt", af, 1);
        let g = b.output(&[r, r2, w, nt]);
        let p = plan_of(&g);
        assert_eq!(only_decision(&p).action, Action::Reinplaced);
        // Not `v` (a view is not computed), not `w` or `t` (they read `x`,
        // which nothing writes).
        assert_eq!(realized(&p), [r, r2]);
        assert_eq!(p.report.realized, 2);
    }

    #[test]
    fn the_computation_a_call_writes_through_a_view_is_realized() {
        // `scale_(t[0:2])`: Inductor would lower the slice of a lazy `t` as
        // a view its kernel gets a copy of.
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let v = b.slice("v", t, 0, 0, 2);
        let af = b.scale_v2("af", v);
        let nv = b.getitem("nv", af, 1);
        let p = plan_of(&b.output(&[nv]));
        assert_eq!(only_decision(&p).action, Action::Reinplaced);
        assert_eq!(realized(&p), [t]);
    }

    #[test]
    fn nothing_is_realized_when_no_call_writes_in_place() {
        // `x` is never written back: the call writes a clone.
        let mut b = B::new();
        let x = b.input("x");
        let r = b.call("r", &neg(), vec![n(x)]);
        let af = b.scale_v2("af", x);
        let nx = b.getitem("nx", af, 1);
        let p = plan_of(&b.output(&[r, nx]));
        assert_eq!(only_decision(&p).action, Action::Cloned);
        assert!(realized(&p).is_empty());
    }

    #[test]
    fn only_operator_calls_with_fresh_results_are_computed_by_inductor() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let v = b.slice("v", t, 0, 0, 2);
        let af = b.scale_v2("af", t);
        let nt = b.getitem("nt", af, 1);
        let g = b.output(&[v, nt]);
        let cx = Context::new(&g);
        assert!(cx.facts.computed_by_inductor(t));
        for other in [x, v, af, nt] {
            assert!(!cx.facts.computed_by_inductor(other), "{other:?}");
        }
    }
}
