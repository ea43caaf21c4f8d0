//! Positions: where each node stands in the *rewritten* order. Node `i` is
//! at `2 * i`; a node moved ahead of the call at position `p` gets `p - 1`,
//! so it sorts after everything originally before the call and before it.
//! Moves are journaled (`journal.rs`): a call or storage class that is not
//! written in place takes its moves back with [`Positions::rollback`].

use crate::ir::NodeId;

use super::journal::{Checkpoint, Journaled};

/// The position of every node of the graph in the rewritten order.
#[derive(Debug)]
pub(super) struct Positions(Journaled<i64>);

impl Positions {
    /// The graph's own order, for `n` nodes.
    pub(super) fn new(n: usize) -> Self {
        Self(Journaled::new((0..n).map(|i| 2 * i as i64).collect()))
    }

    /// The position of `n`.
    pub(super) fn of(&self, n: NodeId) -> i64 {
        *self.0.get(n)
    }

    /// Moves `m` just ahead of `call` (after everything originally before
    /// it).
    pub(super) fn move_ahead_of(&mut self, m: NodeId, call: NodeId) {
        let p = self.of(call) - 1;
        self.0.set(m, p);
    }

    /// Starts recording moves ([`Journaled::checkpoint`]).
    pub(super) fn checkpoint(&mut self) -> Checkpoint {
        self.0.checkpoint()
    }

    /// Keeps the moves since `cp` ([`Journaled::commit`]).
    pub(super) fn commit(&mut self, cp: Checkpoint) {
        self.0.commit(cp);
    }

    /// Takes back the moves since `cp` ([`Journaled::rollback`]).
    pub(super) fn rollback(&mut self, cp: Checkpoint) {
        self.0.rollback(cp);
    }
}

#[cfg(test)]
mod tests {
    use super::Positions;
    use crate::ir::NodeId;

    #[test]
    fn a_moved_node_sorts_between_the_call_and_everything_before_it() {
        let mut pos = Positions::new(6);
        let (before, call, moved) = (NodeId(2), NodeId(3), NodeId(5));
        pos.move_ahead_of(moved, call);
        assert!(pos.of(before) < pos.of(moved) && pos.of(moved) < pos.of(call));
    }

    #[test]
    fn a_rollback_puts_moved_nodes_back_and_a_commit_keeps_them() {
        let mut pos = Positions::new(6);
        let (call, a, b) = (NodeId(1), NodeId(4), NodeId(5));
        let cp = pos.checkpoint();
        pos.move_ahead_of(a, call);
        pos.move_ahead_of(b, call);
        pos.rollback(cp);
        assert_eq!((pos.of(a), pos.of(b)), (8, 10));
        let cp = pos.checkpoint();
        pos.move_ahead_of(b, call);
        pos.commit(cp);
        assert_eq!((pos.of(a), pos.of(b)), (8, 1));
    }
}
