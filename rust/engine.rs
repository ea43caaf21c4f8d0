//! The engine: one forward walk over an analysed graph that asks the
//! registered rules to plan every auto_functionalized node, and keeps the
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

use crate::analysis::alias::{classify, Geometry, Role, ViewStep};
use crate::analysis::liveness::{for_each_reader, last_reads, reads};
use crate::analysis::uses::Uses;
use crate::error::Result;
use crate::ir::validate::validate;
use crate::ir::{Graph, NodeId, OpCode, TargetId, TargetKind};
use crate::plan::{
    Action, Callee, CloneNote, Edit, MetaSource, NewId, NodeReport, Plan, PlanArg, Report, ValueRef,
};
use crate::rules::call::{CallArg, MutationCall, ResultSlot, ViewOfBuffer};
use crate::rules::{registry, Outcome};

/// Largest number of nodes moved ahead of one call; past it, a clone is
/// cheaper to reason about than a long reordering.
const MAX_MOVED: usize = 64;

/// A parsed out= call (see `rules::out_buffers_v2`).
#[derive(Clone, Debug, PartialEq)]
pub struct OutCall {
    /// The auto_functionalized node.
    pub node: NodeId,
    /// The operator.
    pub op: TargetId,
    /// Schema arguments: name, keyword-only, and for written ones the keys of
    /// size, stride, dtype and device.
    pub args: Vec<(String, bool, Option<[String; 4]>)>,
    /// For each return, the written argument (in written order) it aliases.
    pub return_buffers: Vec<Option<usize>>,
    /// Number of operator returns.
    pub n_returns: usize,
}

/// How a node's geometry derives from another node's.
#[derive(Clone, Debug)]
enum Link {
    Root,
    Same(NodeId),
    Step(NodeId, ViewStep),
}

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

/// The state of one planning walk. Rules use it through
/// [`Context::rewrite_mutation`] and [`Context::rewrite_out_call`].
pub struct Context<'g> {
    graph: &'g Graph,
    roles: Vec<Role>,
    uses: Uses,
    last_read: Vec<Option<u32>>,
    pos: Vec<i64>,
    parent: Vec<u32>,
    members: Vec<Vec<NodeId>>,
    inputs: Vec<Vec<NodeId>>,
    latest: Vec<u32>,
    ver: Vec<u32>,
    link: Vec<Link>,
    writeback: HashMap<NodeId, NodeId>,
    foreign: HashSet<NodeId>,
    binds: HashMap<NodeId, Vec<Bind>>,
    scatter_binds: HashMap<NodeId, (NodeId, u32)>,
    clone_reps: HashMap<(NodeId, usize), NodeId>,
    /// Results bound to a clone, and the buffer whose layout the clone has.
    same_layout: HashMap<NodeId, NodeId>,
    replaced: HashMap<NodeId, ValueRef>,
    storage_keys: HashMap<u64, NodeId>,
    next_event: u32,
    edits: Vec<Edit>,
    new_nodes: u32,
    report: Report,
    /// Every buffer re-inplaced, with the position of the call writing it.
    writes: Vec<(NodeId, i64)>,
}

/// Plans the rewrite of every auto_functionalized node of `graph`.
///
/// # Errors
/// [`crate::Error::InvalidGraph`] when the graph breaks an IR invariant. Nodes
/// the rules cannot handle are not errors: they are reported as left alone.
pub fn plan(graph: &Graph) -> Result<Plan> {
    validate(graph)?;
    let mut cx = Context::new(graph);
    cx.run();
    cx.realize_early_readers();
    Ok(cx.finish())
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
        for (i, role) in roles.iter().enumerate() {
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
            binds: HashMap::default(),
            scatter_binds: HashMap::default(),
            clone_reps: HashMap::default(),
            same_layout: HashMap::default(),
            replaced: HashMap::default(),
            storage_keys: HashMap::default(),
            next_event: 1,
            writes: Vec::new(),
            edits: Vec::new(),
            new_nodes: 0,
            report: Report {
                nodes: n,
                ..Report::default()
            },
        }
    }

    /// The graph being planned.
    #[must_use]
    pub fn graph(&self) -> &'g Graph {
        self.graph
    }

    // ----- storage classes -------------------------------------------------

    fn find(&mut self, n: NodeId) -> usize {
        let mut r = n.idx();
        while self.parent[r] as usize != r {
            r = self.parent[r] as usize;
        }
        let mut c = n.idx();
        while self.parent[c] as usize != r {
            let next = self.parent[c] as usize;
            self.parent[c] = u32::try_from(r).unwrap_or(u32::MAX);
            c = next;
        }
        r
    }

    fn union(&mut self, a: NodeId, b: NodeId) -> usize {
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

    fn geometry(&self, n: NodeId) -> Geometry {
        let mut steps_rev: Vec<&ViewStep> = Vec::new();
        let mut cur = n;
        loop {
            match &self.link[cur.idx()] {
                Link::Root => break,
                Link::Same(m) => cur = *m,
                Link::Step(m, s) => {
                    steps_rev.push(s);
                    cur = *m;
                }
            }
        }
        let mut g = Geometry {
            root: cur,
            steps: Vec::new(),
        };
        for s in steps_rev.into_iter().rev() {
            g = g.then(s);
        }
        g
    }

    fn same_target(&self, n: NodeId) -> NodeId {
        match &self.link[n.idx()] {
            Link::Same(m) => *m,
            _ => n,
        }
    }

    /// The node whose metadata gives `n`'s layout: `n` itself, or when it
    /// has none, the node it is the same memory and geometry as (a result
    /// bound to its buffer).
    fn layout_source(&self, n: NodeId) -> NodeId {
        let mut cur = n;
        while self.graph.node(cur).meta.is_none() {
            match (self.link[cur.idx()].clone(), self.same_layout.get(&cur)) {
                (Link::Same(m), _) if m != cur => cur = m,
                (_, Some(&m)) if m != cur => cur = m,
                _ => break,
            }
        }
        cur
    }

    fn resolve(&self, n: NodeId) -> ValueRef {
        self.replaced.get(&n).copied().unwrap_or(ValueRef::Old(n))
    }

    // ----- the walk --------------------------------------------------------

    fn run(&mut self) {
        for i in 0..self.graph.len() {
            let id = nid(i);
            let role = self.roles[i].clone();
            let mut storage_union = true;
            match role {
                Role::Input => self.inputs[i].push(id),
                Role::View { src, step, .. } => {
                    let r = self.union(id, src);
                    self.ver[i] = self.ver[src.idx()];
                    let _ = r;
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
                    for w in written {
                        self.union(id, w);
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
                    // A chain analysis that was then discarded may have set a link.
                    self.link[i] = Link::Root;
                    if let Some(&(base, event)) = self.scatter_binds.get(&id) {
                        let r = self.union(id, base);
                        self.ver[i] = event;
                        let _ = r;
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
    }

    fn union_by_storage_key(&mut self, id: NodeId) {
        let Some(key) = self.graph.node(id).meta.as_ref().and_then(|m| m.storage) else {
            return;
        };
        match self.storage_keys.get(&key).copied() {
            Some(first) => {
                let before = self.find(id);
                let r = self.union(id, first);
                let _ = before;
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
        let rule = registry()
            .iter()
            .find(|r| r.matches(self.graph, id))
            .copied();
        let form = if self.graph.target_of(id).kind == TargetKind::AutoFunctionalized {
            "v1"
        } else {
            "v2"
        };
        let op_name = match self.graph.node(id).args.first() {
            Some(crate::ir::Value::Target(t)) => self.graph.targets[t.idx()].name.clone(),
            _ => "<unknown>".into(),
        };
        let outcome = match rule {
            Some(r) => r.plan(self, id),
            None => Outcome::Left("no rule handles this node".into()),
        };
        if let Outcome::Left(reason) = outcome {
            let node = self.graph.node(id);
            self.report.decisions.push(NodeReport {
                node: node.name.clone(),
                op: op_name,
                form,
                rule: rule.map_or("none", |r| r.name()),
                action: Action::Left,
                moved: vec![],
                clones: vec![],
                scatters_removed: 0,
                reason: Some(reason),
                source: node.source.clone(),
            });
        }
    }

    // ----- edits -----------------------------------------------------------

    fn insert(
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

    fn replace(&mut self, node: NodeId, with: ValueRef) {
        let with = match with {
            ValueRef::Old(n) => self.resolve(n),
            v @ ValueRef::New(_) => v,
        };
        self.replaced.insert(node, with);
        self.edits.push(Edit::Replace { node, with });
    }

    fn erase(&mut self, node: NodeId) {
        self.edits.push(Edit::Erase { node });
    }

    // ----- safety ----------------------------------------------------------

    /// Readers after position `p` of versions of class `root` older than the
    /// call being planned. Members whose last reader is already behind `p`
    /// are dropped for good: later calls are further down the graph.
    fn hazards(
        &mut self,
        root: usize,
        af: NodeId,
        excluded: &HashSet<NodeId>,
        cut: Option<(NodeId, i64)>,
        written: Option<&[Geometry]>,
    ) -> Vec<(NodeId, NodeId)> {
        let p = self.pos[af.idx()];
        let members = std::mem::take(&mut self.members[root]);
        let mut kept = Vec::with_capacity(members.len());
        let mut found: Vec<(NodeId, NodeId)> = Vec::new();
        for m in members {
            match self.last_read[m.idx()] {
                Some(lr) if 2 * i64::from(lr) > p => {}
                _ => continue,
            }
            kept.push(m);
            let in_input_family = cut.is_some_and(|(input, _)| {
                structural_root(&self.roles, m) == input && self.ver[m.idx()] == 0
            });
            let pos = &self.pos;
            let this = &*self;
            for_each_reader(&self.roles, &self.uses, m, &mut |r, via| {
                // Readers after the write-back see the final value anyway; the
                // write-back itself reads its source and counts.
                let after_cut = cut.is_some_and(|(_, c)| pos[r.idx()] > c) && in_input_family;
                if pos[r.idx()] > p
                    && r != af
                    && !excluded.contains(&r)
                    && !after_cut
                    && !found.iter().any(|(x, _)| *x == r)
                {
                    // A reader of a part of the buffer the call does not
                    // write (the `v` of a split qkv) sees no change.
                    let untouched = written.is_some_and(|ws| {
                        let g = this.view_geometry(via, p);
                        ws.iter().all(|w| provably_disjoint(w, &g))
                    });
                    if !untouched {
                        found.push((r, m));
                    }
                }
                true
            });
        }
        self.members[root] = kept;
        found
    }

    /// Geometry of a view that may not be walked yet: its chain of view
    /// steps back to a node at or before position `p`, whose geometry is known.
    fn view_geometry(&self, n: NodeId, p: i64) -> Geometry {
        let mut steps: Vec<&ViewStep> = Vec::new();
        let mut cur = n;
        while self.pos[cur.idx()] > p {
            match &self.roles[cur.idx()] {
                Role::View { src, step, .. } => {
                    steps.extend(step.iter());
                    cur = *src;
                }
                _ => break,
            }
        }
        let mut g = self.geometry(cur);
        for s in steps.into_iter().rev() {
            g = g.then(s);
        }
        g
    }

    /// True when read argument `read` provably touches no element that the
    /// call writes in buffer `b` (the other half of a `chunk`): the kernel
    /// may then read it while writing the buffer in place.
    fn read_is_disjoint(&self, call: &MutationCall, b: usize, read: NodeId) -> bool {
        let Some(written) = self.written_geometries(call, &[b]) else {
            return false;
        };
        let g = self.view_geometry(read, self.pos[call.node.idx()]);
        !written.is_empty() && written.iter().all(|w| provably_disjoint(w, &g))
    }

    /// Geometries of the regions the accepted buffers' written arguments
    /// cover, or `None` when one of them is not modelled.
    fn written_geometries(&self, call: &MutationCall, accepted: &[usize]) -> Option<Vec<Geometry>> {
        let n = self.graph.node(call.node);
        let mut out = Vec::new();
        for w in call.written.iter().filter(|w| accepted.contains(&w.buffer)) {
            let base = self.geometry(call.buffers[w.buffer].node);
            out.push(match &w.view {
                ViewOfBuffer::Whole | ViewOfBuffer::Alias => base,
                ViewOfBuffer::Slice { keys } => {
                    let get = |k: &String| n.kwarg(k).and_then(crate::ir::Value::as_int);
                    let (dim, start, end) = (get(&keys[0])?, get(&keys[1])?, get(&keys[2])?);
                    if dim < 0 || start < 0 || end < start {
                        return None;
                    }
                    base.then(&ViewStep::Slice {
                        dim,
                        start,
                        end,
                        step: 1,
                    })
                }
                ViewOfBuffer::AsStrided { .. } => return None,
            });
        }
        Some(out)
    }

    fn movable(&self, n: NodeId) -> bool {
        let node = self.graph.node(n);
        if node.op != OpCode::CallFunction || self.scatter_binds.contains_key(&n) {
            return false;
        }
        let target = self.graph.target_of(n);
        match (&self.roles[n.idx()], target.kind) {
            (
                Role::Fresh | Role::View { .. } | Role::MetaOnly | Role::Scatter { .. },
                TargetKind::Operator,
            ) => target
                .schema
                .as_ref()
                .is_some_and(|s| !s.is_mutable() && !s.tags.nondeterministic),
            (Role::Fresh | Role::View { .. }, TargetKind::Getitem) => true,
            _ => false,
        }
    }

    fn closure(&self, n: NodeId, af: NodeId, set: &mut BTreeSet<NodeId>) -> bool {
        let p = self.pos[af.idx()];
        if self.pos[n.idx()] < p || set.contains(&n) {
            return true;
        }
        if n == af || !self.movable(n) || set.len() >= MAX_MOVED {
            return false;
        }
        set.insert(n);
        let mut ops = Vec::new();
        self.graph.node(n).for_each_operand(|o| ops.push(o));
        ops.into_iter().all(|o| self.closure(o, af, set))
    }

    fn plan_moves(
        &self,
        hazards: &[(NodeId, NodeId)],
        af: NodeId,
    ) -> std::result::Result<BTreeSet<NodeId>, NodeId> {
        let mut set = BTreeSet::new();
        for &(r, _) in hazards {
            if !self.closure(r, af, &mut set) {
                return Err(r);
            }
        }
        Ok(set)
    }

    fn overlapping_view(&self, n: NodeId) -> bool {
        let mut cur = n;
        while let Role::View {
            src, overlapping, ..
        } = &self.roles[cur.idx()]
        {
            if *overlapping {
                return true;
            }
            cur = *src;
            if let Link::Same(m) = self.link[cur.idx()] {
                cur = m;
            }
        }
        let meta = self.graph.node(n).meta.as_ref();
        meta.and_then(|m| {
            Some(
                m.shape
                    .as_ref()?
                    .iter()
                    .zip(m.stride.as_ref()?)
                    .any(|(&s, &st)| st == 0 && s > 1),
            )
        })
        .unwrap_or(false)
    }

    fn reader_note(&self, arg: &str, reader: NodeId, bytes: Option<u64>, why: &str) -> CloneNote {
        let r = self.graph.node(reader);
        CloneNote {
            arg: arg.to_string(),
            reason: format!("{why} `{}` reads the old value after the call", r.name),
            reader: Some(r.name.clone()),
            reader_source: r.source.clone(),
            bytes,
        }
    }

    fn plain_note(arg: &str, reason: String, bytes: Option<u64>) -> CloneNote {
        CloneNote {
            arg: arg.to_string(),
            reason,
            reader: None,
            reader_source: None,
            bytes,
        }
    }

    /// v1 write-back elimination: the scatters that put the new values of the
    /// re-inplaced views of class `root` back into their base. Returns the
    /// chain (node -> (chain base, exact)) when every scatter can go, `None`
    /// when the pattern is not provably a pure write-back.
    fn scatter_chain(
        &mut self,
        call: &MutationCall,
        accepted: &[usize],
        root: usize,
    ) -> Option<BTreeMap<NodeId, (NodeId, bool)>> {
        let af = call.node;
        let mut chain: BTreeMap<NodeId, (NodeId, bool)> = BTreeMap::new();
        let mut pending_of: HashMap<NodeId, Vec<usize>> = HashMap::default();
        let mut exact_src: HashSet<NodeId> = HashSet::default();
        let arg_geom: Vec<(usize, Geometry)> = accepted
            .iter()
            .map(|&b| (b, self.geometry(call.buffers[b].node)))
            .collect();
        let mut queue: BTreeSet<NodeId> = BTreeSet::new();
        for &u in self.uses.users(af) {
            if let Role::AfResult { index, .. } = self.roles[u.idx()] {
                if let Some(ResultSlot::Buffer(b)) = call.results.get(index) {
                    if accepted.contains(b) {
                        exact_src.insert(u);
                        self.link[u.idx()] = Link::Same(self.same_target(call.buffers[*b].node));
                        self.queue_users_through_views(u, &mut queue);
                    }
                }
            }
        }
        let latest = self.latest[root];
        let p = self.pos[af.idx()];
        while let Some(sc) = queue.pop_first() {
            let Role::Scatter { base, src, step } = self.roles[sc.idx()].clone() else {
                continue;
            };
            if chain.contains_key(&sc) {
                continue;
            }
            // The source: a new value, or a view of one taken after the call
            // (`squeeze` undoing the `unsqueeze` of the written argument).
            let Some(src_geom) = self.geometry_through_views(src, &exact_src) else {
                continue;
            };
            let mut pending = if let Some(p) = pending_of.get(&base) {
                p.clone()
            } else {
                // The base: the buffer's memory before the call, or a view
                // of it taken after the call (the same `reshape` the written
                // argument was cut through, made again for the write-back).
                let anchor = self.view_anchor(base, p)?;
                if self.find(anchor) != root || self.ver[anchor.idx()] != latest {
                    return None;
                }
                self.link_views_ahead(base, p);
                accepted.to_vec()
            };
            if self.geometry(base).then(&step) != src_geom {
                return None;
            }
            pending.retain(|b| {
                let g = &arg_geom.iter().find(|(x, _)| x == b).map(|(_, g)| g);
                !g.is_some_and(|g| g.root == src_geom.root && g.steps.starts_with(&src_geom.steps))
            });
            self.link[sc.idx()] = Link::Same(self.same_target(base));
            let geom = self.geometry(sc);
            let exact = pending.iter().all(|b| {
                arg_geom
                    .iter()
                    .find(|(x, _)| x == b)
                    .is_some_and(|(_, g)| provably_disjoint(g, &geom))
            });
            let chain_base = chain.get(&base).map_or(base, |(cb, _)| *cb);
            chain.insert(sc, (chain_base, exact));
            pending_of.insert(sc, pending);
            if exact {
                exact_src.insert(sc);
            }
            self.queue_users_through_views(sc, &mut queue);
        }
        for (sc, (_, exact)) in &chain {
            if !exact && self.uses.users(*sc).iter().any(|u| !chain.contains_key(u)) {
                return None;
            }
        }
        Some(chain)
    }

    /// Queues the users of `n`, and of the views of `n`, for the write-back
    /// chain search.
    fn queue_users_through_views(&self, n: NodeId, queue: &mut BTreeSet<NodeId>) {
        for &u in self.uses.users(n) {
            queue.insert(u);
            if matches!(self.roles[u.idx()], Role::View { src, overlapping: false, .. } if src == n)
            {
                self.queue_users_through_views(u, queue);
            }
        }
    }

    /// Geometry of `n` when it is one of `exact` or a chain of
    /// non-overlapping views of one; `None` otherwise.
    fn geometry_through_views(&self, n: NodeId, exact: &HashSet<NodeId>) -> Option<Geometry> {
        let mut steps: Vec<&ViewStep> = Vec::new();
        let mut cur = n;
        while !exact.contains(&cur) {
            match &self.roles[cur.idx()] {
                Role::View {
                    src,
                    step,
                    overlapping: false,
                } => {
                    steps.extend(step.iter());
                    cur = *src;
                }
                _ => return None,
            }
        }
        let mut g = self.geometry(cur);
        for s in steps.into_iter().rev() {
            g = g.then(s);
        }
        Some(g)
    }

    /// The node at or before position `p` that `n` is a chain of
    /// non-overlapping views of (`n` itself when it is there already).
    fn view_anchor(&self, n: NodeId, p: i64) -> Option<NodeId> {
        let mut cur = n;
        while self.pos[cur.idx()] > p {
            match &self.roles[cur.idx()] {
                Role::View {
                    src,
                    overlapping: false,
                    ..
                } => cur = *src,
                _ => return None,
            }
        }
        Some(cur)
    }

    /// Gives the views between `n` and its anchor (not walked yet) the
    /// links the walk will give them, so that geometries through them
    /// resolve now.
    fn link_views_ahead(&mut self, n: NodeId, p: i64) {
        let mut chain = Vec::new();
        let mut cur = n;
        while self.pos[cur.idx()] > p {
            let Role::View { src, step, .. } = &self.roles[cur.idx()] else {
                break;
            };
            chain.push((cur, *src, step.clone()));
            cur = *src;
        }
        for (v, src, step) in chain.into_iter().rev() {
            self.link[v.idx()] = match step {
                None => Link::Same(self.same_target(src)),
                Some(s) => Link::Step(src, s),
            };
        }
    }

    /// Plans a generic mutating call (v1 or v2): the shared safety analysis.
    pub fn rewrite_mutation(
        &mut self,
        call: &MutationCall,
        rule: &'static str,
        v1: bool,
    ) -> Outcome {
        let af = call.node;
        if let Err(reason) = self.check_users(call) {
            return Outcome::Left(reason);
        }
        let nb = call.buffers.len();
        let bytes: Vec<Option<u64>> = call
            .buffers
            .iter()
            .map(|b| {
                self.graph
                    .node(b.node)
                    .meta
                    .as_ref()
                    .and_then(crate::ir::TensorMeta::nbytes)
            })
            .collect();
        let mut clone: Vec<Option<CloneNote>> = vec![None; nb];
        let mut moved: BTreeSet<NodeId> = BTreeSet::new();
        let mut chains: Vec<BTreeMap<NodeId, (NodeId, bool)>> = Vec::new();
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for b in 0..nb {
            let node = call.buffers[b].node;
            let r = self.find(node);
            match groups.iter_mut().find(|(gr, _)| *gr == r) {
                Some((_, v)) => v.push(b),
                None => groups.push((r, vec![b])),
            }
        }
        // A read argument that aliased a written one in the user's program
        // (`foo(out, out)`) keeps its aliasing: eager ran the kernel on it.
        let read_roots: Vec<(usize, NodeId)> = call
            .read_nodes
            .iter()
            .filter(|(name, _)| !call.user_aliased_reads.contains(name))
            .map(|&(_, n)| (self.find(n), n))
            .collect();
        for (root, bufs) in groups {
            let mut accepted: Vec<usize> = Vec::new();
            for &b in &bufs {
                let buf = &call.buffers[b];
                let label = buf.label.clone();
                if self.overlapping_view(buf.node) {
                    clone[b] = Some(Self::plain_note(
                        &label,
                        "the written view may overlap itself (expand or zero stride)".into(),
                        bytes[b],
                    ));
                } else if self
                    .foreign
                    .contains(&structural_root(&self.roles, buf.node))
                {
                    clone[b] = Some(Self::plain_note(
                        &label,
                        "the buffer is also written by another in-place operator".into(),
                        bytes[b],
                    ));
                } else if let Some((_, rn)) = read_roots
                    .iter()
                    .find(|(rr, rn)| *rr == root && !self.read_is_disjoint(call, b, *rn))
                {
                    let rname = self.graph.node(*rn).name.clone();
                    clone[b] = Some(Self::plain_note(
                        &label,
                        format!("read argument `{rname}` shares memory with it"),
                        bytes[b],
                    ));
                } else if let Some(&other) = accepted.iter().find(|&&o| {
                    !v1 || !self
                        .geometry(call.buffers[o].node)
                        .disjoint_from(&self.geometry(buf.node))
                }) {
                    let oname = call.buffers[other].label.clone();
                    clone[b] = Some(Self::plain_note(
                        &label,
                        format!("shares memory with written `{oname}`"),
                        bytes[b],
                    ));
                } else {
                    accepted.push(b);
                }
            }
            if accepted.is_empty() {
                continue;
            }
            let inputs = self.inputs[root].clone();
            let mut cut = None;
            let mut refuse: Option<String> = None;
            if inputs.len() > 1 {
                refuse = Some("the buffer aliases several graph inputs".into());
            } else if let Some(&x) = inputs.first() {
                match self.writeback.get(&x) {
                    Some(&c) if self.pos[c.idx()] > self.pos[af.idx()] => {
                        cut = Some((x, self.pos[c.idx()]))
                    }
                    _ => {
                        refuse = Some(format!(
                            "graph input `{}` is not written back by the graph, so the caller's tensor must not change",
                            self.graph.node(x).name
                        ));
                    }
                }
            }
            if let Some(reason) = refuse {
                for &b in &accepted {
                    clone[b] = Some(Self::plain_note(
                        &call.buffers[b].label,
                        reason.clone(),
                        bytes[b],
                    ));
                }
                continue;
            }
            let chain = if v1 {
                self.scatter_chain(call, &accepted, root)
            } else {
                None
            };
            if let Some((x, c_pos)) = cut {
                // The write-back overwrites the input with the final value. A
                // value this call leaves in the input's memory (a result, or
                // a removed write-back scatter) must not be read after it,
                // unless it is that final value.
                let copy = self.writeback.get(&x).copied();
                let wb_src = copy.and_then(|c| match self.roles[c.idx()] {
                    Role::InputWriteBack { src, .. } => Some(src),
                    _ => None,
                });
                let mut values: Vec<NodeId> = accepted
                    .iter()
                    .flat_map(|&b| self.result_nodes(call, b))
                    .collect();
                if let Some(c) = &chain {
                    values.extend(c.iter().filter(|(_, (_, exact))| *exact).map(|(sc, _)| *sc));
                }
                let mut late = None;
                for g in values {
                    if Some(g) == wb_src {
                        continue;
                    }
                    let pos = &self.pos;
                    for_each_reader(&self.roles, &self.uses, g, &mut |r, _| {
                        if pos[r.idx()] >= c_pos && Some(r) != copy {
                            late = Some(r);
                            return false;
                        }
                        true
                    });
                    if late.is_some() {
                        break;
                    }
                }
                if let Some(r) = late {
                    for &b in &accepted {
                        clone[b] = Some(self.reader_note(
                            &call.buffers[b].label,
                            r,
                            bytes[b],
                            "after the graph writes the input back,",
                        ));
                    }
                    continue;
                }
            }
            let excluded: HashSet<NodeId> = chain
                .as_ref()
                .map(|c| c.keys().copied().collect())
                .unwrap_or_default();
            let written = self.written_geometries(call, &accepted);
            let hazards = self.hazards(root, af, &excluded, cut, written.as_deref());
            if !hazards.is_empty() {
                match self.plan_moves(&hazards, af) {
                    Ok(set) => {
                        let p = self.pos[af.idx()];
                        for &m in &set {
                            self.pos[m.idx()] = p - 1;
                        }
                        moved.extend(set);
                    }
                    Err(blocker) => {
                        for &b in &accepted {
                            clone[b] = Some(self.reader_note(
                                &call.buffers[b].label,
                                blocker,
                                bytes[b],
                                "node",
                            ));
                        }
                        continue;
                    }
                }
            }
            if let Some(c) = chain {
                chains.push(c);
            }
        }
        if let Some(reason) = self.unclonable(call, &clone) {
            // Nothing is emitted for a node left alone: undo the moves.
            for &m in &moved {
                self.pos[m.idx()] = 2 * i64::from(m.0);
            }
            return Outcome::Left(reason);
        }
        self.emit_mutation(call, rule, &clone, &moved, &chains);
        Outcome::Rewritten
    }

    /// The reason a buffer that must be cloned cannot be, if any: a clone
    /// must reproduce the exact layout of the value it stands for, which
    /// needs at least the buffer's rank and a static storage offset.
    fn unclonable(&self, call: &MutationCall, clone: &[Option<CloneNote>]) -> Option<String> {
        clone.iter().enumerate().find_map(|(b, note)| {
            let why = clone_layout(self.graph, self.layout_source(call.buffers[b].node)).err()?;
            note.as_ref().map(|_| {
                format!(
                    "{} needs a clone with its exact layout, but {why}",
                    call.buffers[b].label
                )
            })
        })
    }

    /// The getitem nodes of `call` that stand for buffer `b`'s new value.
    fn result_nodes(&self, call: &MutationCall, b: usize) -> Vec<NodeId> {
        let mut out = Vec::new();
        for &u in self.uses.users(call.node) {
            let Role::AfResult { index, .. } = self.roles[u.idx()] else {
                continue;
            };
            match call.results.get(index) {
                Some(ResultSlot::Buffer(x)) if *x == b => out.push(u),
                Some(ResultSlot::BufferList(items)) if items.contains(&Some(b)) => {
                    for &gu in self.uses.users(u) {
                        if let Role::AfListItem { item, .. } = self.roles[gu.idx()] {
                            if items.get(item) == Some(&Some(b)) {
                                out.push(gu);
                            }
                        }
                    }
                }
                Some(ResultSlot::Return(i)) => {
                    if let Some(w) = call.return_aliases.get(*i).copied().flatten() {
                        if call.written[w].buffer == b {
                            out.push(u);
                        }
                    }
                }
                _ => {}
            }
        }
        out
    }

    fn check_users(&self, call: &MutationCall) -> std::result::Result<(), String> {
        for &u in self.uses.users(call.node) {
            let Role::AfResult { index, .. } = self.roles[u.idx()] else {
                return Err(format!(
                    "node `{}` uses the auto_functionalized result directly",
                    self.graph.node(u).name
                ));
            };
            match call.results.get(index) {
                None => return Err(format!("getitem index {index} out of range")),
                Some(ResultSlot::BufferList(items)) => {
                    for &gu in self.uses.users(u) {
                        match self.roles[gu.idx()] {
                            Role::AfListItem { item, .. }
                                if items.get(item).copied().flatten().is_some() => {}
                            _ => {
                                return Err(format!(
                                    "node `{}` uses a written list directly",
                                    self.graph.node(gu).name
                                ))
                            }
                        }
                    }
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Emits a copy of `base` (the value of `node`) with exactly its size,
    /// stride and storage offset, as torch's `clone_preserve_strides` does:
    /// the storage is copied as a flat 1-d buffer and viewed back with the
    /// original layout. A plain `clone` is not enough: Inductor picks the
    /// clone's strides itself (any stride for a size-1 dimension), and real
    /// kernels read raw strides. Symbolic sizes and strides are read at run
    /// time with `sym_size` / `sym_stride`. The caller has checked
    /// [`clone_layout`].
    fn exact_clone(&mut self, af: NodeId, base: ValueRef, node: NodeId) -> NewId {
        let (size, stride, offset, needed) =
            match clone_layout(self.graph, self.layout_source(node)) {
                Ok(CloneLayout::Static {
                    size,
                    stride,
                    offset,
                }) => {
                    let needed = required_storage(&size, &stride, offset);
                    (
                        PlanArg::IntList(size),
                        PlanArg::IntList(stride),
                        PlanArg::Int(offset),
                        PlanArg::Int(needed),
                    )
                }
                Ok(CloneLayout::Symbolic { rank, offset }) => {
                    self.symbolic_layout(af, base, rank, offset)
                }
                // Unreachable after `unclonable`; a plain clone keeps the values.
                Err(_) => {
                    return self.insert(
                        af,
                        Callee::Aten("aten::clone.default"),
                        vec![PlanArg::Ref(base)],
                        vec![],
                        MetaSource::Compute,
                    )
                }
            };
        let flat = self.insert(
            af,
            Callee::Aten("aten::as_strided.default"),
            vec![
                PlanArg::Ref(base),
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
        let copy = self.insert(
            af,
            Callee::Aten("aten::clone.default"),
            vec![PlanArg::Ref(ValueRef::New(flat))],
            vec![],
            MetaSource::Compute,
        );
        self.insert(
            af,
            Callee::Aten("aten::as_strided.default"),
            vec![PlanArg::Ref(ValueRef::New(copy)), size, stride, offset],
            vec![],
            MetaSource::Compute,
        )
    }

    /// Sizes, strides, storage offset and required storage length of `base`
    /// as run-time values: `sym_size` / `sym_stride` per dimension and the
    /// `offset + 1 + sum((size - 1) * stride)` of
    /// `torch._prims_common.compute_required_storage_length`. Symbolic
    /// dimensions are at least 2 under Inductor's shape environment, so the
    /// zero-size case of that function cannot arise for them.
    fn symbolic_layout(
        &mut self,
        af: NodeId,
        base: ValueRef,
        rank: u32,
        offset: i64,
    ) -> (PlanArg, PlanArg, PlanArg, PlanArg) {
        let mut sizes = Vec::new();
        let mut strides = Vec::new();
        let mut needed = PlanArg::Int(offset + 1);
        for d in 0..i64::from(rank) {
            let query = |cx: &mut Self, op: &'static str| {
                PlanArg::Ref(ValueRef::New(cx.insert(
                    af,
                    Callee::Aten(op),
                    vec![PlanArg::Ref(base), PlanArg::Int(d)],
                    vec![],
                    MetaSource::Compute,
                )))
            };
            let size = query(self, "aten::sym_size.int");
            let stride = query(self, "aten::sym_stride.int");
            let arith = |cx: &mut Self, op: &'static str, a: PlanArg, b: PlanArg| {
                PlanArg::Ref(ValueRef::New(cx.insert(
                    af,
                    Callee::Operator(op),
                    vec![a, b],
                    vec![],
                    MetaSource::Compute,
                )))
            };
            let last = arith(self, "sub", size.clone(), PlanArg::Int(1));
            let extent = arith(self, "mul", last, stride.clone());
            needed = arith(self, "add", needed, extent);
            sizes.push(size);
            strides.push(stride);
        }
        (
            PlanArg::List(sizes),
            PlanArg::List(strides),
            PlanArg::Int(offset),
            needed,
        )
    }

    fn emit_mutation(
        &mut self,
        call: &MutationCall,
        rule: &'static str,
        clone: &[Option<CloneNote>],
        moved: &BTreeSet<NodeId>,
        chains: &[BTreeMap<NodeId, (NodeId, bool)>],
    ) {
        let af = call.node;
        let event = self.next_event;
        self.next_event += 1;
        for &m in moved {
            self.edits.push(Edit::Move {
                node: m,
                before: af,
            });
        }
        // Buffers: the real one, or a clone.
        let mut buf_val: Vec<ValueRef> = Vec::with_capacity(call.buffers.len());
        for (bi, b) in call.buffers.iter().enumerate() {
            let base = self.resolve(b.node);
            if clone[bi].is_none() {
                buf_val.push(base);
                continue;
            }
            let v = self.exact_clone(af, base, b.node);
            buf_val.push(ValueRef::New(v));
        }
        // Written arguments, regenerated on their buffers.
        let mut arg_val: Vec<ValueRef> = Vec::with_capacity(call.written.len());
        for w in &call.written {
            let b = PlanArg::Ref(buf_val[w.buffer]);
            let kw = |k: &String| PlanArg::FromKwarg {
                node: af,
                key: k.clone(),
            };
            let v = match &w.view {
                ViewOfBuffer::Whole => buf_val[w.buffer],
                ViewOfBuffer::Alias => ValueRef::New(self.insert(
                    af,
                    Callee::Aten("aten::alias.default"),
                    vec![b],
                    vec![],
                    MetaSource::Compute,
                )),
                ViewOfBuffer::Slice { keys } => ValueRef::New(self.insert(
                    af,
                    Callee::Aten("aten::slice.Tensor"),
                    vec![b, kw(&keys[0]), kw(&keys[1]), kw(&keys[2])],
                    vec![],
                    MetaSource::Compute,
                )),
                ViewOfBuffer::AsStrided { keys } => ValueRef::New(self.insert(
                    af,
                    Callee::Aten("aten::as_strided.default"),
                    vec![b, kw(&keys[0]), kw(&keys[1]), kw(&keys[2])],
                    vec![],
                    MetaSource::Compute,
                )),
            };
            arg_val.push(v);
        }
        // The in-place call itself: positional where the schema allows it
        // (Inductor's lowering mishandles some keyword spellings, e.g. `out`).
        let mut args = Vec::new();
        let mut kwargs = Vec::new();
        for (name, kwarg_only, a) in &call.call_args {
            let pa = match a {
                CallArg::Kwarg(k) => PlanArg::FromKwarg {
                    node: af,
                    key: k.clone(),
                },
                CallArg::Written(w) => PlanArg::Ref(arg_val[*w]),
                CallArg::WrittenList(items) => PlanArg::List(
                    items
                        .iter()
                        .map(|i| i.map_or(PlanArg::None, |w| PlanArg::Ref(arg_val[w])))
                        .collect(),
                ),
                CallArg::None => PlanArg::None,
            };
            if *kwarg_only {
                kwargs.push((name.clone(), pa));
            } else {
                args.push(pa);
            }
        }
        let n_returns = call.return_aliases.len();
        let meta = match n_returns {
            0 => MetaSource::Nothing,
            1 => MetaSource::AfOutput {
                node: af,
                index: Some(0),
            },
            k => MetaSource::AfOutputs {
                node: af,
                start: 0,
                end: k,
            },
        };
        let call_id = self.insert(af, Callee::Target(call.op), args, kwargs, meta);
        // Results.
        let mut binds: Vec<Bind> = Vec::with_capacity(call.results.len());
        let buf_bind = |bi: usize| -> Bind {
            if clone[bi].is_none() {
                Bind::Buffer {
                    node: call.buffers[bi].node,
                    event,
                }
            } else {
                Bind::Clone {
                    key: (af, bi),
                    of: call.buffers[bi].node,
                }
            }
        };
        for slot in &call.results {
            binds.push(match slot {
                ResultSlot::Return(i) => match call.return_aliases.get(*i).copied().flatten() {
                    Some(w) => {
                        let bi = call.written[w].buffer;
                        match (&call.written[w].view, clone[bi].is_none()) {
                            (ViewOfBuffer::Whole, _) => buf_bind(bi),
                            (_, true) => Bind::Alias {
                                node: call.buffers[bi].node,
                                event,
                            },
                            (_, false) => Bind::Fresh,
                        }
                    }
                    None => Bind::Fresh,
                },
                ResultSlot::Buffer(bi) => buf_bind(*bi),
                ResultSlot::BufferList(items) => {
                    Bind::List(items.iter().map(|i| i.map(buf_bind)).collect())
                }
            });
        }
        let users: Vec<NodeId> = self.uses.users(af).to_vec();
        for u in users {
            let Role::AfResult { index, .. } = self.roles[u.idx()] else {
                continue;
            };
            match &call.results[index] {
                ResultSlot::Return(i) => {
                    let v = match call.return_aliases.get(*i).copied().flatten() {
                        Some(w) => arg_val[w],
                        None if n_returns == 1 => ValueRef::New(call_id),
                        None => ValueRef::New(self.insert(
                            af,
                            Callee::Getitem,
                            vec![
                                PlanArg::Ref(ValueRef::New(call_id)),
                                PlanArg::Int(i64::try_from(*i).unwrap_or(0)),
                            ],
                            vec![],
                            MetaSource::AfOutput {
                                node: af,
                                index: Some(*i),
                            },
                        )),
                    };
                    self.replace(u, v);
                }
                ResultSlot::Buffer(bi) => self.replace(u, buf_val[*bi]),
                ResultSlot::BufferList(items) => {
                    let list_users: Vec<NodeId> = self.uses.users(u).to_vec();
                    for gu in list_users {
                        if let Role::AfListItem { item, .. } = self.roles[gu.idx()] {
                            if let Some(Some(bi)) = items.get(item) {
                                self.replace(gu, buf_val[*bi]);
                                self.erase(gu);
                            }
                        }
                    }
                    self.binds.insert(u, vec![binds[index].clone()]);
                }
            }
            self.erase(u);
        }
        self.erase(af);
        self.binds.insert(af, binds);
        // v1 write-backs that became no-ops.
        let mut scatters_removed = 0;
        for c in chains {
            for (&sc, &(base, _)) in c {
                self.scatter_binds.insert(sc, (base, event));
                self.replace(sc, ValueRef::Old(base));
                self.erase(sc);
                scatters_removed += 1;
            }
        }
        let mut touched: Vec<usize> = Vec::new();
        for (bi, b) in call.buffers.iter().enumerate() {
            if clone[bi].is_none() {
                let r = self.find(b.node);
                if !touched.contains(&r) {
                    touched.push(r);
                }
            }
        }
        for r in touched {
            self.latest[r] = event;
        }
        let p = self.pos[af.idx()];
        for (bi, b) in call.buffers.iter().enumerate() {
            if clone[bi].is_none() {
                self.writes.push((b.node, p));
            }
        }
        let node = self.graph.node(af);
        let clones: Vec<CloneNote> = clone.iter().flatten().cloned().collect();
        self.report.decisions.push(NodeReport {
            node: node.name.clone(),
            op: self.graph.targets[call.op.idx()].name.clone(),
            form: call.form,
            rule,
            action: if clones.is_empty() {
                Action::Reinplaced
            } else {
                Action::Cloned
            },
            moved: moved
                .iter()
                .map(|m| self.graph.node(*m).name.clone())
                .collect(),
            clones,
            scatters_removed,
            reason: None,
            source: node.source.clone(),
        });
    }

    /// Plans an out= call: fresh buffers, no safety analysis needed.
    pub fn rewrite_out_call(&mut self, call: &OutCall, rule: &'static str) -> Outcome {
        let af = call.node;
        let users: Vec<NodeId> = self.uses.users(af).to_vec();
        if call.n_returns != 1 {
            for &u in &users {
                match self.roles[u.idx()] {
                    Role::AfResult { index, .. } if index < call.n_returns => {}
                    _ => {
                        return Outcome::Left(format!(
                            "node `{}` uses the result in an unexpected way",
                            self.graph.node(u).name
                        ))
                    }
                }
            }
        }
        let mut bufs = Vec::new();
        let mut args = Vec::new();
        let mut kwargs = Vec::new();
        for (name, kwarg_only, keys) in &call.args {
            let pa = match keys {
                Some(k) => {
                    let kw = |s: &String| PlanArg::FromKwarg {
                        node: af,
                        key: s.clone(),
                    };
                    let b = self.insert(
                        af,
                        Callee::Aten("aten::empty_strided.default"),
                        vec![kw(&k[0]), kw(&k[1])],
                        vec![("dtype".into(), kw(&k[2])), ("device".into(), kw(&k[3]))],
                        MetaSource::Compute,
                    );
                    bufs.push(b);
                    PlanArg::Ref(ValueRef::New(b))
                }
                None => PlanArg::FromKwarg {
                    node: af,
                    key: name.clone(),
                },
            };
            if *kwarg_only {
                kwargs.push((name.clone(), pa));
            } else {
                args.push(pa);
            }
        }
        let meta = match call.n_returns {
            0 => MetaSource::Nothing,
            1 => MetaSource::AfOutput {
                node: af,
                index: None,
            },
            k => MetaSource::AfOutputs {
                node: af,
                start: 0,
                end: k,
            },
        };
        let call_id = self.insert(af, Callee::Target(call.op), args, kwargs, meta);
        let value_of = |i: usize| {
            call.return_buffers
                .get(i)
                .copied()
                .flatten()
                .and_then(|w| bufs.get(w))
                .map(|b| ValueRef::New(*b))
        };
        if call.n_returns == 1 {
            let v = value_of(0).unwrap_or(ValueRef::New(call_id));
            self.replace(af, v);
            self.binds.insert(af, vec![Bind::Tensor]);
        } else {
            for u in users {
                let Role::AfResult { index, .. } = self.roles[u.idx()] else {
                    continue;
                };
                let v = match value_of(index) {
                    Some(v) => v,
                    None => ValueRef::New(self.insert(
                        af,
                        Callee::Getitem,
                        vec![
                            PlanArg::Ref(ValueRef::New(call_id)),
                            PlanArg::Int(i64::try_from(index).unwrap_or(0)),
                        ],
                        vec![],
                        MetaSource::AfOutput {
                            node: af,
                            index: Some(index),
                        },
                    )),
                };
                self.replace(u, v);
                self.erase(u);
            }
            self.binds.insert(af, vec![Bind::Fresh; call.n_returns]);
        }
        self.erase(af);
        let node = self.graph.node(af);
        self.report.decisions.push(NodeReport {
            node: node.name.clone(),
            op: self.graph.targets[call.op.idx()].name.clone(),
            form: "v2",
            rule,
            action: Action::Reinplaced,
            moved: vec![],
            clones: vec![],
            scatters_removed: 0,
            reason: None,
            source: node.source.clone(),
        });
        Outcome::Rewritten
    }

    fn plan_writeback(&mut self, copy: NodeId, dst: NodeId, src: NodeId) {
        let (rd, rs) = (self.find(dst), self.find(src));
        if rd == rs {
            // The same elements, proven by the view chain or, for views the
            // engine does not model (reshape round trips, transposes), by
            // identical static layouts in the same memory.
            let same_layout = match (
                strided_layout(self.graph, src),
                strided_layout(self.graph, dst),
            ) {
                (Some(a), Some(b)) => {
                    // Views of one root node (view and re-inplacing links only,
                    // never a may-alias union) with identical layouts.
                    a == b && self.geometry(src).root == self.geometry(dst).root
                }
                _ => false,
            };
            let same_geometry = same_layout || self.geometry(src) == self.geometry(dst);
            if same_geometry && self.ver[src.idx()] == self.latest[rd] {
                if !self.uses.users(copy).is_empty() {
                    self.replace(copy, ValueRef::Old(dst));
                }
                self.erase(copy);
                self.report.writebacks_removed += 1;
            } else {
                // The new value lives in the input's own memory under another
                // layout: copy through a temporary, never overlapping memory.
                let tmp = self.insert(
                    copy,
                    Callee::Aten("aten::clone.default"),
                    vec![PlanArg::Ref(self.resolve(src))],
                    vec![],
                    MetaSource::Compute,
                );
                let fresh = self.insert(
                    copy,
                    Callee::Aten("aten::copy_.default"),
                    vec![
                        PlanArg::Ref(ValueRef::Old(dst)),
                        PlanArg::Ref(ValueRef::New(tmp)),
                    ],
                    vec![],
                    MetaSource::Compute,
                );
                self.replace(copy, ValueRef::New(fresh));
                self.erase(copy);
            }
        }
        let r = self.union(copy, dst);
        let e = self.next_event;
        self.next_event += 1;
        self.latest[r] = e;
        self.ver[copy.idx()] = e;
    }

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
    fn realize_early_readers(&mut self) {
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
    fn computed_by_inductor(&self, n: NodeId) -> bool {
        let node = self.graph.node(n);
        node.op == OpCode::CallFunction
            && self.graph.target_of(n).kind == TargetKind::Operator
            && matches!(self.roles[n.idx()], Role::Fresh | Role::Scatter { .. })
    }

    fn finish(self) -> Plan {
        Plan {
            edits: self.edits,
            new_nodes: self.new_nodes,
            report: self.report,
        }
    }
}

/// The node at the top of `n`'s chain of structural views.
fn structural_root(roles: &[Role], n: NodeId) -> NodeId {
    let mut cur = n;
    while let Role::View { src, .. } = &roles[cur.idx()] {
        cur = *src;
    }
    cur
}

/// True when the two views provably touch disjoint elements: after a common
/// prefix of steps, the next steps select disjoint ranges of one dimension.
fn provably_disjoint(a: &Geometry, b: &Geometry) -> bool {
    if a.root != b.root {
        return false;
    }
    let k = a
        .steps
        .iter()
        .zip(&b.steps)
        .take_while(|(x, y)| x == y)
        .count();
    match (a.steps.get(k), b.steps.get(k)) {
        (Some(x), Some(y)) => {
            let ga = Geometry {
                root: a.root,
                steps: a.steps[..=k].to_vec(),
            };
            let gb = Geometry {
                root: b.root,
                steps: [a.steps[..k].to_vec(), vec![y.clone()]].concat(),
            };
            let _ = x;
            ga.disjoint_from(&gb)
        }
        _ => false,
    }
}

/// Static (size, stride, storage offset) of a node, from its metadata.
fn strided_layout(graph: &Graph, n: NodeId) -> Option<(Vec<i64>, Vec<i64>, i64)> {
    let m = graph.node(n).meta.as_ref()?;
    Some((m.shape.clone()?, m.stride.clone()?, m.storage_offset?))
}

/// The layout a clone of a node must reproduce.
enum CloneLayout {
    /// Every size and stride and the storage offset are known numbers.
    Static {
        size: Vec<i64>,
        stride: Vec<i64>,
        offset: i64,
    },
    /// Sizes or strides are symbolic: read them at run time.
    Symbolic { rank: u32, offset: i64 },
}

/// How a clone of `n` gets its exact layout, or why it cannot.
fn clone_layout(graph: &Graph, n: NodeId) -> std::result::Result<CloneLayout, &'static str> {
    let Some(m) = graph.node(n).meta.as_ref() else {
        return Err("the graph carries no tensor metadata for it");
    };
    let Some(offset) = m.storage_offset else {
        return Err("its storage offset is symbolic");
    };
    Ok(match (&m.shape, &m.stride) {
        (Some(size), Some(stride)) => CloneLayout::Static {
            size: size.clone(),
            stride: stride.clone(),
            offset,
        },
        _ => CloneLayout::Symbolic {
            rank: m.rank,
            offset,
        },
    })
}

/// Elements a strided tensor needs from its storage, as
/// `torch._prims_common.compute_required_storage_length`.
fn required_storage(size: &[i64], stride: &[i64], offset: i64) -> i64 {
    if size.contains(&0) {
        return 0;
    }
    offset
        + size
            .iter()
            .zip(stride)
            .map(|(s, st)| (s - 1) * st)
            .sum::<i64>()
        + 1
}
