//! After the walk: the nodes Inductor must compute where they stand, because
//! an in-place call after them writes memory they read.

use super::*;

impl Context<'_> {
    /// Marks every node that reads memory an in-place call later writes,
    /// and stands before that call, to be computed where it stands.
    ///
    /// Why: the rewritten graph is right in FX order, but Inductor computes
    /// a pointwise or reduction node lazily, inside the kernel of whichever
    /// user first needs it in a buffer. When that user comes after the
    /// in-place call, the node reads the new value. Inductor does realize the
    /// pending readers of a buffer when a fallback kernel mutates it
    /// (`GraphLowering.mark_buffer_mutated`), but only after the kernel has
    /// registered its own operation (`ExternKernelAlloc.__init__` runs before
    /// `MutationOutput`), so the scheduler orders those readers after the
    /// write. A node realized at its own lowering is registered before the
    /// call, and the call then carries a dependency on it (the scheduler's
    /// write-after-read edge), which no fusion or reordering may break.
    ///
    /// The rule covers moved readers and readers that were already before
    /// the call alike. Readers are taken through views (a view is not
    /// computed; its readers are). Realizing a node that Inductor computes
    /// in a buffer anyway (an extern kernel, a graph output) costs nothing.
    /// Storage classes at the end of the walk are the coarsest, so the set
    /// is a superset of what is needed, never a subset.
    pub(super) fn realize_early_readers(&mut self) {
        if self.writes.is_empty() {
            return;
        }
        let mut last_write: HashMap<usize, i64> = HashMap::default();
        for (b, p) in std::mem::take(&mut self.writes) {
            let r = self.find(b);
            let e = last_write.entry(r).or_insert(p);
            *e = (*e).max(p);
        }
        let mut gone: HashSet<NodeId> = HashSet::default();
        for e in &self.edits {
            if let Edit::Erase { node } = e {
                gone.insert(*node);
            }
        }
        let mut marked: BTreeSet<NodeId> = BTreeSet::new();
        for i in 0..self.graph.len() {
            let id = nid(i);
            if gone.contains(&id) || !self.computed_by_inductor(id) {
                continue;
            }
            let mut operands = Vec::new();
            self.graph.node(id).for_each_operand(|o| operands.push(o));
            let p = self.pos[i];
            let early = operands.into_iter().any(|o| {
                reads(&self.roles, id, o) && last_write.get(&self.find(o)).is_some_and(|&w| w > p)
            });
            if early {
                marked.insert(id);
                // A tuple-returning reader (`var_mean`) is realized through
                // its getitems: Inductor only realizes single tensors.
                for &u in self.uses.users(id) {
                    if self.graph.target_of(u).kind == TargetKind::Getitem && !gone.contains(&u) {
                        marked.insert(u);
                    }
                }
            }
        }
        self.report.realized = marked.len();
        self.edits
            .extend(marked.into_iter().map(|node| Edit::Realize { node }));
    }

    /// True for a node Inductor lowers to a computation of its own (not a
    /// view, a metadata query, a mutation or a higher-order operator).
    pub(super) fn computed_by_inductor(&self, n: NodeId) -> bool {
        let node = self.graph.node(n);
        node.op == OpCode::CallFunction
            && self.graph.target_of(n).kind == TargetKind::Operator
            && matches!(self.roles[n.idx()], Role::Fresh | Role::Scatter { .. })
    }
}
