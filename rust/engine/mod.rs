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

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::analysis::alias::{
    arrival_storages, classify, returns_an_alias, Geometry, Role, ViewStep,
};
use crate::analysis::liveness::{for_each_reader, last_reads, reads};
use crate::analysis::uses::Uses;
use crate::error::Result;
use crate::forms::call::{CallArg, MutationCall, OutCall, ResultSlot, ViewOfBuffer, WrittenArg};
use crate::forms::{Form, FormCall};
use crate::ir::validate::validate;
use crate::ir::{Graph, NodeId, OpCode, TargetKind};
use crate::plan::{
    Action, Callee, CloneNote, Edit, LeftCause, MetaSource, NewId, NodeReport, Plan, PlanArg,
    Report, ValueRef,
};

mod checks;
mod emit;
mod hazards;
mod hold_back;
mod layout;
mod mutation;
mod realize;
mod sharing;
mod storage;
mod unit_clone;
mod writeback;

use checks::CloneReason;
use layout::{required_storage, strided_layout, CloneLayout, CloneSource};
use sharing::{clone_whole_units, Sharing};
use storage::structural_root;

/// Largest number of nodes moved ahead of one call; past it, a clone is
/// cheaper to reason about than a long reordering.
const MAX_MOVED: usize = 64;

/// How a node's geometry derives from another node's.
#[derive(Clone, Debug)]
enum Link {
    Root,
    Same(NodeId),
    Step(NodeId, ViewStep),
}

/// Links an analysis set, with the values they replaced, so that a result
/// the planner then drops leaves no trace (`Context::restore_links`).
#[derive(Debug, Default)]
struct LinkUndo(Vec<(NodeId, Link)>);

/// What a result of a planned auto_functionalized node stands for.
#[derive(Clone, Debug)]
enum Bind {
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

/// What planning did with an auto_functionalized node.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The node was rewritten; the context holds its edits and report.
    Rewritten,
    /// The node is left untouched, with the reason (reported, and an error in
    /// strict mode).
    Left(String),
    /// The node is left untouched because its arguments share memory and no
    /// record says whether the program shared it ([`LeftCause::UnattributedSharing`]).
    Unattributed(String),
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

/// The state of one planning walk.
pub struct Context<'g> {
    /// The graph being planned (never changed: the plan is a list of edits).
    graph: &'g Graph,
    /// What each node is, memory-wise (`analysis::alias::classify`).
    roles: Vec<Role>,
    /// Per node, its storage in the graph as it arrives
    /// (`analysis::alias::arrival_storages`), computed when a record of
    /// alias groups is first checked against it.
    arrival: Option<Vec<usize>>,
    /// Users of every node.
    uses: Uses,
    /// Per node, the graph index of the last node reading its memory
    /// (directly or through views); members whose last reader is behind the
    /// call being planned are dropped from their class for good.
    last_read: Vec<Option<u32>>,
    /// Position of each node in the *rewritten* order: node `i` is at `2 * i`;
    /// a node moved ahead of the call at position `p` gets `p - 1`, so it
    /// sorts after everything originally before the call and before it.
    pos: Vec<i64>,
    /// Union-find parent of each node's storage class (`storage.rs`).
    parent: Vec<u32>,
    /// Per class root, the nodes of the class still read later.
    members: Vec<Vec<NodeId>>,
    /// Per class root, the graph inputs in the class.
    inputs: Vec<Vec<NodeId>>,
    /// Per class root, the newest version (event) of its memory.
    latest: Vec<u32>,
    /// Per node, the version of its class's memory the node's value holds.
    ver: Vec<u32>,
    /// Per node, how its geometry derives from another node's (`Link`).
    link: Vec<Link>,
    /// Graph input -> its `copy_` write-back epilogue (the first one).
    writeback: HashMap<NodeId, NodeId>,
    /// Roots of memory that an in-place operator already in the graph writes:
    /// never re-inplaced into (the engine does not order against them).
    foreign: HashSet<NodeId>,
    /// Per node index `i`, how many in-place writers already in the graph
    /// (`copy_` write-backs and other mutating calls) stand before node `i`:
    /// a reader moved ahead of a call must not cross one (`hazards.rs`).
    writers_before: Vec<u32>,
    /// Per planned auto_functionalized node, what each result slot stands
    /// for; read when the walk reaches its getitems.
    binds: HashMap<NodeId, Vec<Bind>>,
    /// Removed v1 scatters -> (the base they become, the version written).
    scatter_binds: HashMap<NodeId, (NodeId, u32)>,
    /// (call, buffer) -> the first result node bound to that buffer's clone.
    clone_reps: HashMap<(NodeId, usize), NodeId>,
    /// Results bound to a clone, and the buffer whose layout the clone has.
    same_layout: HashMap<NodeId, NodeId>,
    /// Nodes the plan replaced, and by what (replacements never chain).
    replaced: HashMap<NodeId, ValueRef>,
    /// Nodes the plan replaced by an original node, and that node before
    /// its own replacement is followed: its layout is theirs in the
    /// rewritten program (`layout_source`), also where it was itself
    /// replaced by a new node of its layout.
    stood_for: HashMap<NodeId, NodeId>,
    /// Storage key from metadata -> the first node seen with it.
    storage_keys: HashMap<u64, NodeId>,
    /// The next version number to hand out.
    next_event: u32,
    /// The plan's edits so far, in order.
    edits: Vec<Edit>,
    /// Number of nodes the plan creates so far.
    new_nodes: u32,
    /// The report so far.
    report: Report,
    /// Every buffer re-inplaced, with the position of the call writing it.
    writes: Vec<(NodeId, i64)>,
    /// The tensors in-place calls get on their real memory (written
    /// buffers, and read slots sharing them): their view sources are
    /// realized (`realize.rs`).
    in_place: Vec<NodeId>,
    /// What the caller asked for.
    options: PlanOptions,
}

/// Plans the rewrite of every auto_functionalized node of `graph`.
///
/// # Errors
/// [`crate::Error::InvalidGraph`] when the graph breaks an IR invariant. Nodes
/// that no rule reads, or that the engine cannot rewrite, are not errors:
/// they are reported as left alone.
pub fn plan(graph: &Graph) -> Result<Plan> {
    plan_with(graph, PlanOptions::default())
}

/// [`plan`], with the caller's [`PlanOptions`].
///
/// # Errors
/// As [`plan`].
pub fn plan_with(graph: &Graph, options: PlanOptions) -> Result<Plan> {
    validate(graph)?;
    let mut cx = Context::new(graph);
    let whole_graph = !options.hold_back_only_the_call;
    cx.options = options;
    cx.run();
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
    fn new(graph: &'g Graph) -> Self {
        let roles = classify(graph);
        let uses = Uses::build(graph);
        let last_read = last_reads(&roles, &uses);
        let n = graph.len();
        let mut writeback = HashMap::default();
        let mut foreign = HashSet::default();
        let mut writers_before = Vec::with_capacity(n + 1);
        writers_before.push(0);
        for (i, role) in roles.iter().enumerate() {
            let writes = matches!(
                role,
                Role::InputWriteBack { .. } | Role::OtherMutation { .. }
            );
            writers_before.push(writers_before[i] + u32::from(writes));
            match role {
                Role::InputWriteBack { dst, .. } => {
                    writeback.entry(*dst).or_insert(nid(i));
                }
                Role::OtherMutation { written } => {
                    for &w in written {
                        foreign.insert(structural_root(&roles, w));
                    }
                }
                _ => {}
            }
        }
        Self {
            graph,
            roles,
            arrival: None,
            uses,
            last_read,
            pos: (0..n).map(|i| 2 * i as i64).collect(),
            parent: (0..n)
                .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
                .collect(),
            members: vec![Vec::new(); n],
            inputs: vec![Vec::new(); n],
            latest: vec![0; n],
            ver: vec![0; n],
            link: vec![Link::Root; n],
            writeback,
            foreign,
            writers_before,
            binds: HashMap::default(),
            scatter_binds: HashMap::default(),
            clone_reps: HashMap::default(),
            same_layout: HashMap::default(),
            replaced: HashMap::default(),
            stood_for: HashMap::default(),
            storage_keys: HashMap::default(),
            next_event: 1,
            writes: Vec::new(),
            in_place: Vec::new(),
            edits: Vec::new(),
            new_nodes: 0,
            report: Report {
                nodes: n,
                ..Report::default()
            },
            options: PlanOptions::default(),
        }
    }

    /// The graph being planned.
    #[must_use]
    pub fn graph(&self) -> &'g Graph {
        self.graph
    }

    // ----- storage classes -------------------------------------------------

    // ----- the walk --------------------------------------------------------

    fn run(&mut self) {
        for i in 0..self.graph.len() {
            self.step(nid(i));
        }
    }

    /// Walks node `id`, the next in graph order: joins its storage class,
    /// gives it its version and geometry link, and plans it when it is an
    /// auto_functionalized node.
    fn step(&mut self, id: NodeId) {
        let i = id.idx();
        let role = self.roles[i].clone();
        let mut storage_union = true;
        match role {
            Role::Input => self.inputs[i].push(id),
            Role::View { src, step, .. } => {
                self.union(id, src);
                self.ver[i] = self.ver[src.idx()];
                self.link[i] = match step {
                    None => Link::Same(self.same_target(src)),
                    Some(s) => Link::Step(src, s),
                };
            }
            Role::Opaque => {
                let mut ops = Vec::new();
                self.graph.node(id).for_each_operand(|o| ops.push(o));
                for o in ops {
                    self.union(id, o);
                }
                let r = self.find(id);
                self.ver[i] = self.latest[r];
            }
            Role::OtherMutation { written } => {
                // Writing arguments in place makes them share no memory
                // with each other: only the call's own value may alias
                // them, through a return annotated as an alias. A call
                // with no such return (every operator auto_functionalized
                // wraps, so every call this engine emits) joins no class;
                // joining its written arguments into one would make a
                // later `copy_(input, other_written)` look like a copy
                // inside the input's own memory.
                if returns_an_alias(self.graph, id) {
                    for w in written {
                        self.union(id, w);
                    }
                }
                let r = self.find(id);
                self.ver[i] = self.latest[r];
            }
            Role::AutoFunctionalized => {
                self.plan_af(id);
                storage_union = false;
            }
            Role::AfResult { af, index } => {
                let bind = self.binds.get(&af).and_then(|b| b.get(index)).cloned();
                self.apply_bind(id, af, bind);
                storage_union = false;
            }
            Role::AfListItem { list, item } => {
                let bind = match self.binds.get(&list).and_then(|b| b.first()) {
                    Some(Bind::List(items)) => items.get(item).cloned().flatten(),
                    _ => None,
                };
                self.apply_bind(id, list, bind);
                storage_union = false;
            }
            Role::Scatter { .. } => {
                if let Some(&(base, event)) = self.scatter_binds.get(&id) {
                    self.union(id, base);
                    self.ver[i] = event;
                    self.link[i] = Link::Same(self.same_target(base));
                    storage_union = false;
                }
            }
            Role::InputWriteBack { dst, src } => {
                self.plan_writeback(id, dst, src);
                storage_union = false;
            }
            Role::Fresh | Role::MetaOnly | Role::Output => {}
        }
        if storage_union {
            self.union_by_storage_key(id);
        }
        let r = self.find(id);
        self.members[r].push(id);
    }

    fn union_by_storage_key(&mut self, id: NodeId) {
        let Some(key) = self.graph.node(id).meta.as_ref().and_then(|m| m.storage) else {
            return;
        };
        match self.storage_keys.get(&key).copied() {
            Some(first) => {
                let r = self.union(id, first);
                if !matches!(self.roles[id.idx()], Role::View { .. }) {
                    self.ver[id.idx()] = self.latest[r];
                }
            }
            None => {
                self.storage_keys.insert(key, id);
            }
        }
    }

    fn apply_bind(&mut self, id: NodeId, af: NodeId, bind: Option<Bind>) {
        let i = id.idx();
        match bind {
            Some(Bind::Buffer { node, event }) => {
                self.union(id, node);
                self.ver[i] = event;
                self.link[i] = Link::Same(self.same_target(node));
            }
            Some(Bind::Alias { node, event }) => {
                self.union(id, node);
                self.ver[i] = event;
            }
            Some(Bind::Clone { key, of }) => {
                self.same_layout.insert(id, of);
                self.bind_clone(id, key);
            }
            Some(Bind::Tensor) => {
                self.union(id, af);
                let r = self.find(id);
                self.ver[i] = self.latest[r];
                self.link[i] = Link::Root;
            }
            Some(Bind::Fresh | Bind::List(_)) | None => self.link[i] = Link::Root,
        }
    }

    fn bind_clone(&mut self, id: NodeId, key: (NodeId, usize)) {
        match self.clone_reps.get(&key).copied() {
            Some(rep) => {
                self.union(id, rep);
                self.link[id.idx()] = Link::Same(self.same_target(rep));
            }
            None => {
                self.clone_reps.insert(key, id);
                self.link[id.idx()] = Link::Root;
            }
        }
    }

    fn plan_af(&mut self, id: NodeId) {
        // `Role::AutoFunctionalized` is given to nodes of either form only.
        let form = Form::of_kind(self.graph.target_of(id).kind).unwrap_or(Form::V2);
        let op_name = match self.graph.node(id).args.first() {
            Some(crate::ir::Value::Target(t)) => self.graph.targets[t.idx()].name.clone(),
            _ => "<unknown>".into(),
        };
        let (rule, outcome) = match crate::forms::parse(self.graph, id) {
            _ if self.options.leaves(&op_name) => (
                "none",
                Outcome::Left(format!(
                    "{op_name} is left to Inductor on request (Pass(leave=...) or FXREWRITE_LEAVE)"
                )),
            ),
            Some((name, Ok(FormCall::Mutation(call)))) => {
                (name, self.rewrite_mutation(&call, name))
            }
            Some((name, Ok(FormCall::Out(call)))) => (name, self.rewrite_out_call(&call, name)),
            Some((name, Err(reason))) => (name, Outcome::Left(reason)),
            None => ("none", Outcome::Left("no form reads this node".into())),
        };
        let requested = self.options.leaves(&op_name);
        let left = match outcome {
            Outcome::Rewritten => None,
            Outcome::Left(reason) if requested => Some((reason, LeftCause::Requested)),
            Outcome::Left(reason) => Some((reason, LeftCause::Unsupported)),
            Outcome::Unattributed(reason) => Some((reason, LeftCause::UnattributedSharing)),
        };
        if let Some((reason, cause)) = left {
            let node = self.graph.node(id);
            self.report.decisions.push(NodeReport {
                node: node.name.clone(),
                op: op_name,
                form,
                rule,
                action: Action::Left,
                moved: vec![],
                clones: vec![],
                scatters_removed: 0,
                reason: Some(reason),
                cause: Some(cause),
                source: node.source.clone(),
            });
        }
    }

    fn finish(self) -> Plan {
        Plan {
            edits: self.edits,
            new_nodes: self.new_nodes,
            report: self.report,
        }
    }
}

/// Tests of the walk itself, and helpers the concern files' tests share to
/// read a plan.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_graph::{n, neg, B};
    use crate::ir::Value;
    use crate::plan::NodeReport;

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

    #[test]
    fn a_node_its_form_cannot_read_is_left_with_the_reason_and_no_edit() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let af = b.af(
            "af",
            true,
            &crate::analysis::test_graph::scale_(),
            vec![
                ("s", Value::Float(2.0)),
                ("_x_base_index", Value::Int(0)),
                ("_x_new_info", Value::Int(1)),
                ("_all_bases", Value::List(vec![n(t)])),
            ],
        );
        let g = b.output(&[af]);
        let p = plan_of(&g);
        let d = only_decision(&p);
        assert_eq!(d.action, Action::Left);
        assert_eq!(
            (d.node.as_str(), d.rule, d.form),
            ("af", "reinplace_v2", Form::V2)
        );
        assert_eq!(d.op, "m::scale_.default");
        assert!(d.reason.as_deref().unwrap().contains("newer torch"));
        assert!(p.edits.is_empty());
    }

    #[test]
    fn a_result_of_a_planned_call_is_its_buffer_at_a_newer_version() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let before = b.call("before", &neg(), vec![n(t)]);
        let af = b.scale_v2("af", t);
        let nt = b.getitem("nt", af, 1);
        let g = b.output(&[before, nt]);
        let mut cx = Context::new(&g);
        cx.run();
        assert_eq!(cx.find(nt), cx.find(t));
        assert!(cx.ver[nt.idx()] > cx.ver[t.idx()]);
        assert_eq!(cx.geometry(nt), cx.geometry(t));
        // The call's own slot is not a value: only its getitems are bound.
        assert_ne!(cx.find(af), cx.find(t));
    }

    #[test]
    fn a_result_bound_to_a_clone_is_not_the_buffer() {
        // `x` is an input the graph never writes back: the call gets a clone.
        let mut b = B::new();
        let x = b.input("x");
        let af = b.scale_v2("af", x);
        let nx = b.getitem("nx", af, 1);
        let g = b.output(&[nx]);
        let mut cx = Context::new(&g);
        cx.run();
        assert_ne!(cx.find(nx), cx.find(x));
        assert_eq!(cx.same_layout.get(&nx), Some(&x));
    }
}
