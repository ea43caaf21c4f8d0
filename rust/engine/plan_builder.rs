//! PlanBuilder: the plan under construction. Its methods are the only way
//! an edit is pushed or a report entry recorded, and it keeps what the plan
//! has made of each node so far: the value a replaced node now is
//! (replacements never chain), and the original node it stands for.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap as HashMap;

use crate::ir::NodeId;
use crate::plan::{Callee, Edit, MetaSource, NewId, NodeReport, Plan, PlanArg, Report, ValueRef};

/// The edits, new nodes and report of a plan being built.
///
/// Invariant: every `Replace` edit's value is resolved (it is never a node
/// that was itself replaced earlier), so replacements never chain.
#[derive(Debug)]
pub(super) struct PlanBuilder {
    /// The plan's edits so far, in order.
    edits: Vec<Edit>,
    /// Number of nodes the plan creates so far.
    new_nodes: u32,
    /// Nodes the plan replaced, and by what (resolved).
    replaced: HashMap<NodeId, ValueRef>,
    /// Nodes the plan replaced by an original node, and that node before
    /// its own replacement is followed: its layout is theirs in the
    /// rewritten program (`Model::layout_source`), also where it was
    /// itself replaced by a new node of its layout.
    stood_for: HashMap<NodeId, NodeId>,
    /// The report so far.
    report: Report,
}

impl PlanBuilder {
    /// An empty plan for a graph of `nodes` nodes.
    pub(super) fn new(nodes: usize) -> Self {
        Self {
            edits: Vec::new(),
            new_nodes: 0,
            replaced: HashMap::default(),
            stood_for: HashMap::default(),
            report: Report {
                nodes,
                ..Report::default()
            },
        }
    }

    /// Inserts a new node before `before` (its origin), and returns its id.
    pub(super) fn insert(
        &mut self,
        before: NodeId,
        callee: Callee,
        args: Vec<PlanArg>,
        kwargs: Vec<(String, PlanArg)>,
        meta: MetaSource,
    ) -> NewId {
        let id = NewId(self.new_nodes);
        self.new_nodes += 1;
        self.edits.push(Edit::Insert {
            id,
            before,
            callee,
            args,
            kwargs,
            meta,
            origin: before,
        });
        id
    }

    /// Replaces every use of `node` with `with`, resolved: an original node
    /// the plan already replaced stands for its replacement.
    /// A contiguous copy of the first `needed` elements of `source`'s
    /// storage (`as_strided(source, [needed], [1], 0)`, then `clone`), cut
    /// again into each clone's layout by its caller: a copy that keeps the
    /// storage offsets and strides of the memory it copies. `needed` is an
    /// integer or a symbolic size.
    pub(super) fn flat_copy(&mut self, at: NodeId, source: ValueRef, needed: PlanArg) -> NewId {
        let flat = self.insert(
            at,
            Callee::Aten("aten::as_strided.default"),
            vec![
                PlanArg::Ref(source),
                match needed {
                    PlanArg::Int(n) => PlanArg::IntList(vec![n]),
                    symbolic => PlanArg::List(vec![symbolic]),
                },
                PlanArg::IntList(vec![1]),
                PlanArg::Int(0),
            ],
            vec![],
            MetaSource::Compute,
        );
        self.insert(
            at,
            Callee::Aten("aten::clone.default"),
            vec![PlanArg::Ref(ValueRef::New(flat))],
            vec![],
            MetaSource::Compute,
        )
    }

    pub(super) fn replace(&mut self, node: NodeId, with: ValueRef) {
        if let ValueRef::Old(n) = with {
            self.stood_for.insert(node, n);
        }
        let with = match with {
            ValueRef::Old(n) => self.resolve(n),
            v @ ValueRef::New(_) => v,
        };
        self.replaced.insert(node, with);
        self.edits.push(Edit::Replace { node, with });
    }

    /// Erases `node`.
    pub(super) fn erase(&mut self, node: NodeId) {
        self.edits.push(Edit::Erase { node });
    }

    /// Moves `node` just before `before`.
    pub(super) fn move_before(&mut self, node: NodeId, before: NodeId) {
        self.edits.push(Edit::Move { node, before });
    }

    /// The edits so far and the count of realized nodes, for tests.
    #[cfg(test)]
    pub(super) fn edits_and_realized(&self) -> (&[Edit], usize) {
        (&self.edits, self.report.realized)
    }

    /// Marks inserted node `id` to be computed where it stands; the report
    /// counts it.
    pub(super) fn realize_new(&mut self, id: NewId) {
        self.report.realized += 1;
        self.edits.push(Edit::RealizeNew { id });
    }

    /// Marks `nodes` to be computed where they stand; the report counts them.
    pub(super) fn realize(&mut self, nodes: BTreeSet<NodeId>) {
        self.report.realized += nodes.len();
        self.edits
            .extend(nodes.into_iter().map(|node| Edit::Realize { node }));
    }

    /// Records the decision on one auto_functionalized node.
    pub(super) fn decide(&mut self, decision: NodeReport) {
        self.report.decisions.push(decision);
    }

    /// Counts one graph write-back made a no-op.
    pub(super) fn count_writeback_removed(&mut self) {
        self.report.writebacks_removed += 1;
    }

    /// What `n` now is in the plan: its replacement, or itself.
    pub(super) fn resolve(&self, n: NodeId) -> ValueRef {
        self.replaced.get(&n).copied().unwrap_or(ValueRef::Old(n))
    }

    /// The original node `n` was replaced by, if it was.
    pub(super) fn stood_for(&self, n: NodeId) -> Option<NodeId> {
        self.stood_for.get(&n).copied()
    }

    /// The nodes the plan erases so far.
    pub(super) fn erased(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.edits.iter().filter_map(|e| match e {
            Edit::Erase { node } => Some(*node),
            _ => None,
        })
    }

    /// The finished plan.
    pub(super) fn finish(self) -> Plan {
        Plan {
            edits: self.edits,
            new_nodes: self.new_nodes,
            report: self.report,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(i: u32) -> NodeId {
        NodeId(i)
    }

    #[test]
    fn inserted_nodes_are_numbered_in_order() {
        let mut p = PlanBuilder::new(3);
        let a = p.insert(n(1), Callee::Getitem, vec![], vec![], MetaSource::Nothing);
        let b = p.insert(n(0), Callee::Getitem, vec![], vec![], MetaSource::Nothing);
        assert_eq!((a, b), (NewId(0), NewId(1)));
        let plan = p.finish();
        assert_eq!(plan.new_nodes, 2);
        assert_eq!(plan.report.nodes, 3);
        assert!(matches!(
            plan.edits[1],
            Edit::Insert { before, origin, .. } if before == n(0) && origin == n(0)
        ));
    }

    #[test]
    fn replacements_never_chain_and_remember_the_node_stood_for() {
        let mut p = PlanBuilder::new(4);
        p.replace(n(1), ValueRef::New(NewId(0)));
        p.replace(n(2), ValueRef::Old(n(1)));
        assert_eq!(p.resolve(n(2)), ValueRef::New(NewId(0)));
        assert_eq!(p.resolve(n(3)), ValueRef::Old(n(3)));
        assert_eq!(p.stood_for(n(2)), Some(n(1)));
        assert_eq!(p.stood_for(n(1)), None);
        let plan = p.finish();
        assert_eq!(
            plan.edits[1],
            Edit::Replace {
                node: n(2),
                with: ValueRef::New(NewId(0))
            }
        );
    }

    #[test]
    fn erased_moved_and_realized_nodes_are_edits_in_order() {
        let mut p = PlanBuilder::new(4);
        p.move_before(n(3), n(1));
        p.erase(n(2));
        p.realize([n(0), n(3)].into_iter().collect());
        p.count_writeback_removed();
        assert_eq!(p.erased().collect::<Vec<_>>(), vec![n(2)]);
        let plan = p.finish();
        assert_eq!(plan.report.realized, 2);
        assert_eq!(plan.report.writebacks_removed, 1);
        assert_eq!(
            plan.edits,
            vec![
                Edit::Move {
                    node: n(3),
                    before: n(1)
                },
                Edit::Erase { node: n(2) },
                Edit::Realize { node: n(0) },
                Edit::Realize { node: n(3) },
            ]
        );
    }
}
