//! Applies a [`Plan`] to a graph in IR form, with the semantics the Python
//! applier (`python/fxrewrite/apply.py`) gives on a `torch.fx.Graph`.
//!
//! Edits run in order, in two passes, exactly as in Python:
//!
//! 1. A check pass over the edit list that resolves every reference and
//!    simulates use counts the way the Python applier does (a `Replace` adds
//!    the replaced node's users to its replacement, an `Erase` needs a count of
//!    zero and releases one use of each of the erased node's inputs).
//! 2. The edits themselves: `Insert` creates a node just before `before` (after
//!    nodes inserted or moved before it earlier), `Move` moves a node to just
//!    before `before`, `Replace` moves every current use of a node (uses by
//!    inserted nodes included) to its replacement, with FX
//!    `replace_all_uses_with` semantics, and `Erase` is deferred: once every
//!    other edit is applied, each erased node may only be used by other erased
//!    nodes, and nodes are erased in plan order.
//!
//! Inserted nodes are named as FX names them (`clone_default`,
//! `clone_default_1`, `slice_tensor`, `getitem_7`), get no tensor metadata and
//! inherit the source line of the node the plan names as their origin. Every
//! mismatch between the plan and the graph is an [`Error::Internal`]; the
//! result always passes [`validate`].

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::error::{Error, Result};
use crate::ir::schema::{AliasInfo, ArgType, OpSchema, OpTags, SchemaArg, SchemaReturn};
use crate::ir::validate::validate;
use crate::ir::{Graph, Node, NodeId, OpCode, Target, TargetId, TargetKind, Value};
use crate::plan::{Callee, Edit, MetaSource, Plan, PlanArg, ValueRef};

/// Applies `plan` to `graph` and returns the rewritten graph. `graph` is not
/// changed.
///
/// # Errors
/// [`Error::InvalidGraph`] when `graph` itself breaks an IR invariant;
/// [`Error::Internal`] when the plan does not fit the graph (a node id out of
/// range, a new node used before it is created, a missing keyword argument,
/// an unknown operator, erasing a node that is still used) or when the edits
/// leave an operand after its user.
pub fn apply_plan(graph: &Graph, plan: &Plan) -> Result<Graph> {
    validate(graph)?;
    let original_users = users_of(graph);
    check(graph, plan, &original_users)?;
    let mut work = Work::new(graph, original_users);
    for edit in &plan.edits {
        work.apply(edit, plan.new_nodes)?;
    }
    work.finish()
}

fn internal(node: u32, detail: impl Into<String>) -> Error {
    Error::Internal {
        node,
        detail: detail.into(),
    }
}

fn to_u32(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// The distinct users of every node, by index.
fn users_of(graph: &Graph) -> Vec<BTreeSet<usize>> {
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
fn operands(node: &Node) -> BTreeSet<usize> {
    let mut ops = BTreeSet::new();
    node.for_each_operand(|o| {
        ops.insert(o.idx());
    });
    ops
}

// ----- pass 1: the check ------------------------------------------------------

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

/// The check pass of the Python applier: resolves every reference and
/// simulates use counts on the original graph.
fn check(graph: &Graph, plan: &Plan, original_users: &[BTreeSet<usize>]) -> Result<()> {
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
        }
    }
    Ok(())
}

// ----- pass 2: the edits ------------------------------------------------------

/// The graph being edited: the original nodes first, then the inserted ones,
/// in a doubly linked list that gives the graph order. Node references inside
/// values are indices into `nodes`.
struct Work<'g> {
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
    to_erase: Vec<usize>,
    new_nodes: HashMap<u32, usize>,
    targets: Vec<Target>,
    namer: Namer,
}

impl<'g> Work<'g> {
    fn new(graph: &'g Graph, users: Vec<BTreeSet<usize>>) -> Self {
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
            users,
            erased: vec![false; n],
            to_erase: Vec::new(),
            new_nodes: HashMap::new(),
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

    fn resolve(&self, r: ValueRef, at: u32) -> Result<usize> {
        match r {
            ValueRef::Old(n) if n.idx() < self.graph.len() => Ok(n.idx()),
            ValueRef::Old(n) => Err(internal(n.0, "node out of range")),
            ValueRef::New(id) => self.new_nodes.get(&id.0).copied().ok_or_else(|| {
                internal(at, format!("new node {} used before it was created", id.0))
            }),
        }
    }

    fn value(&self, a: &PlanArg, at: u32) -> Result<Value> {
        Ok(match a {
            PlanArg::Ref(r) => Value::Node(NodeId(to_u32(self.resolve(*r, at)?))),
            PlanArg::FromKwarg { node, key } => {
                // Read now: earlier replacements may have rewritten it.
                self.nodes
                    .get(node.idx())
                    .filter(|_| node.idx() < self.graph.len())
                    .and_then(|n| n.kwarg(key))
                    .cloned()
                    .ok_or_else(|| internal(node.0, format!("plan reads missing kwarg {key:?}")))?
            }
            PlanArg::Int(i) => Value::Int(*i),
            PlanArg::IntList(v) => Value::List(v.iter().map(|&i| Value::Int(i)).collect()),
            PlanArg::None => Value::None,
            PlanArg::List(items) => Value::List(
                items
                    .iter()
                    .map(|i| self.value(i, at))
                    .collect::<Result<_>>()?,
            ),
        })
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
                self.targets.push(Target {
                    name: (*name).to_string(),
                    kind: TargetKind::Operator,
                    schema: Some(schema),
                });
                Ok((TargetId(to_u32(self.targets.len() - 1)), short))
            }
            Callee::Operator(op) => {
                let name = format!("_operator.{op}");
                let pos = match self.targets.iter().position(|t| t.name == name) {
                    Some(p) => p,
                    None => {
                        self.targets.push(Target {
                            name,
                            kind: TargetKind::Other,
                            schema: None,
                        });
                        self.targets.len() - 1
                    }
                };
                Ok((TargetId(to_u32(pos)), (*op).to_string()))
            }
            Callee::Getitem => {
                let pos = match self
                    .targets
                    .iter()
                    .position(|t| t.kind == TargetKind::Getitem)
                {
                    Some(p) => p,
                    None => {
                        self.targets.push(Target {
                            name: "operator.getitem".into(),
                            kind: TargetKind::Getitem,
                            schema: None,
                        });
                        self.targets.len() - 1
                    }
                };
                Ok((TargetId(to_u32(pos)), "getitem".into()))
            }
        }
    }

    fn apply(&mut self, edit: &Edit, declared: u32) -> Result<()> {
        match edit {
            Edit::Insert {
                id,
                before,
                callee,
                args,
                kwargs,
                origin,
                ..
            } => {
                let at = before.0;
                let b = self.resolve(ValueRef::Old(*before), at)?;
                let o = self.resolve(ValueRef::Old(*origin), at)?;
                if id.0 >= declared || self.new_nodes.contains_key(&id.0) {
                    return Err(internal(at, format!("bad new node id {}", id.0)));
                }
                let args = args
                    .iter()
                    .map(|a| self.value(a, at))
                    .collect::<Result<Vec<_>>>()?;
                let kwargs = kwargs
                    .iter()
                    .map(|(k, a)| Ok((k.clone(), self.value(a, at)?)))
                    .collect::<Result<Vec<_>>>()?;
                let (target, candidate) = self.callee(callee, at)?;
                let node = Node {
                    op: OpCode::CallFunction,
                    name: self.namer.create(&snake_case(&candidate)),
                    target,
                    args,
                    kwargs,
                    meta: None,
                    source: self.graph.node(*origin).source.clone(),
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
                self.origin.push(to_u32(o));
                self.users.push(BTreeSet::new());
                self.erased.push(false);
                self.links.push((me + 1, me + 1));
                self.link_before(me, b);
                self.new_nodes.insert(id.0, me);
            }
            Edit::Move { node, before } => {
                let n = self.resolve(ValueRef::Old(*node), node.0)?;
                let b = self.resolve(ValueRef::Old(*before), node.0)?;
                if n != b {
                    self.unlink(n);
                    self.link_before(n, b);
                }
            }
            Edit::Replace { node, with } => {
                let from = self.resolve(ValueRef::Old(*node), node.0)?;
                let to = self.resolve(*with, node.0)?;
                if from == to {
                    if self.users[from].is_empty() {
                        return Ok(());
                    }
                    return Err(internal(
                        node.0,
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
            }
            Edit::Erase { node } => {
                let n = self.resolve(ValueRef::Old(*node), node.0)?;
                self.to_erase.push(n);
            }
            // A scheduling hint for Inductor; the IR has no place for it and
            // the graph's values do not depend on it.
            Edit::Realize { node } => {
                self.resolve(ValueRef::Old(*node), node.0)?;
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<Graph> {
        let doomed: HashSet<usize> = self.to_erase.iter().copied().collect();
        for &n in &self.to_erase {
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
        // Plan order erases users before what they use.
        for i in 0..self.to_erase.len() {
            let n = self.to_erase[i];
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
        // Graph order, renumbered.
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

// ----- FX naming --------------------------------------------------------------

/// Python keywords, builtins and FX's custom builtins: never node names.
const ILLEGAL_NAMES: &[&str] = &[
    "False",
    "None",
    "True",
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "class",
    "continue",
    "def",
    "del",
    "elif",
    "else",
    "except",
    "finally",
    "for",
    "from",
    "global",
    "if",
    "import",
    "in",
    "is",
    "lambda",
    "nonlocal",
    "not",
    "or",
    "pass",
    "raise",
    "return",
    "try",
    "while",
    "with",
    "yield",
    "ArithmeticError",
    "AssertionError",
    "AttributeError",
    "BaseException",
    "BaseExceptionGroup",
    "BlockingIOError",
    "BrokenPipeError",
    "BufferError",
    "BytesWarning",
    "ChildProcessError",
    "ConnectionAbortedError",
    "ConnectionError",
    "ConnectionRefusedError",
    "ConnectionResetError",
    "DeprecationWarning",
    "EOFError",
    "Ellipsis",
    "EncodingWarning",
    "EnvironmentError",
    "Exception",
    "ExceptionGroup",
    "FileExistsError",
    "FileNotFoundError",
    "FloatingPointError",
    "FutureWarning",
    "GeneratorExit",
    "IOError",
    "ImportError",
    "ImportWarning",
    "IndentationError",
    "IndexError",
    "InterruptedError",
    "IsADirectoryError",
    "KeyError",
    "KeyboardInterrupt",
    "LookupError",
    "MemoryError",
    "ModuleNotFoundError",
    "NameError",
    "NotADirectoryError",
    "NotImplemented",
    "NotImplementedError",
    "OSError",
    "OverflowError",
    "PendingDeprecationWarning",
    "PermissionError",
    "ProcessLookupError",
    "RecursionError",
    "ReferenceError",
    "ResourceWarning",
    "RuntimeError",
    "RuntimeWarning",
    "StopAsyncIteration",
    "StopIteration",
    "SyntaxError",
    "SyntaxWarning",
    "SystemError",
    "SystemExit",
    "TabError",
    "TimeoutError",
    "TypeError",
    "UnboundLocalError",
    "UnicodeDecodeError",
    "UnicodeEncodeError",
    "UnicodeError",
    "UnicodeTranslateError",
    "UnicodeWarning",
    "UserWarning",
    "ValueError",
    "Warning",
    "ZeroDivisionError",
    "__build_class__",
    "__debug__",
    "__doc__",
    "__import__",
    "__loader__",
    "__name__",
    "__package__",
    "__spec__",
    "abs",
    "aiter",
    "all",
    "anext",
    "any",
    "ascii",
    "bin",
    "bool",
    "breakpoint",
    "bytearray",
    "bytes",
    "callable",
    "chr",
    "classmethod",
    "compile",
    "complex",
    "copyright",
    "credits",
    "delattr",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "eval",
    "exec",
    "exit",
    "filter",
    "float",
    "format",
    "frozenset",
    "getattr",
    "globals",
    "hasattr",
    "hash",
    "help",
    "hex",
    "id",
    "input",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "license",
    "list",
    "locals",
    "map",
    "max",
    "memoryview",
    "min",
    "next",
    "object",
    "oct",
    "open",
    "ord",
    "pow",
    "print",
    "property",
    "quit",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "staticmethod",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "vars",
    "zip",
    "inf",
    "nan",
    "NoneType",
    "torch",
    "device",
    "fx_pytree",
    "pytree",
];

/// `torch.fx.graph._snake_case`: an underscore before each capital that
/// follows a lower-case letter, then lower case.
fn snake_case(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    let mut prev_lower = false;
    for c in s.chars() {
        if prev_lower && c.is_ascii_uppercase() {
            out.push('_');
        }
        prev_lower = c.is_ascii_lowercase();
        out.extend(c.to_lowercase());
    }
    out
}

/// `name_N` -> (`name`, N), as FX's `(.*)_(\d+)$`.
fn split_suffix(name: &str) -> Option<(&str, u64)> {
    let (base, digits) = name.rsplit_once('_')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((base, digits.parse().ok()?))
}

/// The name allocator of an FX graph (`torch.fx.graph._Namespace`),
/// reconstructed from the names already in the graph.
struct Namer {
    used: HashSet<String>,
    base_count: HashMap<String, u64>,
}

impl Namer {
    fn new(graph: &Graph) -> Self {
        let mut used = HashSet::new();
        let mut base_count: HashMap<String, u64> = HashMap::new();
        for node in &graph.nodes {
            let (base, num) = split_suffix(&node.name).unwrap_or((&node.name, 0));
            let c = base_count.entry(base.to_string()).or_insert(0);
            *c = (*c).max(num);
            used.insert(node.name.clone());
        }
        Self { used, base_count }
    }

    fn taken(&self, name: &str) -> bool {
        self.used.contains(name) || ILLEGAL_NAMES.contains(&name)
    }

    /// `_Namespace.create_name(candidate, None)`.
    fn create(&mut self, candidate: &str) -> String {
        let mut clean = String::with_capacity(candidate.len());
        let mut in_illegal = false;
        for c in candidate.chars() {
            if c.is_ascii_alphanumeric() || c == '_' {
                clean.push(c);
                in_illegal = false;
            } else if !in_illegal {
                clean.push('_');
                in_illegal = true;
            }
        }
        if clean.is_empty() {
            clean = "_unnamed".into();
        }
        if clean.starts_with(|c: char| c.is_ascii_digit()) {
            clean.insert(0, '_');
        }
        let (base, num) = match split_suffix(&clean) {
            Some((b, n)) => (b.to_string(), Some(n)),
            None => (clean.clone(), None),
        };
        let mut name = match num {
            Some(n) => format!("{base}_{n}"),
            None => base.clone(),
        };
        let mut num = match num {
            Some(n) if n != 0 => n,
            _ => self.base_count.get(&base).copied().unwrap_or(0),
        };
        while self.taken(&name) {
            num += 1;
            name = format!("{base}_{num}");
        }
        self.used.insert(name.clone());
        self.base_count.insert(base, num);
        name
    }
}

// ----- schemas of the operators the engine inserts ------------------------------

fn sarg(name: &str, ty: ArgType, alias: Option<(&str, bool)>, kwarg_only: bool) -> SchemaArg {
    SchemaArg {
        name: name.into(),
        ty,
        alias: alias.map(|(set, is_write)| AliasInfo {
            set: set.into(),
            is_write,
        }),
        kwarg_only,
    }
}

fn sret(alias: Option<(&str, bool)>) -> SchemaReturn {
    SchemaReturn {
        ty: ArgType::Tensor,
        alias: alias.map(|(set, is_write)| AliasInfo {
            set: set.into(),
            is_write,
        }),
    }
}

/// The schema of an aten operator the engine may insert, as the Python
/// encoder reads it from `OpOverload._schema`.
#[must_use]
pub fn aten_schema(name: &str) -> Option<OpSchema> {
    use ArgType::{Other, Tensor};
    let view = Some(("a", false));
    let (args, returns, tags) = match name {
        // clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor
        "aten::clone.default" => (
            vec![
                sarg("self", Tensor, None, false),
                sarg("memory_format", Other, None, true),
            ],
            vec![sret(None)],
            OpTags::default(),
        ),
        // alias(Tensor(a) self) -> Tensor(a)
        "aten::alias.default" => (
            vec![sarg("self", Tensor, view, false)],
            vec![sret(view)],
            OpTags::default(),
        ),
        // slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None,
        //              SymInt? end=None, SymInt step=1) -> Tensor(a)
        "aten::slice.Tensor" => (
            vec![
                sarg("self", Tensor, view, false),
                sarg("dim", Other, None, false),
                sarg("start", Other, None, false),
                sarg("end", Other, None, false),
                sarg("step", Other, None, false),
            ],
            vec![sret(view)],
            OpTags::default(),
        ),
        // as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride,
        //            SymInt? storage_offset=None) -> Tensor(a)
        "aten::as_strided.default" => (
            vec![
                sarg("self", Tensor, view, false),
                sarg("size", Other, None, false),
                sarg("stride", Other, None, false),
                sarg("storage_offset", Other, None, false),
            ],
            vec![sret(view)],
            OpTags::default(),
        ),
        // empty_strided(SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None,
        //               Layout? layout=None, Device? device=None,
        //               bool? pin_memory=None) -> Tensor
        "aten::empty_strided.default" => (
            vec![
                sarg("size", Other, None, false),
                sarg("stride", Other, None, false),
                sarg("dtype", Other, None, true),
                sarg("layout", Other, None, true),
                sarg("device", Other, None, true),
                sarg("pin_memory", Other, None, true),
            ],
            vec![sret(None)],
            OpTags::default(),
        ),
        // copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)
        "aten::copy_.default" => (
            vec![
                sarg("self", Tensor, Some(("a", true)), false),
                sarg("src", Tensor, None, false),
                sarg("non_blocking", Other, None, false),
            ],
            vec![sret(Some(("a", true)))],
            OpTags {
                inplace: true,
                ..OpTags::default()
            },
        ),
        // sym_size.int(Tensor self, int dim) -> SymInt, and sym_stride alike
        "aten::sym_size.int" | "aten::sym_stride.int" => (
            vec![
                sarg("self", Tensor, None, false),
                sarg("dim", Other, None, false),
            ],
            vec![SchemaReturn {
                ty: Other,
                alias: None,
            }],
            OpTags::default(),
        ),
        _ => return None,
    };
    Some(OpSchema {
        args,
        returns,
        tags,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_fx() {
        assert_eq!(snake_case("clone.default"), "clone.default");
        assert_eq!(snake_case("slice.Tensor"), "slice.tensor");
        assert_eq!(snake_case("div.Tensor_mode"), "div.tensor_mode");
        assert_eq!(snake_case("fooBar.default"), "foo_bar.default");
        let mut g = Graph::new();
        let t = g.add_target(Target {
            name: "x".into(),
            kind: TargetKind::Other,
            schema: None,
        });
        for name in ["getitem", "getitem_1", "getitem_6", "clone_default"] {
            g.add_node(Node {
                op: OpCode::Placeholder,
                name: name.into(),
                target: t,
                args: vec![],
                kwargs: vec![],
                meta: None,
                source: None,
            });
        }
        let mut namer = Namer::new(&g);
        assert_eq!(namer.create("getitem"), "getitem_7");
        assert_eq!(namer.create("getitem"), "getitem_8");
        assert_eq!(namer.create("clone.default"), "clone_default_1");
        assert_eq!(namer.create("copy_.default"), "copy__default");
        assert_eq!(namer.create("slice.tensor"), "slice_tensor");
        assert_eq!(namer.create("slice"), "slice_1");
        assert_eq!(namer.create("x_007"), "x_7");
        assert_eq!(namer.create("9lives"), "_9lives");
        assert_eq!(namer.create(""), "_unnamed");
    }

    #[test]
    fn every_inserted_aten_op_has_a_schema() {
        for name in [
            "aten::clone.default",
            "aten::alias.default",
            "aten::slice.Tensor",
            "aten::as_strided.default",
            "aten::empty_strided.default",
            "aten::copy_.default",
        ] {
            assert!(aten_schema(name).is_some(), "{name}");
        }
        let s = aten_schema("aten::slice.Tensor").unwrap();
        assert_eq!(s.view_source(), Some(0));
        let c = aten_schema("aten::copy_.default").unwrap();
        assert!(c.is_mutable());
        assert_eq!(c.written_return_source(0), Some(0));
        assert!(aten_schema("aten::nope.default").is_none());
    }
}
