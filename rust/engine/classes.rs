//! Storage classes of the rewritten program: a union-find over nodes whose
//! values share memory (views, aliasing returns, re-inplaced results,
//! storage identity from metadata), with per class the nodes still read
//! later, the graph inputs it holds, and the newest version of its memory;
//! the version numbers handed out, and the first node seen with each
//! storage key from metadata. The walk (`walk.rs`) joins classes; the
//! checks read them.

use rustc_hash::FxHashMap as HashMap;

use crate::ir::NodeId;

/// The storage classes of every node of one graph.
#[derive(Debug)]
pub(super) struct StorageClasses {
    /// Union-find parent of each node's class.
    parent: Vec<u32>,
    /// Per class root, the nodes of the class still read later (members
    /// whose last reader is behind the call being planned are dropped for
    /// good: `hazards.rs`).
    members: Vec<Vec<NodeId>>,
    /// Per class root, the graph inputs in the class.
    inputs: Vec<Vec<NodeId>>,
    /// Per class root, the newest version (event) of its memory.
    latest: Vec<u32>,
    /// The next version number to hand out (0 is every node's first).
    next_version: u32,
    /// Storage key from metadata -> the first node seen with it.
    storage_keys: HashMap<u64, NodeId>,
}

impl StorageClasses {
    /// `n` nodes, each its own class, with no members, inputs or versions.
    pub(super) fn new(n: usize) -> Self {
        Self {
            parent: (0..n)
                .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
                .collect(),
            members: vec![Vec::new(); n],
            inputs: vec![Vec::new(); n],
            latest: vec![0; n],
            next_version: 1,
            storage_keys: HashMap::default(),
        }
    }

    /// A version number never handed out before: the memory a call or a
    /// write-back writes.
    pub(super) fn new_version(&mut self) -> u32 {
        let v = self.next_version;
        self.next_version += 1;
        v
    }

    /// The first node seen with storage key `key` (from metadata), or
    /// `None` when `n` is the first, which it is then recorded as.
    pub(super) fn first_with_storage_key(&mut self, key: u64, n: NodeId) -> Option<NodeId> {
        match self.storage_keys.get(&key).copied() {
            Some(first) => Some(first),
            None => {
                self.storage_keys.insert(key, n);
                None
            }
        }
    }

    /// The root of `n`'s class, read-only ([`Self::find`] gives the same
    /// root and shortens the path for the next reads).
    pub(super) fn root_of(&self, n: NodeId) -> usize {
        let mut r = n.idx();
        while self.parent[r] as usize != r {
            r = self.parent[r] as usize;
        }
        r
    }

    /// The root of `n`'s class (compressing the path to it).
    pub(super) fn find(&mut self, n: NodeId) -> usize {
        let r = self.root_of(n);
        let mut c = n.idx();
        while self.parent[c] as usize != r {
            let next = self.parent[c] as usize;
            self.parent[c] = u32::try_from(r).unwrap_or(u32::MAX);
            c = next;
        }
        r
    }

    /// Adds `n` to the members of the class rooted at `root`.
    pub(super) fn add_member(&mut self, root: usize, n: NodeId) {
        self.members[root].push(n);
    }

    /// The members of the class rooted at `root`: its nodes still read
    /// later, as far as [`Self::retain_members`] has pruned them.
    pub(super) fn members(&self, root: usize) -> &[NodeId] {
        &self.members[root]
    }

    /// Keeps the members of the class rooted at `root` that `keep` accepts.
    pub(super) fn retain_members(&mut self, root: usize, keep: impl FnMut(&NodeId) -> bool) {
        self.members[root].retain(keep);
    }

    /// The graph inputs in the class rooted at `root`.
    pub(super) fn inputs(&self, root: usize) -> &[NodeId] {
        &self.inputs[root]
    }

    /// Records graph input `n` in the class rooted at `root`.
    pub(super) fn add_input(&mut self, root: usize, n: NodeId) {
        self.inputs[root].push(n);
    }

    /// The newest version of the memory of the class rooted at `root`.
    pub(super) fn latest(&self, root: usize) -> u32 {
        self.latest[root]
    }

    /// Records `version` as the newest of the class rooted at `root`.
    pub(super) fn set_latest(&mut self, root: usize, version: u32) {
        self.latest[root] = version;
    }

    /// Joins the classes of `a` and `b` under the root of the one with more
    /// members (`a`'s on a tie); their members and inputs are joined and the
    /// newest version kept. Returns the root.
    pub(super) fn union(&mut self, a: NodeId, b: NodeId) -> usize {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra == rb {
            return ra;
        }
        let (big, small) = if self.members[ra].len() >= self.members[rb].len() {
            (ra, rb)
        } else {
            (rb, ra)
        };
        self.parent[small] = u32::try_from(big).unwrap_or(u32::MAX);
        let moved = std::mem::take(&mut self.members[small]);
        self.members[big].extend(moved);
        let moved_inputs = std::mem::take(&mut self.inputs[small]);
        self.inputs[big].extend(moved_inputs);
        self.latest[big] = self.latest[big].max(self.latest[small]);
        big
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: u32) -> NodeId {
        NodeId(i)
    }

    #[test]
    fn versions_are_never_handed_out_twice_and_never_zero() {
        let mut c = StorageClasses::new(2);
        assert_eq!((c.new_version(), c.new_version()), (1, 2));
    }

    #[test]
    fn the_first_node_seen_with_a_storage_key_stands_for_it() {
        let mut c = StorageClasses::new(4);
        assert_eq!(c.first_with_storage_key(7, id(1)), None);
        assert_eq!(c.first_with_storage_key(7, id(3)), Some(id(1)));
        assert_eq!(c.first_with_storage_key(8, id(2)), None);
        assert_eq!(c.first_with_storage_key(7, id(2)), Some(id(1)));
    }

    #[test]
    fn each_node_starts_alone_and_a_union_is_transitive() {
        let mut c = StorageClasses::new(5);
        assert_ne!(c.find(id(0)), c.find(id(1)));
        c.union(id(0), id(1));
        c.union(id(3), id(1));
        let r = c.find(id(3));
        assert_eq!(c.find(id(0)), r);
        assert_eq!(c.find(id(1)), r);
        assert_ne!(c.find(id(2)), r);
        assert_eq!(c.union(id(0), id(3)), r, "already one class");
    }

    #[test]
    fn a_union_joins_members_and_inputs_and_keeps_the_newest_version() {
        let mut c = StorageClasses::new(4);
        c.members[0] = vec![id(0)];
        c.inputs[0] = vec![id(0)];
        c.latest[0] = 2;
        c.members[2] = vec![id(2), id(3)];
        c.latest[2] = 1;
        let r = c.union(id(0), id(2));
        // The root is the class with more members.
        assert_eq!(r, 2);
        assert_eq!(c.members[r], [id(2), id(3), id(0)]);
        assert_eq!(c.inputs[r], [id(0)]);
        assert_eq!(c.latest[r], 2);
        assert!(c.members[0].is_empty() && c.inputs[0].is_empty());
    }

    #[test]
    fn find_compresses_the_path_to_the_root() {
        let mut c = StorageClasses::new(4);
        // Equal sizes: the first argument's root wins, so 3 -> 2 -> 1 -> 0.
        c.union(id(2), id(3));
        c.union(id(1), id(2));
        c.union(id(0), id(1));
        assert_eq!(c.parent[3], 2);
        assert_eq!(c.find(id(3)), 0);
        assert_eq!(c.parent[3], 0);
    }
}
