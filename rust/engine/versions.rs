//! Versions: which contents of its memory each node's value holds. A
//! storage class's memory gets a new version at each write the rewritten
//! program makes (`StorageClasses::new_version`); a node holds the version
//! that was newest where its value is taken, and a reader of an older one
//! than the class's newest is a hazard for an in-place write.

use crate::ir::NodeId;

/// Per node, the version of its class's memory the node's value holds.
#[derive(Debug)]
pub(super) struct Versions(Vec<u32>);

impl Versions {
    /// The version every memory has as the graph receives it, before any
    /// write.
    const FIRST: u32 = 0;

    /// `n` nodes, each holding its memory's first version.
    pub(super) fn new(n: usize) -> Self {
        Self(vec![Self::FIRST; n])
    }

    /// The version `n` holds.
    pub(super) fn of(&self, n: NodeId) -> u32 {
        self.0[n.idx()]
    }

    /// `n` holds version `v`.
    pub(super) fn set(&mut self, n: NodeId, v: u32) {
        self.0[n.idx()] = v;
    }

    /// True when `n` holds its memory as the graph received it, before any
    /// write of the rewritten program (the hazards of an input's write-back
    /// cut concern only such values).
    pub(super) fn is_first(&self, n: NodeId) -> bool {
        self.of(n) == Self::FIRST
    }
}

#[cfg(test)]
mod tests {
    use super::Versions;
    use crate::ir::NodeId;

    #[test]
    fn every_node_starts_at_the_first_version_and_a_write_changes_only_its_node() {
        let mut v = Versions::new(3);
        assert!((0..3).all(|i| v.is_first(NodeId(i))));
        v.set(NodeId(1), 4);
        assert_eq!(v.of(NodeId(1)), 4);
        assert!(!v.is_first(NodeId(1)));
        assert!(v.is_first(NodeId(0)) && v.is_first(NodeId(2)));
    }
}
