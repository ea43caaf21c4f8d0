//! Emission: the edits of a planned call (clones with their exact layout,
//! regenerated views, the in-place call, result bindings) and of out= calls.

use super::*;

impl Context<'_> {
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

    pub(super) fn erase(&mut self, node: NodeId) {
        self.edits.push(Edit::Erase { node });
    }

    /// Emits a copy of `base` (the value of `node`) with exactly its size,
    /// stride and storage offset, as torch's `clone_preserve_strides` does:
    /// the storage is copied as a flat 1-d buffer and viewed back with the
    /// original layout. A plain `clone` is not enough: Inductor picks the
    /// clone's strides itself (any stride for a size-1 dimension), and real
    /// kernels read raw strides. Symbolic sizes and strides are read at run
    /// time with `sym_size` / `sym_stride`; a symbolic storage offset is
    /// reached by copying a view source of `node` and applying the view
    /// nodes again ([`Context::clone_source`]). The caller has checked
    /// [`Context::clone_source`].
    pub(super) fn exact_clone(&mut self, af: NodeId, base: ValueRef, node: NodeId) -> NewId {
        let Ok(CloneSource {
            anchor,
            layout,
            chain,
        }) = self.clone_source(node)
        else {
            // Unreachable after `unclonable`; a plain clone keeps the values.
            return self.insert(
                af,
                Callee::Aten("aten::clone.default"),
                vec![PlanArg::Ref(base)],
                vec![],
                MetaSource::Compute,
            );
        };
        let base = if chain.is_empty() {
            base
        } else {
            self.resolve(anchor)
        };
        let (size, stride, offset, needed) = match layout {
            CloneLayout::Static {
                size,
                stride,
                offset,
            } => {
                let needed = required_storage(&size, &stride, offset);
                (
                    PlanArg::IntList(size),
                    PlanArg::IntList(stride),
                    PlanArg::Int(offset),
                    PlanArg::Int(needed),
                )
            }
            CloneLayout::Symbolic { rank, offset } => self.symbolic_layout(af, base, rank, offset),
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
        let mut out = self.insert(
            af,
            Callee::Aten("aten::as_strided.default"),
            vec![PlanArg::Ref(ValueRef::New(copy)), size, stride, offset],
            vec![],
            MetaSource::Compute,
        );
        for (callee, rest, kwargs) in chain {
            let mut args = vec![PlanArg::Ref(ValueRef::New(out))];
            args.extend(rest);
            out = self.insert(af, callee, args, kwargs, MetaSource::Compute);
        }
        out
    }

    /// Sizes, strides, storage offset and required storage length of `base`
    /// as run-time values: `sym_size` / `sym_stride` per dimension and the
    /// `offset + 1 + sum((size - 1) * stride)` of
    /// `torch._prims_common.compute_required_storage_length`. Symbolic
    /// dimensions are at least 2 under Inductor's shape environment, so the
    /// zero-size case of that function cannot arise for them.
    pub(super) fn symbolic_layout(
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

    /// The graph's own view for a v2 written argument whose storage offset
    /// is symbolic: functionalization records it as `sym_storage_offset(x)`
    /// of the very view `x` the program passed, and `as_strided(base, ...,
    /// sym_storage_offset(x))` is what Inductor's lowering miscomputes (it
    /// wrote rows `0:2` for `x = a.flatten(0, 1)[4:6]`, issue 30). Written in
    /// place, `x` itself is that view: same storage, rank and dtype (and
    /// sizes, where static). `None` when that is not proven, or the buffer
    /// is cloned (`x` is then a view of the original, not of the copy).
    fn view_named_by_offset(
        &mut self,
        call: &MutationCall,
        buffer: usize,
        keys: &[String; 3],
        clone: &[Option<CloneNote>],
    ) -> Option<ValueRef> {
        use crate::ir::Value;
        if clone[buffer].is_some() {
            return None;
        }
        let n = self.graph.node(call.node);
        let offset = n.kwarg(&keys[2])?.as_node()?;
        if self.graph.target_of(offset).name != "aten::sym_storage_offset.default" {
            return None;
        }
        let x = self.graph.node(offset).args.first()?.as_node()?;
        let base = call.buffers[buffer].node;
        if !matches!(self.roles[x.idx()], Role::View { .. }) || self.find(x) != self.find(base) {
            return None;
        }
        let size = match self.graph.node(call.node).kwarg(&keys[0])? {
            Value::List(v) | Value::Tuple(v) => v.clone(),
            _ => return None,
        };
        let bm = self.graph.node(base).meta.as_ref()?;
        match self.graph.node(x).meta.as_ref() {
            Some(xm) => {
                if xm.dtype.is_empty()
                    || xm.dtype != bm.dtype
                    || usize::try_from(xm.rank).ok()? != size.len()
                {
                    return None;
                }
                if let Some(shape) = &xm.shape {
                    let same = size.iter().zip(shape).all(|(s, &d)| match s {
                        Value::Int(i) => *i == d,
                        _ => true,
                    });
                    if !same {
                        return None;
                    }
                }
            }
            // No metadata on the view (Inductor's graphs often have none on
            // views): its rank follows from its steps on the base, and steps
            // the engine models keep the dtype.
            None => {
                if self.rank_through_steps(base, x, bm.rank)? != size.len() {
                    return None;
                }
            }
        }
        Some(self.resolve(x))
    }

    /// The rank of view `x` of `base` (rank `base_rank`), from the steps
    /// of its geometry after `base`'s own; `None` when `x` is not a view of
    /// `base` through steps the engine models.
    fn rank_through_steps(&self, base: NodeId, x: NodeId, base_rank: u32) -> Option<usize> {
        let (gb, gx) = (self.geometry(base), self.geometry(x));
        if gb.root != gx.root || !gx.steps.starts_with(&gb.steps) {
            return None;
        }
        let mut rank = usize::try_from(base_rank).ok()?;
        for step in &gx.steps[gb.steps.len()..] {
            rank = match step {
                ViewStep::Slice { .. } => rank,
                ViewStep::Select { .. } | ViewStep::Squeeze { .. } => rank.checked_sub(1)?,
                ViewStep::Unsqueeze { .. } => rank + 1,
                ViewStep::Reshape { shape } => shape.len(),
                ViewStep::AsStrided { size, .. } => size.len(),
                ViewStep::Opaque(_) => return None,
            };
        }
        Some(rank)
    }

    pub(super) fn emit_mutation(
        &mut self,
        call: &MutationCall,
        rule: &'static str,
        sharing: &Sharing,
        clone: &[Option<CloneNote>],
        moved: &BTreeSet<NodeId>,
        chains: &[writeback::ScatterChain],
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
        // Buffers: the real one, or one copy per unit, every member of the
        // unit (written or read) made again from it.
        let (buf_val, read_val, unit_bytes) = self.emit_buffers(call, sharing, clone);
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
                ViewOfBuffer::AsStrided { keys } => {
                    match self.view_named_by_offset(call, w.buffer, keys, clone) {
                        Some(v) => v,
                        None => ValueRef::New(self.insert(
                            af,
                            Callee::Aten("aten::as_strided.default"),
                            vec![b, kw(&keys[0]), kw(&keys[1]), kw(&keys[2])],
                            vec![],
                            MetaSource::Compute,
                        )),
                    }
                }
            };
            arg_val.push(v);
        }
        // The in-place call itself: positional where the schema allows it
        // (Inductor's lowering mishandles some keyword spellings, e.g. `out`).
        let mut args = Vec::new();
        let mut kwargs = Vec::new();
        for (name, kwarg_only, a) in &call.call_args {
            let pa = match a {
                CallArg::Kwarg(k) => self.read_arg(call, k, &read_val),
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
                // Results of one unit are one memory: one clone class.
                Bind::Clone {
                    key: (af, sharing.unit_buffers(bi).next().unwrap_or(bi)),
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
        // Ordering-only users (`control_deps`) now depend on written memory.
        if let Some(&first) = buf_val.first() {
            if self
                .uses
                .users(af)
                .iter()
                .any(|&u| self.ordering_only_use(u, af))
            {
                self.replace(af, first);
            }
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
                self.in_place.push(b.node);
            }
        }
        // Read slots that share the memory written in place: they must be
        // views of the same buffer in Inductor's lowering too.
        for &(r, u) in &sharing.unit_reads {
            if let Some(b) = (0..call.buffers.len()).find(|&b| sharing.unit_of_buffer[b] == u) {
                if clone[b].is_none() {
                    self.in_place.push(call.read_nodes[r].1);
                }
            }
        }
        let node = self.graph.node(af);
        let clones = self.unit_notes(call, sharing, clone, &unit_bytes);
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
            cause: None,
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
                    _ if self.ordering_only_use(u, af) => {}
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
            // Ordering-only users (`control_deps`) now depend on a buffer the
            // call writes.
            if let Some(&b) = bufs.first() {
                if self
                    .uses
                    .users(af)
                    .iter()
                    .any(|&u| self.ordering_only_use(u, af))
                {
                    self.replace(af, ValueRef::New(b));
                }
            }
            self.binds.insert(af, vec![Bind::Fresh; call.n_returns]);
        }
        self.erase(af);
        let node = self.graph.node(af);
        self.report.decisions.push(NodeReport {
            node: node.name.clone(),
            op: self.graph.targets[call.op.idx()].name.clone(),
            form: Form::V2,
            rule,
            action: Action::Reinplaced,
            moved: vec![],
            clones: vec![],
            scatters_removed: 0,
            reason: None,
            cause: None,
            source: node.source.clone(),
        });
        Outcome::Rewritten
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{erased, inserted, only_decision, plan_of};
    use super::*;
    use crate::analysis::test_graph::{scale_out, B};
    use crate::ir::Value;
    use crate::plan::{Action, Plan};

    /// The inserted call of the mutating operator: its arguments.
    fn call_args(p: &Plan, op_name: &str, g: &Graph) -> Vec<PlanArg> {
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

    #[test]
    fn a_reinplaced_call_runs_on_the_buffer_and_its_result_becomes_the_buffer() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let af = b.scale_v2("af", t);
        let nt = b.getitem("nt", af, 1);
        let g = b.output(&[nt]);
        let p = plan_of(&g);
        assert_eq!(inserted(&g, &p), ["m::scale_.default"]);
        let kw = |k: &str| PlanArg::FromKwarg {
            node: af,
            key: k.into(),
        };
        assert_eq!(
            call_args(&p, "m::scale_.default", &g),
            [PlanArg::Ref(ValueRef::Old(t)), kw("s")]
        );
        assert!(p.edits.contains(&Edit::Replace {
            node: nt,
            with: ValueRef::Old(t)
        }));
        assert_eq!(erased(&p), [nt, af]);
    }

    #[test]
    fn a_clone_copies_the_storage_flat_and_views_it_back_with_the_exact_layout() {
        // `x` is never written back: the call writes a clone of it.
        let mut b = B::new();
        let x = b.input("x");
        let af = b.scale_v2("af", x);
        let nx = b.getitem("nx", af, 1);
        let g = b.output(&[nx]);
        let p = plan_of(&g);
        assert_eq!(only_decision(&p).action, Action::Cloned);
        assert_eq!(
            inserted(&g, &p),
            [
                "aten::as_strided.default",
                "aten::clone.default",
                "aten::as_strided.default",
                "m::scale_.default"
            ]
        );
        let Some(Edit::Insert { args, .. }) = p.edits.get(2) else {
            panic!("the layout view");
        };
        assert_eq!(
            args[1..],
            [
                PlanArg::IntList(vec![4, 8]),
                PlanArg::IntList(vec![8, 1]),
                PlanArg::Int(0)
            ]
        );
        let Some(Edit::Insert { args, .. }) = p.edits.first() else {
            panic!("the flat view");
        };
        assert_eq!(args[1], PlanArg::IntList(vec![32]));
        let clone = PlanArg::Ref(ValueRef::New(NewId(2)));
        assert_eq!(call_args(&p, "m::scale_.default", &g)[0], clone);
    }

    #[test]
    fn a_written_slice_is_cut_again_from_its_buffer() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let af = b.scale_slice_v2("af", t, 0, 2);
        let nt = b.getitem("nt", af, 1);
        let g = b.output(&[nt]);
        let p = plan_of(&g);
        assert_eq!(
            inserted(&g, &p),
            ["aten::slice.Tensor", "m::scale_.default"]
        );
        let kw = |k: &str| PlanArg::FromKwarg {
            node: af,
            key: k.into(),
        };
        let Some(Edit::Insert { args, .. }) = p.edits.first() else {
            panic!("the slice");
        };
        assert_eq!(
            args[..],
            [
                PlanArg::Ref(ValueRef::Old(t)),
                kw("_x_slice_dim"),
                kw("_x_slice_start"),
                kw("_x_slice_end")
            ]
        );
        assert_eq!(
            call_args(&p, "m::scale_.default", &g)[0],
            PlanArg::Ref(ValueRef::New(NewId(0)))
        );
    }

    #[test]
    fn an_out_call_writes_a_fresh_buffer_of_the_recorded_layout() {
        let mut b = B::new();
        let x = b.input("x");
        let af = b.af(
            "af",
            true,
            &scale_out(),
            vec![
                ("s", Value::Float(2.0)),
                ("_x_size", Value::List(vec![Value::Int(4)])),
                ("_x_stride", Value::List(vec![Value::Int(1)])),
                ("_x_dtype", Value::Dtype("float32".into())),
                ("_x_device", Value::Device("cpu".into())),
                ("_all_bases", Value::List(vec![])),
            ],
        );
        let g = b.output(&[x]);
        let p = plan_of(&g);
        let d = only_decision(&p);
        assert_eq!((d.action, d.rule), (Action::Reinplaced, "out_buffers_v2"));
        assert_eq!(
            inserted(&g, &p),
            ["aten::empty_strided.default", "m::scale.out"]
        );
        let kw = |k: &str| PlanArg::FromKwarg {
            node: af,
            key: k.into(),
        };
        let Some(Edit::Insert { args, kwargs, .. }) = p.edits.first() else {
            panic!("the buffer");
        };
        assert_eq!(args[..], [kw("_x_size"), kw("_x_stride")]);
        assert_eq!(
            kwargs[..],
            [
                ("dtype".to_string(), kw("_x_dtype")),
                ("device".to_string(), kw("_x_device"))
            ]
        );
        assert_eq!(
            call_args(&p, "m::scale.out", &g),
            [PlanArg::Ref(ValueRef::New(NewId(0))), kw("s")]
        );
        assert_eq!(erased(&p), [af]);
    }
}
