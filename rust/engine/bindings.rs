//! Bindings: what each result of a planned auto_functionalized node stands
//! for in the rewritten program ([`Bind`]), recorded when the call is
//! planned and read when the walk reaches the result; the removed v1
//! scatters and the base memory they become; the first result bound to
//! each clone (later ones join its memory); and the buffer whose layout a
//! clone-bound result has.

use rustc_hash::FxHashMap as HashMap;

use crate::ir::NodeId;

/// What a result of a planned auto_functionalized node stands for.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Bind {
    /// The memory of `node`, at version `event`, with its geometry.
    Buffer { node: NodeId, event: u32 },
    /// A clone made by the plan of buffer `of`, with its layout; results
    /// bound to the same clone share memory.
    Clone { key: (NodeId, usize), of: NodeId },
    /// A view of `node`'s memory at version `event` with unknown geometry.
    Alias { node: NodeId, event: u32 },
    /// A fresh tensor.
    Fresh,
    /// A written list, element by element.
    List(Vec<Option<Bind>>),
    /// The node is itself a tensor (out= with one return); getitems index it.
    Tensor,
}

/// The bindings of one planning walk.
#[derive(Debug, Default)]
pub(super) struct Bindings {
    /// Per planned auto_functionalized node (or written list), what each
    /// result slot stands for.
    results: HashMap<NodeId, Vec<Bind>>,
    /// Removed v1 scatters -> (the base they become, the version written).
    scatters: HashMap<NodeId, (NodeId, u32)>,
    /// (call, buffer) -> the first result node bound to that buffer's clone.
    clone_reps: HashMap<(NodeId, usize), NodeId>,
    /// Results bound to a clone, and the buffer whose layout the clone has.
    same_layout: HashMap<NodeId, NodeId>,
}

impl Bindings {
    /// Records what the result slots of `node` (a planned call, or one of
    /// its written lists: one slot) stand for.
    pub(super) fn bind_results(&mut self, node: NodeId, binds: Vec<Bind>) {
        self.results.insert(node, binds);
    }

    /// What result `index` of `af` stands for, if `af` was planned.
    pub(super) fn result(&self, af: NodeId, index: usize) -> Option<Bind> {
        self.results.get(&af).and_then(|b| b.get(index)).cloned()
    }

    /// What item `item` of the written list `list` stands for.
    pub(super) fn list_item(&self, list: NodeId, item: usize) -> Option<Bind> {
        match self.results.get(&list).and_then(|b| b.first()) {
            Some(Bind::List(items)) => items.get(item).cloned().flatten(),
            _ => None,
        }
    }

    /// Records that the removed scatter `sc` is the memory of `base` at
    /// version `event`.
    pub(super) fn bind_scatter(&mut self, sc: NodeId, base: NodeId, event: u32) {
        self.scatters.insert(sc, (base, event));
    }

    /// The base and version a removed scatter stands for.
    pub(super) fn scatter(&self, sc: NodeId) -> Option<(NodeId, u32)> {
        self.scatters.get(&sc).copied()
    }

    /// Binds result `id` to the clone `key`, with the layout of buffer `of`:
    /// returns the first result already bound to that clone (whose memory
    /// `id` shares), or `None` when `id` is the first.
    pub(super) fn bind_clone(
        &mut self,
        id: NodeId,
        key: (NodeId, usize),
        of: NodeId,
    ) -> Option<NodeId> {
        self.same_layout.insert(id, of);
        match self.clone_reps.get(&key).copied() {
            Some(rep) => Some(rep),
            None => {
                self.clone_reps.insert(key, id);
                None
            }
        }
    }

    /// The buffer whose layout the clone bound to `n` has.
    pub(super) fn same_layout(&self, n: NodeId) -> Option<NodeId> {
        self.same_layout.get(&n).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(i: u32) -> NodeId {
        NodeId(i)
    }

    #[test]
    fn results_and_list_items_read_back_what_was_bound() {
        let mut b = Bindings::default();
        let buf = Bind::Buffer {
            node: n(0),
            event: 3,
        };
        b.bind_results(n(1), vec![Bind::Fresh, buf.clone()]);
        b.bind_results(n(2), vec![Bind::List(vec![None, Some(buf.clone())])]);
        assert_eq!(b.result(n(1), 1), Some(buf.clone()));
        assert_eq!(b.result(n(1), 2), None);
        assert_eq!(b.result(n(9), 0), None);
        assert_eq!(b.list_item(n(2), 1), Some(buf));
        assert_eq!(b.list_item(n(2), 0), None);
        assert_eq!(b.list_item(n(1), 0), None);
    }

    #[test]
    fn the_first_result_bound_to_a_clone_represents_it() {
        let mut b = Bindings::default();
        let key = (n(1), 0);
        assert_eq!(b.bind_clone(n(4), key, n(0)), None);
        assert_eq!(b.bind_clone(n(5), key, n(0)), Some(n(4)));
        assert_eq!(b.bind_clone(n(6), (n(1), 1), n(2)), None);
        assert_eq!(b.same_layout(n(5)), Some(n(0)));
        assert_eq!(b.same_layout(n(6)), Some(n(2)));
        assert_eq!(b.same_layout(n(0)), None);
    }

    #[test]
    fn a_removed_scatter_stands_for_its_base_at_a_version() {
        let mut b = Bindings::default();
        b.bind_scatter(n(3), n(0), 2);
        assert_eq!(b.scatter(n(3)), Some((n(0), 2)));
        assert_eq!(b.scatter(n(0)), None);
    }
}
