//! Positions: where each node stands in the *rewritten* order. Node `i` is
//! at `2 * i`; a node moved ahead of the call at position `p` gets `p - 1`,
//! so it sorts after everything originally before the call and before it.

use crate::ir::NodeId;

/// The position of every node of the graph in the rewritten order.
#[derive(Debug)]
pub(super) struct Positions(Vec<i64>);

impl Positions {
    /// The graph's own order, for `n` nodes.
    pub(super) fn new(n: usize) -> Self {
        Self((0..n).map(|i| 2 * i as i64).collect())
    }

    /// The position of `n`.
    pub(super) fn of(&self, n: NodeId) -> i64 {
        self.0[n.idx()]
    }

    /// Moves `m` just ahead of `call` (after everything originally before
    /// it); returns `m`'s position before the move.
    pub(super) fn move_ahead_of(&mut self, m: NodeId, call: NodeId) -> i64 {
        let before = self.0[m.idx()];
        self.0[m.idx()] = self.0[call.idx()] - 1;
        before
    }

    /// Puts `m` back at position `p` (what [`Self::move_ahead_of`] returned).
    pub(super) fn restore(&mut self, m: NodeId, p: i64) {
        self.0[m.idx()] = p;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_node_sorts_between_the_call_and_everything_before_it() {
        let mut pos = Positions::new(6);
        let (before, call, moved) = (NodeId(2), NodeId(3), NodeId(5));
        assert_eq!(pos.move_ahead_of(moved, call), 10);
        assert!(pos.of(before) < pos.of(moved) && pos.of(moved) < pos.of(call));
        pos.restore(moved, 10);
        assert_eq!(pos.of(moved), 10);
    }
}
