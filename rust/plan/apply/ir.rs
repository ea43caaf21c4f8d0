//! The [`Editor`] of a graph in IR form, for the command line tool: edits a
//! copy of the graph, which becomes the result once every edit is in.
//!
//! It mirrors FX's semantics, so that the tool's rewritten graph is the one
//! the pass gives on the live graph: `Replace` has `replace_all_uses_with`
//! semantics (uses by inserted nodes included), inserted nodes are named as
//! FX names them (`clone_default`, `clone_default_1`, `slice_tensor`,
//! `getitem_7`), get no tensor metadata and inherit the source line of the
//! node the plan names as their origin. The result always passes
//! [`validate`].

use std::collections::{BTreeSet, HashSet};

use super::check::{operands, users_of};
use super::naming::{snake_case, Namer};
use super::{aten_schema, internal, Arg, Editor, Insertion};
use crate::error::{Error, Result};
use crate::ir::validate::validate;
use crate::ir::{Graph, Node, NodeId, OpCode, Target, TargetId, TargetKind, Value};
use crate::plan::{Callee, Plan};

/// Applies `plan` to `graph` and returns the rewritten graph. `graph` is not
/// changed.
///
/// # Errors
/// [`Error::InvalidGraph`] when `graph` itself breaks an IR invariant;
/// [`Error::Internal`] when the plan does not fit the graph (see
/// [`super::check`]) or when the edits leave an operand after its user.
pub fn apply_plan(graph: &Graph, plan: &Plan) -> Result<Graph> {
    validate(graph)?;
    let mut editor = IrEditor::new(graph);
    super::apply(graph, plan, &mut editor)?;
    editor.into_graph()
}

fn to_u32(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// The graph being edited: the original nodes first, then the inserted ones,
/// in a doubly linked list that gives the graph order. Handles and node
/// references inside values are indices into `nodes`.
pub struct IrEditor<'g> {
    graph: &'g Graph,
    nodes: Vec<Node>,
    /// Graph node each working node reports errors against: itself for an
    /// original node, its origin for an inserted one.
    origin: Vec<u32>,
    /// `(prev, next)` per list slot; slot 0 is the root, node `i` is slot
    /// `i + 1`.
    links: Vec<(usize, usize)>,
    users: Vec<BTreeSet<usize>>,
    erased: Vec<bool>,
    targets: Vec<Target>,
    namer: Namer,
}

impl<'g> IrEditor<'g> {
    /// An editor of a copy of `graph`.
    #[must_use]
    pub fn new(graph: &'g Graph) -> Self {
        let n = graph.len();
        let links = (0..=n)
            .map(|slot| {
                let prev = if slot == 0 { n } else { slot - 1 };
                let next = if slot == n { 0 } else { slot + 1 };
                (prev, next)
            })
            .collect();
        Self {
            graph,
            nodes: graph.nodes.clone(),
            origin: (0..n).map(to_u32).collect(),
            links,
            users: users_of(graph),
            erased: vec![false; n],
            targets: graph.targets.clone(),
            namer: Namer::new(graph),
        }
    }

    fn unlink(&mut self, i: usize) {
        let slot = i + 1;
        let (p, nx) = self.links[slot];
        self.links[p].1 = nx;
        self.links[nx].0 = p;
        self.links[slot] = (slot, slot);
    }

    /// Links node `i` (unlinked) just before node `before`.
    fn link_before(&mut self, i: usize, before: usize) {
        let (slot, bslot) = (i + 1, before + 1);
        let p = self.links[bslot].0;
        self.links[p].1 = slot;
        self.links[slot] = (p, bslot);
        self.links[bslot].0 = slot;
    }

    fn value(&self, a: &Arg<usize>) -> Result<Value> {
        Ok(match a {
            Arg::Node(i) => Value::Node(NodeId(to_u32(*i))),
            Arg::FromKwarg { node, id, key } => self.nodes[*node]
                .kwarg(key)
                .cloned()
                .ok_or_else(|| internal(id.0, format!("plan reads missing kwarg {key:?}")))?,
            Arg::FromArg { node, id, index } => self.nodes[*node]
                .args
                .get(*index)
                .cloned()
                .ok_or_else(|| internal(id.0, format!("plan reads missing argument {index}")))?,
            Arg::Int(i) => Value::Int(*i),
            Arg::IntList(v) => Value::List(v.iter().map(|&i| Value::Int(i)).collect()),
            Arg::None => Value::None,
            Arg::List(items) => {
                Value::List(items.iter().map(|i| self.value(i)).collect::<Result<_>>()?)
            }
        })
    }

    /// Interns `target` in the result graph.
    fn intern(&mut self, target: Target) -> TargetId {
        let pos = match self.targets.iter().position(|t| t.name == target.name) {
            Some(p) => p,
            None => {
                self.targets.push(target);
                self.targets.len() - 1
            }
        };
        TargetId(to_u32(pos))
    }

    /// The target an inserted node calls, interned in the result graph, and
    /// the FX name candidate of the callable (its `__name__`).
    fn callee(&mut self, callee: &Callee, at: u32) -> Result<(TargetId, String)> {
        match callee {
            Callee::Target(t) => {
                let target = self
                    .targets
                    .get(t.idx())
                    .ok_or_else(|| internal(at, format!("target {} out of range", t.0)))?;
                let name = if target.kind == TargetKind::Getitem {
                    "getitem".to_string()
                } else if let Some((_, rest)) = target.name.split_once("::") {
                    rest.to_string()
                } else {
                    target
                        .name
                        .rsplit('.')
                        .next()
                        .unwrap_or(&target.name)
                        .to_string()
                };
                Ok((*t, name))
            }
            Callee::Aten(name) => {
                let short = name.split_once("::").map_or(*name, |(_, r)| r).to_string();
                if let Some(pos) = self.targets.iter().position(|t| t.name == *name) {
                    return Ok((TargetId(to_u32(pos)), short));
                }
                let schema = aten_schema(name)
                    .ok_or_else(|| internal(at, format!("plan calls unknown operator {name}")))?;
                let id = self.intern(Target {
                    name: (*name).to_string(),
                    kind: TargetKind::Operator,
                    schema: Some(schema),
                });
                Ok((id, short))
            }
            Callee::Operator(op) => {
                let id = self.intern(Target {
                    name: format!("_operator.{op}"),
                    kind: TargetKind::Other,
                    schema: None,
                });
                Ok((id, (*op).to_string()))
            }
            Callee::Getitem => {
                let id = match self
                    .targets
                    .iter()
                    .position(|t| t.kind == TargetKind::Getitem)
                {
                    Some(p) => TargetId(to_u32(p)),
                    None => self.intern(Target {
                        name: "operator.getitem".into(),
                        kind: TargetKind::Getitem,
                        schema: None,
                    }),
                };
                Ok((id, "getitem".into()))
            }
        }
    }

    /// The edited graph, in list order and renumbered.
    ///
    /// # Errors
    /// [`Error::Internal`] when a node uses an erased node or comes before
    /// one of its operands.
    pub fn into_graph(mut self) -> Result<Graph> {
        let mut order = Vec::with_capacity(self.nodes.len());
        let mut slot = self.links[0].1;
        while slot != 0 && order.len() <= self.nodes.len() {
            let i = slot - 1;
            if !self.erased[i] {
                order.push(i);
            }
            slot = self.links[slot].1;
        }
        let mut new_index: Vec<Option<u32>> = vec![None; self.nodes.len()];
        for (k, &i) in order.iter().enumerate() {
            new_index[i] = Some(to_u32(k));
        }
        let mut out = Graph {
            targets: std::mem::take(&mut self.targets),
            nodes: Vec::with_capacity(order.len()),
        };
        let mut origins = Vec::with_capacity(order.len());
        for &i in &order {
            let mut node = std::mem::replace(&mut self.nodes[i], placeholder_node());
            let mut dangling = None;
            for v in node
                .args
                .iter_mut()
                .chain(node.kwargs.iter_mut().map(|(_, v)| v))
            {
                renumber(v, &new_index, &mut dangling);
            }
            if let Some(d) = dangling {
                return Err(internal(
                    self.origin[i],
                    format!("{} uses erased node #{d}", node.name),
                ));
            }
            out.nodes.push(node);
            origins.push(self.origin[i]);
        }
        match validate(&out) {
            Ok(()) => Ok(out),
            Err(Error::InvalidGraph { node, detail }) => {
                let at = node
                    .and_then(|k| origins.get(k as usize).copied())
                    .unwrap_or(0);
                Err(internal(
                    at,
                    format!("the rewritten graph is invalid: {detail}"),
                ))
            }
            Err(e) => Err(e),
        }
    }
}

impl Editor for IrEditor<'_> {
    type Handle = usize;

    fn original(&self, id: NodeId) -> Result<usize> {
        if id.idx() < self.graph.len() {
            Ok(id.idx())
        } else {
            Err(internal(id.0, "node out of range"))
        }
    }

    fn insert(&mut self, ins: Insertion<'_, usize>) -> Result<usize> {
        let at = ins.origin.0;
        let args = ins
            .args
            .iter()
            .map(|a| self.value(a))
            .collect::<Result<Vec<_>>>()?;
        let kwargs = ins
            .kwargs
            .iter()
            .map(|(k, a)| Ok((k.clone(), self.value(a)?)))
            .collect::<Result<Vec<_>>>()?;
        let (target, candidate) = self.callee(ins.callee, at)?;
        let node = Node {
            op: OpCode::CallFunction,
            name: self.namer.create(&snake_case(&candidate)),
            target,
            args,
            kwargs,
            meta: None,
            source: self.graph.node(ins.origin).source.clone(),
        };
        let me = self.nodes.len();
        if u32::try_from(me).is_err() {
            return Err(internal(at, "graph too large"));
        }
        for op in operands(&node) {
            if let Some(u) = self.users.get_mut(op) {
                u.insert(me);
            }
        }
        self.nodes.push(node);
        self.origin.push(ins.origin.0);
        self.users.push(BTreeSet::new());
        self.erased.push(false);
        self.links.push((me + 1, me + 1));
        self.link_before(me, ins.before);
        Ok(me)
    }

    fn move_before(&mut self, node: &usize, before: &usize) -> Result<()> {
        self.unlink(*node);
        self.link_before(*node, *before);
        Ok(())
    }

    fn replace_uses(&mut self, id: NodeId, from: &usize, to: &usize) -> Result<()> {
        let (from, to) = (*from, *to);
        if from == to {
            if self.users[from].is_empty() {
                return Ok(());
            }
            return Err(internal(
                id.0,
                format!("plan replaces {} with itself", self.nodes[from].name),
            ));
        }
        let users = std::mem::take(&mut self.users[from]);
        let (f, t) = (NodeId(to_u32(from)), NodeId(to_u32(to)));
        for &u in &users {
            let user = &mut self.nodes[u];
            for v in user
                .args
                .iter_mut()
                .chain(user.kwargs.iter_mut().map(|(_, v)| v))
            {
                replace_in(v, f, t);
            }
        }
        self.users[to].extend(users);
        Ok(())
    }

    // A scheduling hint for Inductor; the IR has no place for it and the
    // graph's values do not depend on it.
    fn realize(&mut self, _node: &usize) -> Result<()> {
        Ok(())
    }

    fn next(&self, node: &usize) -> Result<usize> {
        match self.links[node + 1].1 {
            0 => Err(internal(self.origin[*node], "no node after it")),
            slot => Ok(slot - 1),
        }
    }

    fn erase(&mut self, nodes: &[(NodeId, usize)]) -> Result<()> {
        let doomed: HashSet<usize> = nodes.iter().map(|&(_, n)| n).collect();
        for &(_, n) in nodes {
            if let Some(&u) = self.users[n].iter().find(|u| !doomed.contains(u)) {
                return Err(internal(
                    self.origin[n],
                    format!(
                        "{} is still used by {} after the plan",
                        self.nodes[n].name, self.nodes[u].name
                    ),
                ));
            }
        }
        for &(_, n) in nodes {
            if self.erased[n] {
                continue;
            }
            if let Some(&u) = self.users[n].iter().next() {
                return Err(internal(
                    self.origin[n],
                    format!(
                        "{} is erased before its user {}",
                        self.nodes[n].name, self.nodes[u].name
                    ),
                ));
            }
            self.erased[n] = true;
            for op in operands(&self.nodes[n]) {
                if let Some(us) = self.users.get_mut(op) {
                    us.remove(&n);
                }
            }
        }
        Ok(())
    }

    // Edits go to a copy, which the caller drops on failure.
    fn rollback(&mut self) {}
}

fn placeholder_node() -> Node {
    Node {
        op: OpCode::Placeholder,
        name: String::new(),
        target: TargetId(0),
        args: Vec::new(),
        kwargs: Vec::new(),
        meta: None,
        source: None,
    }
}

fn replace_in(v: &mut Value, from: NodeId, to: NodeId) {
    match v {
        Value::Node(n) if *n == from => *n = to,
        Value::List(items) | Value::Tuple(items) => {
            for item in items {
                replace_in(item, from, to);
            }
        }
        _ => {}
    }
}

fn renumber(v: &mut Value, new_index: &[Option<u32>], dangling: &mut Option<u32>) {
    match v {
        Value::Node(n) => match new_index.get(n.idx()).copied().flatten() {
            Some(k) => *n = NodeId(k),
            None => *dangling = Some(n.0),
        },
        Value::List(items) | Value::Tuple(items) => {
            for item in items {
                renumber(item, new_index, dangling);
            }
        }
        _ => {}
    }
}
