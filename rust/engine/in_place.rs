//! InPlaceWrites: what the rewritten program writes in place, recorded as
//! calls are emitted and read after the walk (`realize.rs`): every buffer
//! written with the position of the call writing it, and every tensor an
//! in-place call gets on its real memory (written buffers, and read slots
//! sharing them), whose view sources must be realized.

use crate::ir::NodeId;

/// The in-place writes of the plan so far.
#[derive(Debug, Default)]
pub(super) struct InPlaceWrites {
    /// Every buffer re-inplaced, with the position of the call writing it.
    writes: Vec<(NodeId, i64)>,
    /// The tensors in-place calls get on their real memory, in order.
    given: Vec<NodeId>,
}

impl InPlaceWrites {
    /// Records that the call at position `at` writes `buffer` in place.
    pub(super) fn write(&mut self, buffer: NodeId, at: i64) {
        self.writes.push((buffer, at));
        self.given.push(buffer);
    }

    /// Records that an in-place call gets read slot `read` on the memory it
    /// writes.
    pub(super) fn share(&mut self, read: NodeId) {
        self.given.push(read);
    }

    /// True when nothing is written in place.
    pub(super) fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// The buffers written and the positions of their writers, in order.
    pub(super) fn writes(&self) -> &[(NodeId, i64)] {
        &self.writes
    }

    /// The tensors in-place calls get on their real memory, in order.
    pub(super) fn given(&self) -> &[NodeId] {
        &self.given
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_buffer_is_given_on_its_memory_and_a_shared_read_only_given() {
        let mut w = InPlaceWrites::default();
        assert!(w.is_empty());
        w.write(NodeId(2), 6);
        w.share(NodeId(1));
        w.write(NodeId(4), 10);
        assert!(!w.is_empty());
        assert_eq!(w.writes(), [(NodeId(2), 6), (NodeId(4), 10)]);
        assert_eq!(w.given(), [NodeId(2), NodeId(1), NodeId(4)]);
    }
}
