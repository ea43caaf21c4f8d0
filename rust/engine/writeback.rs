//! Write-backs: v1 scatter chains that put a re-inplaced view's new value
//! back into its base (removed when they are pure write-backs), and the
//! `copy_` epilogue of a mutated graph input.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::analysis::alias::{Geometry, Role, ViewStep};
use crate::forms::call::{MutationCall, ResultSlot};
use crate::ir::NodeId;
use crate::plan::{Callee, MetaSource, PlanArg, ValueRef};

use super::layout::strided_layout;
use super::{Context, Facts, Model};

/// A write-back chain: each scatter, with the base of its chain and whether
/// it writes back exactly the new values (then it can go).
pub(super) type ScatterChain = BTreeMap<NodeId, (NodeId, bool)>;

/// True when two static layouts (sizes, strides, storage offset) address
/// the same elements in the same order: equal sizes and offsets, and equal
/// strides on every dimension of more than one index. A size-1 dimension's
/// stride only ever multiplies index 0, so views that differ there alone
/// are one tensor to a copy: v1 replays a write of `x.t().reshape(-1)` on a
/// `(1, 8)` input `x` as a view with strides `(1, 1)`, where `x` has `(8, 1)`.
fn same_elements(a: &(Vec<i64>, Vec<i64>, i64), b: &(Vec<i64>, Vec<i64>, i64)) -> bool {
    let ((size, sa, oa), (size_b, sb, ob)) = (a, b);
    size == size_b
        && oa == ob
        && sa.len() == size.len()
        && sb.len() == size.len()
        && size
            .iter()
            .zip(sa.iter().zip(sb))
            .all(|(&n, (x, y))| n == 1 || x == y)
}

impl Context<'_> {
    /// v1 write-back elimination: the scatters that put the new values of the
    /// re-inplaced views of class `root` back into their base. Returns the
    /// chain (node -> (chain base, exact)) when every scatter can go, with
    /// the geometry links it gave the nodes on the way kept (journaled, so
    /// an enclosing rollback still takes them back); `None`, and every link
    /// as it was, when the pattern is not provably a pure write-back. The
    /// links are set during the search because the geometries it compares
    /// run through them.
    pub(super) fn scatter_chain(
        &mut self,
        call: &MutationCall,
        accepted: &[usize],
        root: usize,
    ) -> Option<ScatterChain> {
        let cp = self.links.checkpoint();
        let chain = self.search_scatter_chain(call, accepted, root);
        match chain {
            Some(_) => self.links.commit(cp),
            None => self.links.rollback(cp),
        }
        chain
    }

    fn search_scatter_chain(
        &mut self,
        call: &MutationCall,
        accepted: &[usize],
        root: usize,
    ) -> Option<ScatterChain> {
        let af = call.node;
        let mut chain: ScatterChain = BTreeMap::new();
        let mut pending_of: HashMap<NodeId, Vec<usize>> = HashMap::default();
        let mut exact_src: HashSet<NodeId> = HashSet::default();
        let arg_geom: Vec<(usize, Geometry)> = accepted
            .iter()
            .map(|&b| (b, self.model().geometry(call.buffers[b].node)))
            .collect();
        let mut queue: BTreeSet<NodeId> = BTreeSet::new();
        for &u in self.facts.uses.users(af) {
            if let Role::AfResult { index, .. } = self.facts.roles[u.idx()] {
                if let Some(ResultSlot::Buffer(b)) = call.results.get(index) {
                    if accepted.contains(b) {
                        exact_src.insert(u);
                        self.links.same_as(u, call.buffers[*b].node);
                        self.facts.queue_users_through_views(u, &mut queue);
                    }
                }
            }
        }
        let latest = self.classes.latest(root);
        let p = self.pos.of(af);
        while let Some(sc) = queue.pop_first() {
            let Role::Scatter { base, src, step } = self.facts.roles[sc.idx()].clone() else {
                continue;
            };
            if chain.contains_key(&sc) {
                continue;
            }
            // The source: a new value, or a view of one taken after the call
            // (`squeeze` undoing the `unsqueeze` of the written argument).
            let Some(src_geom) = self.model().geometry_through_views(src, &exact_src) else {
                continue;
            };
            let mut pending = if let Some(p) = pending_of.get(&base) {
                p.clone()
            } else {
                // The base: the buffer's memory before the call, or a view
                // of it taken after the call (the same `reshape` the written
                // argument was cut through, made again for the write-back).
                let anchor = self.model().view_anchor(base, p)?;
                if self.classes.find(anchor) != root || self.versions.of(anchor) != latest {
                    return None;
                }
                self.link_views_ahead(base, p);
                accepted.to_vec()
            };
            if self.model().geometry(base).then(&step) != src_geom {
                return None;
            }
            pending.retain(|b| {
                let g = &arg_geom.iter().find(|(x, _)| x == b).map(|(_, g)| g);
                !g.is_some_and(|g| g.root == src_geom.root && g.steps.starts_with(&src_geom.steps))
            });
            self.links.same_as(sc, base);
            let geom = self.model().geometry(sc);
            let exact = pending.iter().all(|b| {
                arg_geom
                    .iter()
                    .find(|(x, _)| x == b)
                    .is_some_and(|(_, g)| g.provably_disjoint(&geom))
            });
            let chain_base = chain.get(&base).map_or(base, |(cb, _)| *cb);
            chain.insert(sc, (chain_base, exact));
            pending_of.insert(sc, pending);
            if exact {
                exact_src.insert(sc);
            }
            self.facts.queue_users_through_views(sc, &mut queue);
        }
        for (sc, (_, exact)) in &chain {
            if !exact
                && self
                    .facts
                    .uses
                    .users(*sc)
                    .iter()
                    .any(|u| !chain.contains_key(u))
            {
                return None;
            }
            // A removed scatter's users read the base instead: the same
            // elements, but another storage. A view that addresses the
            // storage (`as_strided`, or one the engine cannot see into)
            // would then read other elements (issue 30's minimal input).
            if self.facts.storage_addressed_through_views(*sc) {
                return None;
            }
        }
        Some(chain)
    }

    /// Gives the views between `n` and its anchor (not walked yet) the
    /// links the walk will give them, so that geometries through them
    /// resolve now.
    fn link_views_ahead(&mut self, n: NodeId, p: i64) {
        let mut chain = Vec::new();
        let mut cur = n;
        while self.pos.of(cur) > p {
            let Role::View { src, step, .. } = &self.facts.roles[cur.idx()] else {
                break;
            };
            chain.push((cur, *src, step.clone()));
            cur = *src;
        }
        for (v, src, step) in chain.into_iter().rev() {
            self.links.view_of(v, src, step);
        }
    }

    pub(super) fn plan_writeback(&mut self, copy: NodeId, dst: NodeId, src: NodeId) {
        let (rd, rs) = (self.classes.find(dst), self.classes.find(src));
        if rd == rs {
            // The same elements, proven by the view chain or, for views the
            // engine does not model (reshape round trips, transposes), by
            // static layouts of one dtype that address the same elements of
            // the same memory.
            let same_layout = match (
                strided_layout(self.facts.graph, src),
                strided_layout(self.facts.graph, dst),
            ) {
                (Some(a), Some(b)) => {
                    // Views of one root node (view and re-inplacing links only,
                    // never a may-alias union).
                    same_elements(&a, &b)
                        && self.facts.same_dtype(src, dst)
                        && self.model().geometry(src).root == self.model().geometry(dst).root
                }
                _ => false,
            };
            let same_geometry = same_layout
                || self.model().geometry(src) == self.model().geometry(dst)
                || self.model().same_bits_through_dtype_views(src, dst);
            if same_geometry && self.versions.of(src) == self.classes.latest(rd) {
                if !self.facts.uses.users(copy).is_empty() {
                    self.plan.replace(copy, ValueRef::Old(dst));
                }
                self.plan.erase(copy);
                self.plan.count_writeback_removed();
            } else {
                // The new value lives in the input's own memory under another
                // layout: copy through a temporary, never overlapping memory.
                let tmp = self.plan.insert(
                    copy,
                    Callee::Aten("aten::clone.default"),
                    vec![PlanArg::Ref(self.plan.resolve(src))],
                    vec![],
                    MetaSource::Compute,
                );
                let fresh = self.plan.insert(
                    copy,
                    Callee::Aten("aten::copy_.default"),
                    vec![
                        PlanArg::Ref(ValueRef::Old(dst)),
                        PlanArg::Ref(ValueRef::New(tmp)),
                    ],
                    vec![],
                    MetaSource::Compute,
                );
                self.plan.replace(copy, ValueRef::New(fresh));
                self.plan.erase(copy);
            }
        }
        let r = self.classes.union(copy, dst);
        let e = self.classes.new_version();
        self.classes.set_latest(r, e);
        self.versions.set(copy, e);
    }
}

impl Model<'_, '_> {
    /// Geometry of `n` when it is one of `exact` or a chain of
    /// non-overlapping views of one; `None` otherwise.
    pub(super) fn geometry_through_views(
        &self,
        n: NodeId,
        exact: &HashSet<NodeId>,
    ) -> Option<Geometry> {
        let mut steps: Vec<&ViewStep> = Vec::new();
        let mut cur = n;
        while !exact.contains(&cur) {
            match &self.facts.roles[cur.idx()] {
                Role::View {
                    src,
                    step,
                    overlapping: false,
                } => {
                    steps.extend(step.iter());
                    cur = *src;
                }
                _ => return None,
            }
        }
        let mut g = self.geometry(cur);
        for s in steps.into_iter().rev() {
            g = g.then(s);
        }
        Some(g)
    }

    /// The node at or before position `p` that `n` is a chain of
    /// non-overlapping views of (`n` itself when it is there already).
    pub(super) fn view_anchor(&self, n: NodeId, p: i64) -> Option<NodeId> {
        let mut cur = n;
        while self.pos.of(cur) > p {
            match &self.facts.roles[cur.idx()] {
                Role::View {
                    src,
                    overlapping: false,
                    ..
                } => cur = *src,
                _ => return None,
            }
        }
        Some(cur)
    }

    /// True when `src` is `dst`'s own elements seen through `view(dtype)`
    /// views of the same item size (which keep sizes and strides) and ends
    /// in `dst`'s dtype: `copy_(dst, src)` then copies every bit onto
    /// itself. The write-back of an input mutated through `x.view(int32)`
    /// comes back as `copy_(x, y.view(float32))` with `y` that int32 view.
    fn same_bits_through_dtype_views(&self, src: NodeId, dst: NodeId) -> bool {
        let meta = |n: NodeId| self.facts.graph.node(n).meta.as_ref();
        let (Some(ms), Some(md)) = (meta(src), meta(dst)) else {
            return false;
        };
        if ms.dtype.is_empty() || ms.dtype != md.dtype || ms.itemsize != md.itemsize {
            return false;
        }
        let reinterpreting = |step: &ViewStep| match step {
            ViewStep::Opaque(v) => {
                self.facts.graph.target_of(*v).name == "aten::view.dtype"
                    && meta(*v).is_some_and(|m| m.itemsize == md.itemsize && m.itemsize > 0)
            }
            _ => false,
        };
        let strip = |g: Geometry| Geometry {
            root: g.root,
            steps: g.steps.into_iter().filter(|s| !reinterpreting(s)).collect(),
        };
        let (gs, gd) = (strip(self.geometry(src)), strip(self.geometry(dst)));
        gs != self.geometry(src) && gs == gd
    }
}

impl Facts<'_> {
    /// True when a view of `n` (directly or through other views) addresses
    /// the storage rather than `n`'s elements: an `as_strided`, a view
    /// operator not known to be element-relative (`reshape(-1, 4, 64)`,
    /// which the engine does not model, is, and vLLM's attention reads the
    /// written-back `qkv` through it), or an `auto_functionalized_v2` that
    /// cuts a written view from `n` as a base by storage offset (left to
    /// Inductor, it is decomposed into that `as_strided`).
    fn storage_addressed_through_views(&self, n: NodeId) -> bool {
        self.uses
            .users(n)
            .iter()
            .any(|&u| match &self.roles[u.idx()] {
                Role::View { src, step, .. } if *src == n => {
                    step.as_ref()
                        .is_some_and(|s| s.addresses_storage(self.graph))
                        || self.storage_addressed_through_views(u)
                }
                Role::AutoFunctionalized => {
                    crate::forms::reinplace_v2::cuts_by_storage_offset_from(self.graph, u, n)
                }
                _ => false,
            })
    }

    /// Queues the users of `n`, and of the views of `n`, for the write-back
    /// chain search.
    pub(super) fn queue_users_through_views(&self, n: NodeId, queue: &mut BTreeSet<NodeId>) {
        for &u in self.uses.users(n) {
            queue.insert(u);
            if matches!(self.roles[u.idx()], Role::View { src, overlapping: false, .. } if src == n)
            {
                self.queue_users_through_views(u, queue);
            }
        }
    }

    /// True when both nodes have metadata of one dtype: a `copy_` between
    /// two dtypes converts values, whatever the layouts.
    fn same_dtype(&self, a: NodeId, b: NodeId) -> bool {
        let dtype = |n: NodeId| self.graph.node(n).meta.as_ref().map(|m| m.dtype.as_str());
        matches!((dtype(a), dtype(b)), (Some(x), Some(y)) if !x.is_empty() && x == y)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{erased, only_decision, plan_of};
    use super::*;
    use crate::analysis::test_graph::{
        copy_, ints, meta, n, neg, scale_, slice, slice_scatter, view_dtype, B,
    };
    use crate::ir::{ArgType, Value};
    use crate::plan::Action;
    use crate::plan::Edit;

    #[test]
    fn an_input_written_back_is_written_in_place_and_its_copy_goes() {
        let mut b = B::new();
        let x = b.input("x");
        let af = b.scale_v2("af", x);
        let nx = b.getitem("nx", af, 1);
        let c = b.call("c", &copy_(), vec![n(x), n(nx)]);
        let g = b.output(&[]);
        let p = plan_of(&g);
        assert_eq!(only_decision(&p).action, Action::Reinplaced);
        assert_eq!(p.report.writebacks_removed, 1);
        assert!(erased(&p).contains(&c));
    }

    /// Metadata of a `[s0, 8]` tensor of `dtype` (4 bytes an element): its
    /// layout is symbolic, so no static layout proves two views equal.
    fn symbolic(dtype: &str) -> crate::ir::TensorMeta {
        crate::ir::TensorMeta {
            dtype: dtype.into(),
            sizes: vec![crate::ir::Dim::Symbolic("s0".into()), 8.into()],
            strides: Some(vec![8.into(), 1.into()]),
            ..meta(&[4, 8])
        }
    }

    fn written_through_dtype_views(back: &str) -> (crate::ir::Graph, NodeId) {
        let mut b = B::new();
        let x = b.input("x");
        b.g.nodes[x.idx()].meta = Some(symbolic("float32"));
        let dt = |d: &str| Value::Dtype(d.into());
        let v = b.call_meta(
            "v",
            &view_dtype(),
            vec![n(x), dt("int32")],
            Some(symbolic("int32")),
        );
        let af = b.scale_v2("af", v);
        let nv = b.getitem("nv", af, 1);
        let v2 = b.call_meta(
            "v2",
            &view_dtype(),
            vec![n(nv), dt(back)],
            Some(symbolic(back)),
        );
        let c = b.call("c", &copy_(), vec![n(x), n(v2)]);
        (b.output(&[]), c)
    }

    #[test]
    fn an_input_written_through_a_dtype_view_needs_no_copy_back() {
        // `copy_(x, x.view(int32).view(float32))`: every bit onto itself.
        let (g, c) = written_through_dtype_views("float32");
        let p = plan_of(&g);
        assert_eq!(only_decision(&p).action, Action::Reinplaced);
        assert_eq!(p.report.writebacks_removed, 1);
        assert!(erased(&p).contains(&c));
        // Only the in-place call is inserted: no clone, no copy.
        let aten_inserts = p.edits.iter().filter(|e| {
            matches!(
                e,
                Edit::Insert {
                    callee: Callee::Aten(_),
                    ..
                }
            )
        });
        assert_eq!(aten_inserts.count(), 0, "{:?}", p.edits);
    }

    #[test]
    fn a_copy_back_that_converts_values_stays() {
        // Read back as int32 into a float32 input: `copy_` converts values.
        let (g, c) = written_through_dtype_views("int32");
        let p = plan_of(&g);
        assert_eq!(p.report.writebacks_removed, 0);
        let copies_again = p.edits.iter().any(|e| {
            matches!(e, Edit::Insert { callee: Callee::Aten(name), .. } if *name == "aten::copy_.default")
        });
        assert!(!erased(&p).contains(&c) || copies_again, "{:?}", p.edits);
    }

    /// A `(1, 8)` input written in place, then written back from a view of
    /// the written value the engine does not model (a permute), whose
    /// metadata gives `stride`.
    fn written_back_through_a_permute(stride: &[i64]) -> (crate::ir::Graph, NodeId) {
        let mut b = B::new();
        let x = b.input("x");
        b.g.nodes[x.idx()].meta = Some(meta(&[1, 8]));
        let af = b.scale_v2("af", x);
        let nx = b.getitem("nx", af, 1);
        let permute = crate::analysis::test_graph::op(
            "aten::permute.default",
            &[("self", ArgType::Tensor, "a"), ("dims", ArgType::Other, "")],
            &[(ArgType::Tensor, "a")],
        );
        let layout = crate::ir::TensorMeta {
            strides: Some(crate::ir::static_dims(stride)),
            ..meta(&[1, 8])
        };
        let v = b.call_meta("v", &permute, vec![n(nx), ints(&[0, 1])], Some(layout));
        let c = b.call("c", &copy_(), vec![n(x), n(v)]);
        (b.output(&[]), c)
    }

    #[test]
    fn a_copy_back_from_a_view_that_differs_only_in_a_size_1_stride_goes() {
        // Strides (1, 1) against the input's (8, 1): the same 8 elements.
        let (g, c) = written_back_through_a_permute(&[1, 1]);
        let p = plan_of(&g);
        assert_eq!(only_decision(&p).action, Action::Reinplaced);
        assert_eq!(p.report.writebacks_removed, 1);
        assert!(erased(&p).contains(&c));
    }

    #[test]
    fn a_copy_back_from_a_view_with_another_stride_on_a_longer_dimension_stays() {
        // Strides (8, 2): every other element, not the input's 8.
        let (g, c) = written_back_through_a_permute(&[8, 2]);
        let p = plan_of(&g);
        assert_eq!(p.report.writebacks_removed, 0);
        let copies_again = p.edits.iter().any(|e| {
            matches!(e, Edit::Insert { callee: Callee::Aten(name), .. } if *name == "aten::copy_.default")
        });
        assert!(erased(&p).contains(&c) && copies_again, "{:?}", p.edits);
    }

    #[test]
    fn layouts_address_the_same_elements_only_with_equal_strides_beyond_size_1() {
        let l = |size: &[i64], stride: &[i64], off: i64| (size.to_vec(), stride.to_vec(), off);
        assert!(same_elements(
            &l(&[1, 8], &[8, 1], 0),
            &l(&[1, 8], &[1, 1], 0)
        ));
        assert!(same_elements(
            &l(&[4, 1, 8], &[8, 8, 1], 8),
            &l(&[4, 1, 8], &[8, 32, 1], 8)
        ));
        assert!(!same_elements(
            &l(&[1, 8], &[8, 1], 0),
            &l(&[1, 8], &[8, 1], 8)
        ));
        assert!(!same_elements(
            &l(&[2, 8], &[8, 1], 0),
            &l(&[2, 8], &[1, 2], 0)
        ));
        assert!(!same_elements(
            &l(&[8, 1], &[1, 1], 0),
            &l(&[1, 8], &[1, 1], 0)
        ));
        assert!(!same_elements(
            &l(&[1, 8], &[8], 0),
            &l(&[1, 8], &[8, 1], 0)
        ));
    }

    /// `t[0:2]` written by a v1 call, then scattered back into `t[start:2+start]`.
    fn scatter_back(start: i64) -> (crate::ir::Graph, NodeId, NodeId) {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let int = Value::Int;
        let rows = vec![n(t), int(0), int(0), int(2), int(1)];
        let s = b.call_meta("s", &slice(), rows, Some(meta(&[2, 8])));
        let af = b.af(
            "af",
            false,
            &scale_(),
            vec![("x", n(s)), ("s", Value::Float(2.0))],
        );
        let ns = b.getitem("ns", af, 1);
        let sc = b.call(
            "sc",
            &slice_scatter(),
            vec![n(t), n(ns), int(0), int(start), int(start + 2), int(1)],
        );
        let r = b.call("r", &neg(), vec![n(sc)]);
        (b.output(&[r]), t, sc)
    }

    #[test]
    fn a_v1_scatter_of_the_written_view_back_into_its_base_is_removed() {
        let (g, t, sc) = scatter_back(0);
        let p = plan_of(&g);
        let d = only_decision(&p);
        assert_eq!((d.action, d.scatters_removed), (Action::Reinplaced, 1));
        assert!(p.edits.contains(&Edit::Replace {
            node: sc,
            with: ValueRef::Old(t)
        }));
        assert!(erased(&p).contains(&sc));
    }

    #[test]
    fn a_scatter_into_another_range_is_a_real_write_and_stays() {
        let (g, _, sc) = scatter_back(2);
        let p = plan_of(&g);
        // It reads the old base after the call and needs the new value: the
        // written slice is cloned instead.
        let d = only_decision(&p);
        assert_eq!((d.action, d.scatters_removed), (Action::Cloned, 0));
        assert!(!erased(&p).contains(&sc));
    }

    #[test]
    fn a_view_anchor_is_the_first_node_of_its_view_chain_already_placed() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let s = b.slice("s", t, 0, 0, 2);
        let s2 = b.slice("s2", s, 1, 0, 4);
        let r = b.call("r", &neg(), vec![n(s2)]);
        let g = b.output(&[r]);
        let cx = Context::new(&g);
        let at = |node: NodeId| cx.pos.of(node);
        assert_eq!(cx.model().view_anchor(s2, at(t)), Some(t));
        assert_eq!(cx.model().view_anchor(s2, at(s)), Some(s));
        assert_eq!(cx.model().view_anchor(s2, at(s2)), Some(s2));
        // Not a view: no anchor behind it.
        assert_eq!(cx.model().view_anchor(r, at(t)), None);
    }
}
