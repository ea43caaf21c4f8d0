//! The in-place writers already in the graph as it arrives: the `copy_`
//! write-back of each mutated graph input, the memory other in-place
//! operators write (never re-inplaced into: the engine does not order
//! against them), and how many such writers stand before each node (a
//! reader moved ahead of a call must not cross one).

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::storage::structural_root;
use crate::analysis::alias::Role;
use crate::ir::NodeId;

/// The in-place writers of one graph, found once before the walk.
#[derive(Debug, Default)]
pub(super) struct Writers {
    /// Graph input -> its `copy_` write-back epilogue (the first one).
    writeback: HashMap<NodeId, NodeId>,
    /// Roots of memory that an in-place operator already in the graph
    /// writes.
    foreign: HashSet<NodeId>,
    /// Per node index `i`, how many in-place writers (`copy_` write-backs
    /// and other mutating calls) stand before node `i`; one entry more than
    /// there are nodes.
    before: Vec<u32>,
}

impl Writers {
    /// The writers of the graph whose nodes have `roles`.
    pub(super) fn of(roles: &[Role]) -> Self {
        let mut w = Self {
            before: Vec::with_capacity(roles.len() + 1),
            ..Self::default()
        };
        w.before.push(0);
        for (i, role) in roles.iter().enumerate() {
            let writes = matches!(
                role,
                Role::InputWriteBack { .. } | Role::OtherMutation { .. }
            );
            w.before.push(w.before[i] + u32::from(writes));
            match role {
                Role::InputWriteBack { dst, .. } => {
                    w.writeback.entry(*dst).or_insert(super::nid(i));
                }
                Role::OtherMutation { written } => {
                    for &n in written {
                        w.foreign.insert(structural_root(roles, n));
                    }
                }
                _ => {}
            }
        }
        w
    }

    /// The `copy_` write-back of graph input `input` (the first one).
    pub(super) fn writeback_of(&self, input: NodeId) -> Option<NodeId> {
        self.writeback.get(&input).copied()
    }

    /// True when an in-place operator already in the graph writes the
    /// memory whose structural root is `root`.
    pub(super) fn writes_foreign(&self, root: NodeId) -> bool {
        self.foreign.contains(&root)
    }

    /// True when an in-place writer stands after node `af` and before node
    /// `n`, a node after `af`: `n` moved ahead of `af` would cross it.
    pub(super) fn between(&self, n: NodeId, af: NodeId) -> bool {
        self.before[n.idx()] != self.before[af.idx() + 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::alias::classify;
    use crate::analysis::test_graph::{add_, copy_, n, B};

    #[test]
    fn the_first_write_back_of_each_input_and_the_roots_others_write() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let v = b.slice("v", t, 0, 0, 2);
        let first = b.call("first", &copy_(), vec![n(x), n(t)]);
        let w = b.call("w", &add_(), vec![n(v), n(x)]);
        let second = b.call("second", &copy_(), vec![n(x), n(t)]);
        let g = b.output(&[first, w, second]);
        let writers = Writers::of(&classify(&g));
        assert_eq!(writers.writeback.get(&x), Some(&first));
        assert_eq!(writers.writeback.len(), 1);
        // The view `v` is written: its root `t` is foreign.
        assert_eq!(writers.foreign.iter().copied().collect::<Vec<_>>(), [t]);
        // x, t, v, first | w | second | output.
        assert_eq!(writers.before, [0, 0, 0, 0, 1, 2, 3, 3]);
        // `w` stands between `first` and `second`, nothing between `first`
        // and `w`, nor between `t` and `v`.
        assert!(writers.between(second, first));
        assert!(!writers.between(w, first));
        assert!(!writers.between(v, t));
    }
}
