//! Reading and checking plans: the edits of a kind, and the oracles every
//! plan made in the tests must pass (structure of the edits on user sets,
//! graph inputs written only when written back, and the same results as the
//! original under the reference interpreter).

use std::collections::BTreeSet;

use fxrewrite::ir::{Graph, NodeId, OpCode, TargetKind, Value};
use fxrewrite::plan::{Callee, NewId, PlanArg, ValueRef};
use fxrewrite::{plan, Action, Edit, Plan};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use proptest::strategy::Strategy;
use proptest::test_runner::{contextualize_config, TestCaseError, TestRunner};

use super::{interp, seeds};

/// The auto_functionalized nodes a plan rewrites: run as eager ran them in
/// the reference (the ones it leaves, Inductor decomposes functionally).
pub fn rewritten(p: &Plan) -> Vec<String> {
    p.report
        .decisions
        .iter()
        .filter(|d| d.action != Action::Left)
        .map(|d| d.node.clone())
        .collect()
}

pub fn planned(g: &Graph) -> Plan {
    let p = plan(g).unwrap();
    check_structure(g, &p).unwrap();
    check_inputs(g, &p).unwrap();
    same_results(g, &p).unwrap();
    p
}

/// [`planned`] for a graph torch itself could not run (a malformed node the
/// engine must leave): the plan passes the structural oracles, and the
/// reference interpreter must fail to run the original, naming why; a
/// graph it can run belongs in [`planned`], which compares values.
pub fn planned_unrunnable(g: &Graph) -> (Plan, String) {
    let p = plan(g).unwrap();
    check_structure(g, &p).unwrap();
    check_inputs(g, &p).unwrap();
    match same_results_or_unrunnable(g, &p).unwrap() {
        Compared::Unrunnable(why) => (p, why),
        Compared::Values => panic!("the interpreter runs this graph: use `planned`"),
    }
}

/// The planned program computes what the original computes and leaves the
/// graph inputs as the original does. A graph the reference interpreter
/// cannot run is an error naming what it could not run: a check that
/// compared nothing must not pass.
pub fn same_results(g: &Graph, p: &Plan) -> Result<(), String> {
    match same_results_or_unrunnable(g, p)? {
        Compared::Values => Ok(()),
        Compared::Unrunnable(why) => Err(format!(
            "the reference interpreter cannot run the original graph, so nothing was compared: {why}"
        )),
    }
}

/// Whether [`same_results_or_unrunnable`] compared the two programs' values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compared {
    /// Both programs ran and gave the same results.
    Values,
    /// The reference interpreter cannot run the original graph (why).
    Unrunnable(String),
}

/// [`same_results`] for callers that count how many graphs were compared
/// (the property tests, which assert a floor on that count) instead of
/// requiring every graph to run. Once the original runs, the planned
/// program must run and agree.
pub fn same_results_or_unrunnable(g: &Graph, p: &Plan) -> Result<Compared, String> {
    let want = match interp::run_eager(g, &rewritten(p)) {
        Ok(want) => want,
        Err(why) => return Ok(Compared::Unrunnable(why)),
    };
    let got = interp::run_planned(g, p)?;
    if got != want {
        return Err(format!(
            "the planned program differs from the original:\n  original: {want:?}\n  planned:  {got:?}"
        ));
    }
    Ok(Compared::Values)
}

/// Runs one property as `proptest!` would (the [`seeds::config`] of
/// `default_cases`, failures persisted beside `source_file`), but counts the
/// cases whose values the reference interpreter compared. A property whose
/// graphs stopped running would otherwise pass while comparing nothing; so
/// at the end the count is printed and at least `min_percent` of the cases
/// must have been compared.
pub fn run_counting_compared<S>(
    name: &'static str,
    source_file: &'static str,
    default_cases: u32,
    min_percent: usize,
    strategy: S,
    case: impl Fn(S::Value) -> Result<Compared, TestCaseError>,
) where
    S: Strategy,
    S::Value: std::fmt::Debug,
{
    let mut config = contextualize_config(seeds::config(default_cases));
    config.source_file = Some(source_file);
    config.test_name = Some(name);
    let (cases, compared) = (AtomicUsize::new(0), AtomicUsize::new(0));
    // The first reason a graph could not run, for the failure message.
    let first_unrunnable = Mutex::new(None);
    let result = TestRunner::new(config).run(&strategy, |v| {
        let c = case(v)?;
        cases.fetch_add(1, Ordering::Relaxed);
        match c {
            Compared::Values => {
                compared.fetch_add(1, Ordering::Relaxed);
            }
            Compared::Unrunnable(why) => {
                first_unrunnable.lock().unwrap().get_or_insert(why);
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
    let (cases, compared) = (cases.into_inner(), compared.into_inner());
    eprintln!("{name}: {compared} of {cases} cases compared by value");
    assert!(
        compared * 100 >= cases * min_percent,
        "{name}: only {compared} of {cases} cases compared by value (floor {min_percent}%); \
         the first that could not run: {:?}",
        first_unrunnable.into_inner().unwrap()
    );
}

pub fn id_of(g: &Graph, name: &str) -> NodeId {
    let i = g.nodes.iter().position(|n| n.name == name).unwrap();
    NodeId(u32::try_from(i).unwrap())
}

pub fn replaced_with(p: &Plan, node: NodeId) -> Option<ValueRef> {
    p.edits.iter().find_map(|e| match e {
        Edit::Replace { node: m, with } if *m == node => Some(*with),
        _ => None,
    })
}

pub fn erased(p: &Plan, node: NodeId) -> bool {
    p.edits
        .iter()
        .any(|e| matches!(e, Edit::Erase { node: m } if *m == node))
}

/// The inserted in-place calls of the graph's operators (`Callee::Target`).
/// An inserted call: its id, positional and keyword arguments.
pub type Call<'a> = (NewId, &'a Vec<PlanArg>, &'a Vec<(String, PlanArg)>);

pub fn inserted_calls(p: &Plan) -> Vec<Call<'_>> {
    p.edits
        .iter()
        .filter_map(|e| match e {
            Edit::Insert {
                id,
                callee: Callee::Target(_),
                args,
                kwargs,
                ..
            } => Some((*id, args, kwargs)),
            _ => None,
        })
        .collect()
}

/// The list of old nodes `ids` as a plan argument: what an in-place call of
/// a list operator gets when it writes those buffers themselves.
pub fn old_list(ids: &[NodeId]) -> PlanArg {
    PlanArg::List(
        ids.iter()
            .map(|&i| PlanArg::Ref(ValueRef::Old(i)))
            .collect(),
    )
}

pub fn inserted_aten(p: &Plan, name: &str) -> usize {
    p.edits
        .iter()
        .filter(|e| matches!(e, Edit::Insert { callee: Callee::Aten(c), .. } if *c == name))
        .count()
}

pub fn moves(p: &Plan) -> Vec<(NodeId, NodeId)> {
    p.edits
        .iter()
        .filter_map(|e| match e {
            Edit::Move { node, before } => Some((*node, *before)),
            _ => None,
        })
        .collect()
}

pub fn actions(p: &Plan) -> Vec<Action> {
    p.report.decisions.iter().map(|d| d.action).collect()
}

pub fn plan_arg_refs(a: &PlanArg, out: &mut Vec<ValueRef>) {
    match a {
        PlanArg::Ref(r) => out.push(*r),
        PlanArg::List(items) => items.iter().for_each(|i| plan_arg_refs(i, out)),
        _ => {}
    }
}

/// The plan passes the applier's own check (`plan::apply::check`: every
/// reference resolves, use counts allow every erasure, the report matches the
/// edits), plus what the engine promises beyond it: new ids in creation
/// order, no edit touches an erased node, a replacement value is never itself
/// replaced, and the output node survives.
pub fn check_structure(g: &Graph, p: &Plan) -> Result<(), String> {
    fxrewrite::plan::apply::check(g, p).map_err(|e| e.to_string())?;
    let mut alive: BTreeSet<(u8, u32)> = (0..g.len())
        .map(|i| (0u8, u32::try_from(i).unwrap()))
        .collect();
    let k = |r: ValueRef| match r {
        ValueRef::Old(n) => (0u8, n.0),
        ValueRef::New(n) => (1u8, n.0),
    };
    let mut replaced: BTreeSet<(u8, u32)> = BTreeSet::new();
    let mut next_new = 0u32;
    for (ei, e) in p.edits.iter().enumerate() {
        match e {
            Edit::Move { node, before } => {
                for x in [node, before] {
                    if !alive.contains(&k(ValueRef::Old(*x))) {
                        return Err(format!("edit {ei}: move of dead node {x:?}"));
                    }
                }
            }
            Edit::Insert {
                id,
                before,
                args,
                kwargs,
                ..
            } => {
                if id.0 != next_new {
                    return Err(format!("edit {ei}: new id {id:?} out of order"));
                }
                next_new += 1;
                if !alive.contains(&k(ValueRef::Old(*before))) {
                    return Err(format!("edit {ei}: insert before dead node {before:?}"));
                }
                let mut refs = Vec::new();
                for a in args.iter().chain(kwargs.iter().map(|(_, a)| a)) {
                    plan_arg_refs(a, &mut refs);
                }
                if let Some(r) = refs.iter().find(|r| !alive.contains(&k(**r))) {
                    return Err(format!("edit {ei}: insert uses dead value {r:?}"));
                }
                alive.insert(k(ValueRef::New(*id)));
            }
            Edit::Replace { node, with } => {
                let from = ValueRef::Old(*node);
                if !alive.contains(&k(from)) || !alive.contains(&k(*with)) {
                    return Err(format!("edit {ei}: replace involving a dead value"));
                }
                if replaced.contains(&k(*with)) {
                    return Err(format!(
                        "edit {ei}: replacement {with:?} is itself replaced"
                    ));
                }
                if from == *with {
                    return Err(format!("edit {ei}: self replacement"));
                }
                replaced.insert(k(from));
            }
            Edit::Erase { node } => {
                if !alive.remove(&k(ValueRef::Old(*node))) {
                    return Err(format!("edit {ei}: erase of dead node {node:?}"));
                }
            }
            Edit::Realize { node } => {
                if !alive.contains(&k(ValueRef::Old(*node))) {
                    return Err(format!("edit {ei}: realize of dead node {node:?}"));
                }
            }
            Edit::RealizeNew { id } => {
                if !alive.contains(&k(ValueRef::New(*id))) {
                    return Err(format!("edit {ei}: realize of dead new node {id:?}"));
                }
            }
        }
    }
    if next_new != p.new_nodes {
        return Err(format!("new_nodes {} but {next_new} inserts", p.new_nodes));
    }
    let out = ValueRef::Old(NodeId(u32::try_from(g.len() - 1).unwrap()));
    if !alive.contains(&k(out)) {
        return Err("the output node was erased".into());
    }
    Ok(())
}

/// The original node whose memory a plan value lives in (through views), or
/// `None` for fresh memory.
pub fn storage_root(g: &Graph, p: &Plan, r: ValueRef) -> Option<NodeId> {
    match r {
        ValueRef::New(id) => p.edits.iter().find_map(|e| match e {
            Edit::Insert {
                id: i,
                callee: Callee::Aten(c),
                args,
                ..
            } if *i == id => match (*c, args.first()) {
                (
                    "aten::alias.default" | "aten::slice.Tensor" | "aten::as_strided.default",
                    Some(PlanArg::Ref(src)),
                ) => storage_root(g, p, *src),
                _ => None,
            },
            _ => None,
        }),
        ValueRef::Old(id) => {
            let node = g.node(id);
            if node.op == OpCode::Placeholder {
                return Some(id);
            }
            let t = g.target_of(id);
            let first = node.args.first().and_then(Value::as_node);
            match (t.kind, t.name.as_str()) {
                (
                    TargetKind::Operator,
                    "aten::slice.Tensor" | "aten::select.int" | "aten::copy_.default",
                ) => storage_root(g, p, ValueRef::Old(first?)),
                (TargetKind::Getitem, _) => {
                    let src = first?;
                    (g.target_of(src).name == "aten::split_with_sizes.default")
                        .then(|| g.node(src).args.first().and_then(Value::as_node))
                        .flatten()
                        .and_then(|s| storage_root(g, p, ValueRef::Old(s)))
                }
                _ => None,
            }
        }
    }
}

/// No in-place call of the plan writes the memory of a graph input unless
/// the graph writes that input back (`copy_(input, ...)`) after the call.
pub fn check_inputs(g: &Graph, p: &Plan) -> Result<(), String> {
    for e in &p.edits {
        let Edit::Insert {
            callee: Callee::Target(t),
            args,
            kwargs,
            before,
            ..
        } = e
        else {
            continue;
        };
        let schema = g.targets[t.idx()].schema.as_ref().ok_or("no schema")?;
        let mut pos = args.iter();
        for a in &schema.args {
            let v = if a.kwarg_only {
                kwargs.iter().find(|(k, _)| k == &a.name).map(|(_, v)| v)
            } else {
                pos.next()
            };
            if !a.is_written() {
                continue;
            }
            let mut refs = Vec::new();
            if let Some(v) = v {
                plan_arg_refs(v, &mut refs);
            }
            for r in refs {
                let Some(root) = storage_root(g, p, r) else {
                    continue;
                };
                let written_back = g.nodes.iter().enumerate().any(|(i, nd)| {
                    i > before.idx()
                        && g.target_of(NodeId(u32::try_from(i).unwrap())).name
                            == "aten::copy_.default"
                        && nd.args.first() == Some(&Value::Node(root))
                });
                if !written_back {
                    return Err(format!(
                        "the call planned for `{}` writes graph input `{}`, which is not written back",
                        g.node(*before).name,
                        g.node(root).name
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The graph and plan, one line per node and edit, for failure messages.
pub fn dump(g: &Graph, p: &Plan) -> String {
    let mut out = String::new();
    for (i, nd) in g.nodes.iter().enumerate() {
        out += &format!(
            "%{i} {} = {} {:?} {:?}\n",
            nd.name,
            g.targets[nd.target.idx()].name,
            nd.args,
            nd.kwargs
        );
    }
    for e in &p.edits {
        out += &format!("{e:?}\n");
    }
    for d in &p.report.decisions {
        out += &format!("{} {:?} {:?} {:?}\n", d.node, d.action, d.clones, d.reason);
    }
    out
}

/// The inserts of one clone that keeps the exact layout of its source: a
/// flat view of the storage, its copy, and the copy viewed back.
pub const EXACT_CLONE: [&str; 3] = [
    "aten::as_strided.default",
    "aten::clone.default",
    "aten::as_strided.default",
];

/// The Aten callees of the plan's inserts, in order.
/// The `operator` functions (`add`, `mul`) the plan inserts, in order.
pub fn inserted_operators(p: &Plan) -> Vec<&'static str> {
    p.edits
        .iter()
        .filter_map(|e| match e {
            Edit::Insert {
                callee: Callee::Operator(op),
                ..
            } => Some(*op),
            _ => None,
        })
        .collect()
}

pub fn inserted_atens(p: &Plan) -> Vec<&'static str> {
    p.edits
        .iter()
        .filter_map(|e| match e {
            Edit::Insert {
                callee: Callee::Aten(c),
                ..
            } => Some(*c),
            _ => None,
        })
        .collect()
}
