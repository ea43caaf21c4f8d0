//! Geometry over the storage classes (`classes.rs`): how a node's view
//! derives from its root (through its links, `links.rs`, or for a view not
//! walked yet through its view chain), the node whose layout a value has in
//! the rewritten program, and what a node the plan replaced now is.

use crate::analysis::alias::{Geometry, Role, ViewStep};
use crate::ir::NodeId;

use super::Model;

impl Model<'_, '_> {
    /// `n`'s geometry in the rewritten program (`Links::geometry`).
    pub(super) fn geometry(&self, n: NodeId) -> Geometry {
        self.links.geometry(n)
    }

    /// The node whose metadata gives `n`'s layout in the rewritten program:
    /// the original node the plan replaced it with, even where that one was
    /// replaced in turn by a new node of its layout (a removed write-back scatter
    /// stands for its base's memory, whose layout its own metadata need not
    /// have: a scatter into a strided view is contiguous), else `n` itself,
    /// or when it has none, the node it is the same memory and geometry as
    /// (a result bound to its buffer).
    pub(super) fn layout_source(&self, n: NodeId) -> NodeId {
        let mut cur = n;
        while let Some(m) = self.plan.stood_for(cur) {
            if m == cur {
                break;
            }
            cur = m;
        }
        while self.facts.graph.node(cur).meta.is_none() {
            match (self.links.same(cur), self.bindings.same_layout(cur)) {
                (Some(m), _) if m != cur => cur = m,
                (_, Some(m)) if m != cur => cur = m,
                _ => break,
            }
        }
        cur
    }

    /// Geometry of a view that may not be walked yet: its chain of view
    /// steps back to a node at or before position `p`, whose geometry is known.
    pub(super) fn view_geometry(&self, n: NodeId, p: i64) -> Geometry {
        let mut steps: Vec<&ViewStep> = Vec::new();
        let mut cur = n;
        while self.pos.of(cur) > p {
            match &self.facts.roles[cur.idx()] {
                Role::View { src, step, .. } => {
                    steps.extend(step.iter());
                    cur = *src;
                }
                _ => break,
            }
        }
        let mut g = self.geometry(cur);
        for s in steps.into_iter().rev() {
            g = g.then(s);
        }
        g
    }

    pub(super) fn overlapping_view(&self, n: NodeId) -> bool {
        let mut cur = n;
        while let Role::View {
            src, overlapping, ..
        } = &self.facts.roles[cur.idx()]
        {
            if *overlapping {
                return true;
            }
            cur = *src;
            if let Some(m) = self.links.same(cur) {
                cur = m;
            }
        }
        self.facts
            .graph
            .node(n)
            .meta
            .as_ref()
            .is_some_and(crate::ir::TensorMeta::has_overlapping_elements)
    }
}

/// The node at the top of `n`'s chain of structural views.
pub(super) fn structural_root(roles: &[Role], n: NodeId) -> NodeId {
    let mut cur = n;
    while let Role::View { src, .. } = &roles[cur.idx()] {
        cur = *src;
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::super::Context;
    use super::*;
    use crate::analysis::test_graph::{expand, ints, meta, n, neg, B};
    use crate::ir::Graph;

    fn walked(g: &Graph) -> Context<'_> {
        let mut cx = Context::new(g);
        cx.run().unwrap();
        cx
    }

    #[test]
    fn a_view_shares_its_source_class_and_a_fresh_result_does_not() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let s = b.slice("s", t, 0, 0, 2);
        let u = b.fresh("u", x);
        let xv = b.slice("xv", x, 1, 0, 4);
        let g = b.output(&[s, u, xv]);
        let mut cx = walked(&g);
        assert_eq!(cx.classes.find(s), cx.classes.find(t));
        assert_ne!(cx.classes.find(u), cx.classes.find(t));
        assert_ne!(cx.classes.find(t), cx.classes.find(x));
        // The class of a view of an input knows the input.
        let r = cx.classes.find(xv);
        assert_eq!(cx.classes.inputs(r), [x]);
        let rt = cx.classes.find(t);
        assert!(cx.classes.inputs(rt).is_empty());
    }

    #[test]
    fn nodes_with_one_storage_key_share_a_class_without_a_view_link() {
        let keyed = |k| {
            Some(crate::ir::TensorMeta {
                storage: Some(k),
                ..meta(&[4, 8])
            })
        };
        let mut b = B::new();
        let x = b.input("x");
        let a = b.call_meta("a", &neg(), vec![n(x)], keyed(7));
        let c = b.call_meta("c", &neg(), vec![n(x)], keyed(7));
        let d = b.call_meta("d", &neg(), vec![n(x)], keyed(8));
        let g = b.output(&[a, c, d]);
        let mut cx = walked(&g);
        assert_eq!(cx.classes.find(a), cx.classes.find(c));
        assert_ne!(cx.classes.find(a), cx.classes.find(d));
    }

    #[test]
    fn geometry_composes_the_steps_from_the_root() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let s = b.slice("s", t, 0, 0, 2);
        let s2 = b.slice("s2", s, 1, 4, 8);
        let g = b.output(&[s2]);
        let cx = walked(&g);
        let slice = |dim, start, end| ViewStep::Slice {
            dim,
            start,
            end,
            step: 1,
        };
        let geom = cx.model().geometry(s2);
        assert_eq!(geom.root, t);
        assert_eq!(geom.steps, [slice(0, 0, 2), slice(1, 4, 8)]);
        assert!(cx.model().geometry(t).steps.is_empty());
        assert_eq!(structural_root(&cx.facts.roles, s2), t);
        // Before the walk reaches a view, its geometry comes from the chain
        // of view nodes back to a node already placed.
        let fresh = Context::new(&g);
        assert_eq!(
            fresh.model().view_geometry(s2, fresh.pos.of(t)).steps.len(),
            2
        );
    }

    #[test]
    fn an_expanded_view_and_views_of_it_may_overlap() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let s = b.slice("s", t, 0, 0, 1);
        let e = b.call("e", &expand(), vec![n(s), ints(&[4, 8])]);
        let es = b.slice("es", e, 0, 0, 2);
        let g = b.output(&[es]);
        let cx = walked(&g);
        assert!(!cx.model().overlapping_view(s));
        assert!(cx.model().overlapping_view(e));
        assert!(cx.model().overlapping_view(es));
    }
}
