//! A per-node table whose changes can be taken back. Deciding a call
//! changes walk state that its own checks read (readers moved ahead of it,
//! geometry links of a v1 write-back chain) before it knows whether the
//! call, or the storage class that made them, is written in place; the
//! changes made since a [`Checkpoint`] are recorded so that
//! [`Journaled::rollback`] restores exactly the state at the checkpoint,
//! and no caller keeps its own list of previous values.
//!
//! A journal rather than an overlay: reads stay one index into a flat
//! vector (positions and links are read on the walk's hot path), and
//! changes outside any checkpoint (the walk itself) record nothing.

use crate::ir::NodeId;

/// The values of every node, with the changes since the oldest open
/// checkpoint.
#[derive(Debug)]
pub(super) struct Journaled<T> {
    values: Vec<T>,
    /// Each change made while a checkpoint is open: the node and the value
    /// it replaced, oldest first.
    undo: Vec<(NodeId, T)>,
    /// Checkpoints taken and not yet committed or rolled back.
    open: usize,
}

/// A point [`Journaled::rollback`] can return to. Checkpoints nest and
/// are closed newest first, each exactly once (by commit or rollback): the
/// token is not `Clone`, and closing consumes it.
#[derive(Debug)]
#[must_use = "a checkpoint is closed by commit or rollback"]
pub(super) struct Checkpoint {
    /// Length of the undo list when it was taken.
    len: usize,
    /// Number of checkpoints open before it, to check the nesting.
    depth: usize,
}

impl<T> Journaled<T> {
    /// A table of `values`, one per node, with no checkpoint open.
    pub(super) fn new(values: Vec<T>) -> Self {
        Self {
            values,
            undo: Vec::new(),
            open: 0,
        }
    }

    /// The value of `n`.
    pub(super) fn get(&self, n: NodeId) -> &T {
        &self.values[n.idx()]
    }

    /// Gives `n` the value `value`, recorded when a checkpoint is open.
    pub(super) fn set(&mut self, n: NodeId, value: T) {
        let previous = std::mem::replace(&mut self.values[n.idx()], value);
        if self.open > 0 {
            self.undo.push((n, previous));
        }
    }

    /// Starts recording; the changes from here on are kept by
    /// [`Self::commit`] or undone by [`Self::rollback`].
    pub(super) fn checkpoint(&mut self) -> Checkpoint {
        let cp = Checkpoint {
            len: self.undo.len(),
            depth: self.open,
        };
        self.open += 1;
        cp
    }

    /// Keeps the changes since `cp`. Inside an outer checkpoint they stay
    /// recorded, so that rolling back the outer one still undoes them.
    pub(super) fn commit(&mut self, cp: Checkpoint) {
        self.close(&cp);
        if self.open == 0 {
            self.undo.clear();
        }
    }

    /// Restores every value changed since `cp`, newest change first, so a
    /// node changed twice gets the value it had at the checkpoint.
    pub(super) fn rollback(&mut self, cp: Checkpoint) {
        self.close(&cp);
        for (n, previous) in self.undo.drain(cp.len..).rev() {
            self.values[n.idx()] = previous;
        }
    }

    fn close(&mut self, cp: &Checkpoint) {
        debug_assert_eq!(cp.depth + 1, self.open, "checkpoints close newest first");
        debug_assert!(cp.len <= self.undo.len());
        self.open -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::Journaled;
    use crate::ir::NodeId;

    fn table() -> Journaled<i64> {
        Journaled::new(vec![10, 11, 12, 13])
    }

    fn values(t: &Journaled<i64>) -> Vec<i64> {
        (0..4).map(|i| *t.get(NodeId(i))).collect()
    }

    #[test]
    fn a_rollback_restores_exactly_the_state_at_the_checkpoint() {
        let mut t = table();
        t.set(NodeId(3), 30);
        let before = values(&t);
        let cp = t.checkpoint();
        t.set(NodeId(1), 1);
        t.set(NodeId(2), 2);
        t.set(NodeId(1), 100);
        assert_eq!(values(&t), [10, 100, 2, 30]);
        t.rollback(cp);
        assert_eq!(values(&t), before);
    }

    #[test]
    fn a_commit_keeps_the_changes_and_forgets_them() {
        let mut t = table();
        let cp = t.checkpoint();
        t.set(NodeId(0), 0);
        t.commit(cp);
        assert_eq!(values(&t), [0, 11, 12, 13]);
        assert!(t.undo.is_empty());
        // A later rollback goes back to its own checkpoint, not further.
        let cp = t.checkpoint();
        t.set(NodeId(2), 2);
        t.rollback(cp);
        assert_eq!(values(&t), [0, 11, 12, 13]);
    }

    #[test]
    fn changes_outside_a_checkpoint_are_not_recorded() {
        let mut t = table();
        t.set(NodeId(0), 0);
        assert!(t.undo.is_empty());
    }

    #[test]
    fn an_inner_commit_is_undone_by_the_outer_rollback() {
        let mut t = table();
        let outer = t.checkpoint();
        t.set(NodeId(0), 0);
        let kept = t.checkpoint();
        t.set(NodeId(1), 1);
        t.commit(kept);
        let dropped = t.checkpoint();
        t.set(NodeId(2), 2);
        t.set(NodeId(0), 5);
        t.rollback(dropped);
        assert_eq!(values(&t), [0, 1, 12, 13], "the inner commit stays");
        t.rollback(outer);
        assert_eq!(values(&t), [10, 11, 12, 13]);
        assert!(t.undo.is_empty());
    }
}
