//! The check before any edit: every reference of a plan resolves, every
//! inserted operator is known, and the edits, simulated on use counts of the
//! graph the plan was made from, never erase a node that is still used. The
//! one use-count simulation of the project: both editors and the engine's
//! own tests (`tests/engine_*.rs`) rely on it.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::{aten_schema, internal};
use crate::error::Result;
use crate::ir::{Graph, Node, NodeId};
use crate::plan::{Action, Callee, Edit, MetaSource, Plan, PlanArg, ValueRef};

/// The distinct users of every node, by index.
pub(super) fn users_of(graph: &Graph) -> Vec<BTreeSet<usize>> {
    let mut users = vec![BTreeSet::new(); graph.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        node.for_each_operand(|o| {
            if let Some(u) = users.get_mut(o.idx()) {
                u.insert(i);
            }
        });
    }
    users
}

/// The distinct operands of a node.
pub(super) fn operands(node: &Node) -> BTreeSet<usize> {
    let mut ops = BTreeSet::new();
    node.for_each_operand(|o| {
        ops.insert(o.idx());
    });
    ops
}

fn old(graph: &Graph, n: NodeId) -> Result<usize> {
    if n.idx() < graph.len() {
        Ok(n.idx())
    } else {
        Err(internal(
            n.0,
            format!(
                "plan refers to node {} of a {}-node graph",
                n.0,
                graph.len()
            ),
        ))
    }
}

fn check_ref(graph: &Graph, prepared: &HashSet<u32>, r: ValueRef, at: u32) -> Result<()> {
    match r {
        ValueRef::Old(n) => old(graph, n).map(|_| ()),
        ValueRef::New(id) if prepared.contains(&id.0) => Ok(()),
        ValueRef::New(id) => Err(internal(
            at,
            format!("plan uses new node {} before creating it", id.0),
        )),
    }
}

fn check_arg(graph: &Graph, prepared: &HashSet<u32>, a: &PlanArg, at: u32) -> Result<()> {
    match a {
        PlanArg::Ref(r) => check_ref(graph, prepared, *r, at),
        PlanArg::FromKwarg { node, key } => {
            old(graph, *node)?;
            let n = graph.node(*node);
            if n.kwarg(key).is_none() {
                return Err(internal(
                    node.0,
                    format!("plan reads missing kwarg {key:?} of {}", n.name),
                ));
            }
            Ok(())
        }
        PlanArg::FromArg { node, index } => {
            old(graph, *node)?;
            let n = graph.node(*node);
            if n.args.get(*index).is_none() {
                return Err(internal(
                    node.0,
                    format!("plan reads missing argument {index} of {}", n.name),
                ));
            }
            Ok(())
        }
        PlanArg::List(items) => items
            .iter()
            .try_for_each(|i| check_arg(graph, prepared, i, at)),
        PlanArg::Int(_) | PlanArg::IntList(_) | PlanArg::None => Ok(()),
    }
}

fn check_callee(graph: &Graph, callee: &Callee, at: u32) -> Result<()> {
    match callee {
        Callee::Target(t) if t.idx() < graph.targets.len() => Ok(()),
        Callee::Target(t) => Err(internal(
            at,
            format!(
                "plan calls target {} of a graph with {} targets",
                t.0,
                graph.targets.len()
            ),
        )),
        Callee::Aten(name) => {
            if graph.targets.iter().any(|t| t.name == *name) || aten_schema(name).is_some() {
                Ok(())
            } else {
                Err(internal(at, format!("plan calls unknown operator {name}")))
            }
        }
        Callee::Getitem | Callee::Operator(_) => Ok(()),
    }
}

/// Checks `plan` against `graph`, the graph it was made from, without
/// changing anything.
///
/// # Errors
/// [`crate::Error::Internal`] naming the first edit that does not fit: a node
/// id out of range, a new node used before it is created or created twice, a
/// missing keyword argument, an unknown operator, erasing a node that still
/// has users.
pub fn check(graph: &Graph, plan: &Plan) -> Result<()> {
    let original_users = users_of(graph);
    let mut prepared: HashSet<u32> = HashSet::new();
    let mut counts: HashMap<usize, i64> = HashMap::new();
    let mut erased: HashSet<usize> = HashSet::new();
    let count = |counts: &mut HashMap<usize, i64>, n: usize| -> i64 {
        *counts.entry(n).or_insert_with(|| {
            original_users
                .get(n)
                .map_or(0, |u| i64::try_from(u.len()).unwrap_or(i64::MAX))
        })
    };
    for edit in &plan.edits {
        match edit {
            Edit::Insert {
                id,
                before,
                callee,
                args,
                kwargs,
                meta,
                origin,
            } => {
                let at = before.0;
                check_callee(graph, callee, at)?;
                for a in args.iter().chain(kwargs.iter().map(|(_, a)| a)) {
                    check_arg(graph, &prepared, a, at)?;
                }
                old(graph, *before)?;
                old(graph, *origin)?;
                if id.0 >= plan.new_nodes {
                    return Err(internal(
                        at,
                        format!(
                            "plan creates new node {} but declares {} new nodes",
                            id.0, plan.new_nodes
                        ),
                    ));
                }
                if !prepared.insert(id.0) {
                    return Err(internal(
                        at,
                        format!("plan creates new node {} twice", id.0),
                    ));
                }
                match meta {
                    MetaSource::AfOutput { node, .. } | MetaSource::AfOutputs { node, .. } => {
                        old(graph, *node)?;
                    }
                    MetaSource::Compute | MetaSource::Nothing => {}
                }
            }
            Edit::Replace { node, with } => {
                let n = old(graph, *node)?;
                check_ref(graph, &prepared, *with, node.0)?;
                if let ValueRef::Old(t) = with {
                    let t = t.idx();
                    let ct = count(&mut counts, t);
                    let cn = count(&mut counts, n);
                    counts.insert(t, ct.saturating_add(cn));
                }
                counts.insert(n, 0);
            }
            Edit::Erase { node } => {
                let n = old(graph, *node)?;
                if count(&mut counts, n) != 0 {
                    return Err(internal(
                        node.0,
                        format!(
                            "plan erases {} while it still has users",
                            graph.node(*node).name
                        ),
                    ));
                }
                for inp in operands(graph.node(*node)) {
                    if !erased.contains(&inp) {
                        let c = count(&mut counts, inp);
                        counts.insert(inp, c - 1);
                    }
                }
                erased.insert(n);
            }
            Edit::Move { node, before } => {
                old(graph, *node)?;
                old(graph, *before)?;
            }
            Edit::Realize { node } => {
                old(graph, *node)?;
            }
            Edit::RealizeNew { id } => {
                check_ref(graph, &prepared, ValueRef::New(*id), 0)?;
            }
        }
    }
    check_report(graph, plan)
}

/// The plan does what its report says: every auto_functionalized node
/// reported rewritten is erased, and each gets a direct call of its
/// operator (so every buffer it wrote is still written).
fn check_report(graph: &Graph, plan: &Plan) -> Result<()> {
    let mut erased: HashSet<&str> = HashSet::new();
    let mut calls: HashMap<&str, usize> = HashMap::new();
    for edit in &plan.edits {
        match edit {
            Edit::Erase { node } => {
                erased.insert(graph.node(*node).name.as_str());
            }
            Edit::Insert {
                callee: Callee::Target(t),
                ..
            } => {
                *calls
                    .entry(graph.targets[t.idx()].name.as_str())
                    .or_default() += 1;
            }
            _ => {}
        }
    }
    let mut rewritten: HashMap<&str, usize> = HashMap::new();
    for d in &plan.report.decisions {
        if d.action == Action::Left {
            continue;
        }
        if !erased.contains(d.node.as_str()) {
            return Err(internal(
                0,
                format!("{} is reported rewritten but the plan keeps it", d.node),
            ));
        }
        *rewritten.entry(d.op.as_str()).or_default() += 1;
    }
    for (op, n) in rewritten {
        let made = calls.get(op).copied().unwrap_or(0);
        if made < n {
            return Err(internal(
                0,
                format!(
                    "{n} nodes of {op} are reported rewritten but the plan calls it {made} times"
                ),
            ));
        }
    }
    Ok(())
}
