//! The engine: one forward walk over an analysed graph that reads every
//! auto_functionalized node with the registered rules (`crate::forms`),
//! plans the call the rule parsed, and keeps the
//! memory model of the *rewritten* program up to date as it goes.
//!
//! The model: every node's value lives in a storage class (union-find over
//! nodes: views, aliasing returns, re-inplaced results and storage identity
//! from metadata join classes) and holds the contents of one *version* of that
//! storage. Re-inplacing a call creates a new version. It is safe only when no
//! node after the call reads an older version of the class; such a reader is
//! first moved before the call (when it and everything it needs are pure and
//! available there) and only then is the written buffer cloned instead.
//!
//! Because the walk is in graph order and each decision only looks forward,
//! every earlier decision is final when a node is planned: an older version's
//! reader that survived an earlier decision would have been a hazard for it.
//!
//! FX order is not Inductor's execution order: Inductor computes pointwise and
//! reduction nodes lazily, inside the kernels of their users. After the walk,
//! `Context::realize_early_readers` marks every node that reads memory a
//! later in-place call writes to be computed where it stands; that is what
//! makes both moved readers and readers already before a call sound.

use crate::analysis::alias::{classify, Role};
use crate::analysis::liveness::last_reads;
use crate::analysis::uses::Uses;
use crate::error::Result;
use crate::ir::validate::validate;
use crate::ir::{Graph, NodeId};
use crate::plan::Plan;

mod bindings;
mod checks;
mod classes;
mod clone_reason;
mod emit;
mod hazards;
mod hold_back;
mod in_place;
mod journal;
mod layout;
mod left;
mod links;
mod mutation;
mod out_call;
mod plan_builder;
mod positions;
mod realize;
mod sharing;
mod storage;
mod unit_clone;
mod versions;
mod walk;
mod writeback;
mod writers;
mod written_args;

use bindings::Bindings;
use classes::StorageClasses;
use in_place::InPlaceWrites;
use links::Links;
use plan_builder::PlanBuilder;
use positions::Positions;
use versions::Versions;
use writers::Writers;

pub use left::LeftReason;

/// Largest number of nodes moved ahead of one call; past it, a clone is
/// cheaper to reason about than a long reordering.
const MAX_MOVED: usize = 64;

/// What planning did with an auto_functionalized node.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The node was rewritten; the context holds its edits and report.
    Rewritten,
    /// The node is left untouched, with the reason (reported, and an error in
    /// strict mode, unless the caller asked for it); its
    /// [`crate::plan::LeftCause`] is [`LeftReason::cause`].
    Left(LeftReason),
}

/// What the caller asks of a plan beyond the graph.
#[derive(Clone, Debug, Default)]
pub struct PlanOptions {
    /// Operators always left to Inductor, by `ns::name` (every overload) or
    /// `ns::name.overload`: the escape hatch for kernels that break their own
    /// schema (write outside the view they are given, for one).
    pub leave: Vec<String>,
    /// Leave only the calls whose sharing no record attributes, and rewrite
    /// the others (the default holds back the whole graph then: see
    /// `engine/hold_back.rs`). Only for tests of the per-call machinery: the
    /// program is then not the one Inductor alone compiles.
    pub hold_back_only_the_call: bool,
}

impl PlanOptions {
    /// True when `op` (`ns::name.overload`) is to be left.
    #[must_use]
    pub fn leaves(&self, op: &str) -> bool {
        self.leave.iter().any(|l| {
            op == l
                || op
                    .strip_prefix(l.as_str())
                    .is_some_and(|rest| rest.starts_with('.'))
        })
    }
}

/// What the analysis knows of the graph as it arrives: computed once before
/// the walk and only read after (every check reads it; none changes it).
struct Facts<'g> {
    /// The graph being planned (never changed: the plan is a list of edits).
    graph: &'g Graph,
    /// What each node is, memory-wise (`analysis::alias::classify`).
    roles: Vec<Role>,
    /// Users of every node.
    uses: Uses,
    /// Per node, the graph index of the last node reading its memory
    /// (directly or through views); members whose last reader is behind the
    /// call being planned are dropped from their class for good.
    last_read: Vec<Option<u32>>,
    /// The in-place writers already in the graph (`writers.rs`).
    writers: Writers,
    /// What the caller asked for.
    options: PlanOptions,
}

impl<'g> Facts<'g> {
    /// The facts of `graph`, planned with `options`.
    fn of(graph: &'g Graph, options: PlanOptions) -> Self {
        let roles = classify(graph);
        let uses = Uses::build(graph);
        let last_read = last_reads(&roles, &uses);
        let writers = Writers::of(&roles);
        Self {
            graph,
            roles,
            uses,
            last_read,
            writers,
            options,
        }
    }
}

/// The state of one planning walk: the read-only [`Facts`] and the model of
/// the rewritten program the walk keeps up to date.
pub struct Context<'g> {
    /// What the analysis knows of the graph as it arrives.
    facts: Facts<'g>,
    /// Per node, its storage in the graph as it arrives
    /// (`analysis::alias::arrival_storages`), computed when a record of
    /// alias groups is first checked against it.
    arrival: Option<Vec<usize>>,
    /// Position of each node in the *rewritten* order (`positions.rs`).
    pos: Positions,
    /// The storage classes of the rewritten program (`classes.rs`).
    classes: StorageClasses,
    /// Per node, the version of its class's memory the node's value holds
    /// (`versions.rs`).
    versions: Versions,
    /// Per node, how its geometry derives from another node's (`links.rs`).
    links: Links,
    /// What the results of planned calls and removed scatters stand for
    /// (`bindings.rs`); read when the walk reaches them.
    bindings: Bindings,
    /// The plan under construction: edits, new nodes, report, and what
    /// each replaced node now is (`plan_builder.rs`).
    plan: PlanBuilder,
    /// What the plan writes in place, for `realize.rs` (`in_place.rs`).
    in_place: InPlaceWrites,
}

/// What the walk knows, read-only: the [`Facts`] of the graph as it arrives
/// and the model of the rewritten program so far (positions, storage
/// classes, versions, view links, what planned results stand for, the plan's
/// replacements and in-place writes). Every check and every question about
/// hazards, layouts and views is a method of it, as `can_inplace(node,
/// mutated_arg)` is a function in torch's `reinplace.py`; only the steps
/// that change the model or the plan are [`Context`]'s.
#[derive(Clone, Copy)]
struct Model<'m, 'g> {
    facts: &'m Facts<'g>,
    pos: &'m Positions,
    classes: &'m StorageClasses,
    versions: &'m Versions,
    links: &'m Links,
    bindings: &'m Bindings,
    plan: &'m PlanBuilder,
    in_place: &'m InPlaceWrites,
}

/// Emission: what a decided call becomes in the plan. It writes only the
/// plan under construction, what planned results stand for and the plan's
/// in-place writes; everything else it reads, through [`Emitter::model`].
/// Deciding is done before, on the [`Model`]; the model's own changes
/// (positions, classes, versions, links) are [`Context`]'s.
struct Emitter<'e, 'g> {
    facts: &'e Facts<'g>,
    pos: &'e Positions,
    classes: &'e StorageClasses,
    versions: &'e Versions,
    links: &'e Links,
    bindings: &'e mut Bindings,
    plan: &'e mut PlanBuilder,
    in_place: &'e mut InPlaceWrites,
}

impl<'g> Emitter<'_, 'g> {
    /// What the walk knows, to read while emitting.
    fn model(&self) -> Model<'_, 'g> {
        Model {
            facts: self.facts,
            pos: self.pos,
            classes: self.classes,
            versions: self.versions,
            links: self.links,
            bindings: self.bindings,
            plan: self.plan,
            in_place: self.in_place,
        }
    }
}

/// Plans the rewrite of every auto_functionalized node of `graph`.
///
/// # Errors
/// [`crate::Error::InvalidGraph`] when the graph breaks an IR invariant;
/// [`crate::Error::Internal`] when planning breaks the engine's own
/// invariants (a bug in fxrewrite). Nodes that no rule reads, or that the
/// engine cannot rewrite, are not errors: they are reported as left alone.
pub fn plan(graph: &Graph) -> Result<Plan> {
    plan_with(graph, PlanOptions::default())
}

/// [`plan`], with the caller's [`PlanOptions`].
///
/// # Errors
/// As [`plan`].
pub fn plan_with(graph: &Graph, options: PlanOptions) -> Result<Plan> {
    validate(graph)?;
    let whole_graph = !options.hold_back_only_the_call;
    let mut cx = Context::with_options(graph, options);
    cx.run()?;
    cx.realize_early_readers();
    let plan = cx.finish();
    Ok(if whole_graph {
        hold_back::whole_graph_if_unattributed(plan)
    } else {
        plan
    })
}

fn nid(i: usize) -> NodeId {
    NodeId(u32::try_from(i).unwrap_or(u32::MAX))
}

impl<'g> Context<'g> {
    #[cfg(test)]
    fn new(graph: &'g Graph) -> Self {
        Self::with_options(graph, PlanOptions::default())
    }

    fn with_options(graph: &'g Graph, options: PlanOptions) -> Self {
        let n = graph.len();
        Self {
            facts: Facts::of(graph, options),
            arrival: None,
            pos: Positions::new(n),
            classes: StorageClasses::new(n),
            versions: Versions::new(n),
            links: Links::new(n),
            bindings: Bindings::default(),
            in_place: InPlaceWrites::default(),
            plan: PlanBuilder::new(n),
        }
    }

    /// The graph being planned.
    #[must_use]
    pub fn graph(&self) -> &'g Graph {
        self.facts.graph
    }

    /// The walk's knowledge so far, to read.
    fn model(&self) -> Model<'_, 'g> {
        Model {
            facts: &self.facts,
            pos: &self.pos,
            classes: &self.classes,
            versions: &self.versions,
            links: &self.links,
            bindings: &self.bindings,
            plan: &self.plan,
            in_place: &self.in_place,
        }
    }

    /// Emission into the plan, reading the rest.
    fn emitter(&mut self) -> Emitter<'_, 'g> {
        Emitter {
            facts: &self.facts,
            pos: &self.pos,
            classes: &self.classes,
            versions: &self.versions,
            links: &self.links,
            bindings: &mut self.bindings,
            plan: &mut self.plan,
            in_place: &mut self.in_place,
        }
    }

    fn finish(self) -> Plan {
        self.plan.finish()
    }
}

/// Helpers the concern files' tests share to read a plan.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Callee;
    use crate::plan::Edit;
    use crate::plan::NodeReport;
    use crate::plan::PlanArg;

    /// The plan of `g`, which must be a valid graph.
    pub(super) fn plan_of(g: &Graph) -> Plan {
        plan(g).unwrap()
    }

    /// The decision on the only auto_functionalized node of the plan.
    pub(super) fn only_decision(p: &Plan) -> &NodeReport {
        assert_eq!(p.report.decisions.len(), 1, "{:#?}", p.report.decisions);
        &p.report.decisions[0]
    }

    /// The callee of every inserted node, in order, by name.
    pub(super) fn inserted(g: &Graph, p: &Plan) -> Vec<String> {
        p.edits
            .iter()
            .filter_map(|e| match e {
                Edit::Insert { callee, .. } => Some(match callee {
                    Callee::Target(t) => g.targets[t.idx()].name.clone(),
                    Callee::Aten(s) | Callee::Operator(s) => (*s).to_string(),
                    Callee::Getitem => "getitem".into(),
                }),
                _ => None,
            })
            .collect()
    }

    /// The inserted call of the mutating operator: its arguments.
    pub(super) fn call_args(p: &Plan, op_name: &str, g: &Graph) -> Vec<PlanArg> {
        p.edits
            .iter()
            .find_map(|e| match e {
                Edit::Insert {
                    callee: Callee::Target(t),
                    args,
                    ..
                } if g.targets[t.idx()].name == op_name => Some(args.clone()),
                _ => None,
            })
            .unwrap()
    }

    /// The nodes the plan erases, in order.
    pub(super) fn erased(p: &Plan) -> Vec<NodeId> {
        p.edits
            .iter()
            .filter_map(|e| match e {
                Edit::Erase { node } => Some(*node),
                _ => None,
            })
            .collect()
    }
}
