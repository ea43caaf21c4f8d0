//! Geometry links: per node, how its geometry derives from another node's
//! (its own root, the same memory and geometry as another node, or one view
//! step from its source). A node's geometry is found by following links to
//! a root, so it reflects the rewritten program (a re-inplaced result has
//! its buffer's geometry) and not only the view chains of the graph.
//!
//! The walk links each node when it reaches it; the v1 write-back chain
//! search links nodes not walked yet, because the geometries it compares
//! run through them, and takes its links back if the chain is dropped:
//! links are journaled (`journal.rs`).

use crate::analysis::alias::{Geometry, ViewStep};
use crate::ir::NodeId;

use super::journal::{Checkpoint, Journaled};

/// How a node's geometry derives from another node's.
#[derive(Clone, Debug, PartialEq)]
enum Link {
    /// The node's geometry starts at itself.
    Root,
    /// The same memory and geometry as the node ([`Links::same_as`] links
    /// to where that node's own `Same` link points, so chains stay short).
    Same(NodeId),
    /// One view step from the node.
    Step(NodeId, ViewStep),
}

/// The geometry link of every node of one graph.
#[derive(Debug)]
pub(super) struct Links(Journaled<Link>);

impl Links {
    /// `n` nodes, each its own root.
    pub(super) fn new(n: usize) -> Self {
        Self(Journaled::new(vec![Link::Root; n]))
    }

    /// `n`'s geometry starts at itself (a fresh value, a clone).
    pub(super) fn set_root(&mut self, n: NodeId) {
        self.0.set(n, Link::Root);
    }

    /// `n` is the same memory with the same geometry as `of`.
    pub(super) fn same_as(&mut self, n: NodeId, of: NodeId) {
        let target = self.same_target(of);
        self.0.set(n, Link::Same(target));
    }

    /// `n` is `src` seen through `step`; no step is the same geometry.
    pub(super) fn view_of(&mut self, n: NodeId, src: NodeId, step: Option<ViewStep>) {
        match step {
            None => self.same_as(n, src),
            Some(s) => self.0.set(n, Link::Step(src, s)),
        }
    }

    /// The node `n` is linked as the same memory and geometry as, if any.
    pub(super) fn same(&self, n: NodeId) -> Option<NodeId> {
        match self.0.get(n) {
            Link::Same(m) => Some(*m),
            _ => None,
        }
    }

    fn same_target(&self, n: NodeId) -> NodeId {
        self.same(n).unwrap_or(n)
    }

    /// `n`'s geometry: the root its links lead to and the view steps on
    /// the way.
    pub(super) fn geometry(&self, n: NodeId) -> Geometry {
        let mut steps_rev: Vec<&ViewStep> = Vec::new();
        let mut cur = n;
        loop {
            match self.0.get(cur) {
                Link::Root => break,
                Link::Same(m) => cur = *m,
                Link::Step(m, s) => {
                    steps_rev.push(s);
                    cur = *m;
                }
            }
        }
        let mut g = Geometry {
            root: cur,
            steps: Vec::new(),
        };
        for s in steps_rev.into_iter().rev() {
            g = g.then(s);
        }
        g
    }

    /// Starts recording links ([`Journaled::checkpoint`]).
    pub(super) fn checkpoint(&mut self) -> Checkpoint {
        self.0.checkpoint()
    }

    /// Keeps the links set since `cp` ([`Journaled::commit`]).
    pub(super) fn commit(&mut self, cp: Checkpoint) {
        self.0.commit(cp);
    }

    /// Takes back the links set since `cp` ([`Journaled::rollback`]).
    pub(super) fn rollback(&mut self, cp: Checkpoint) {
        self.0.rollback(cp);
    }
}

#[cfg(test)]
mod tests {
    use super::{Link, Links};
    use crate::analysis::alias::{Geometry, ViewStep};
    use crate::ir::NodeId;

    fn select(index: i64) -> ViewStep {
        ViewStep::Select { dim: 0, index }
    }

    fn all(l: &Links, n: u32) -> Vec<Link> {
        (0..n).map(|i| l.0.get(NodeId(i)).clone()).collect()
    }

    #[test]
    fn a_geometry_follows_same_links_and_collects_steps_outermost_first() {
        let mut l = Links::new(5);
        let (x, v, r, w) = (NodeId(0), NodeId(1), NodeId(2), NodeId(3));
        l.view_of(v, x, Some(select(1)));
        l.same_as(r, v);
        l.view_of(w, r, Some(select(2)));
        assert_eq!(
            l.geometry(w),
            Geometry {
                root: x,
                steps: vec![select(1), select(2)],
            }
        );
        assert_eq!(l.geometry(NodeId(4)).root, NodeId(4));
    }

    #[test]
    fn same_links_point_at_the_end_of_the_chain() {
        let mut l = Links::new(4);
        l.same_as(NodeId(1), NodeId(0));
        l.view_of(NodeId(2), NodeId(1), None);
        l.same_as(NodeId(3), NodeId(2));
        assert_eq!(l.same(NodeId(2)), Some(NodeId(0)));
        assert_eq!(l.same(NodeId(3)), Some(NodeId(0)));
        assert_eq!(l.same(NodeId(0)), None);
    }

    #[test]
    fn a_rollback_restores_the_links_and_a_commit_keeps_them() {
        let mut l = Links::new(4);
        l.view_of(NodeId(1), NodeId(0), Some(select(0)));
        let before = all(&l, 4);
        let cp = l.checkpoint();
        l.same_as(NodeId(2), NodeId(1));
        l.set_root(NodeId(1));
        l.view_of(NodeId(3), NodeId(2), Some(select(3)));
        l.rollback(cp);
        assert_eq!(all(&l, 4), before);
        let cp = l.checkpoint();
        l.same_as(NodeId(3), NodeId(1));
        l.commit(cp);
        assert_eq!(l.geometry(NodeId(3)), l.geometry(NodeId(1)));
        assert_eq!(l.same(NodeId(3)), Some(NodeId(1)));
    }
}
