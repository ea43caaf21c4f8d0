//! The shared safety analysis of a generic mutating call (v1 and v2):
//! per written buffer, re-inplace, move readers, or clone, and why.

use super::*;

impl Context<'_> {
    /// Plans a generic mutating call (v1 or v2): the shared safety analysis.
    pub fn rewrite_mutation(&mut self, call: &MutationCall, rule: &'static str) -> Outcome {
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
        let sharing = match self.sharing(call) {
            Ok(s) => s,
            Err(reason) => return Outcome::Unattributed(reason),
        };
        let mut clone: Vec<Option<CloneNote>> = vec![None; nb];
        let mut moved: BTreeSet<NodeId> = BTreeSet::new();
        let mut chains: Vec<writeback::ScatterChain> = Vec::new();
        let mut kept_links = LinkUndo::default();
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for b in 0..nb {
            let node = call.buffers[b].node;
            let r = self.find(node);
            match groups.iter_mut().find(|(gr, _)| *gr == r) {
                Some((_, v)) => v.push(b),
                None => groups.push((r, vec![b])),
            }
        }
        // Buffers the call writes no element of: none of the reasons below
        // to clone applies to them (they still bind the call's results).
        let noop: Vec<bool> = (0..nb).map(|b| self.writes_nothing(call, b)).collect();
        // Reasons that hold whatever the later readers: decided first, for
        // whole units, so that the readers are weighed only for what stays.
        for b in 0..nb {
            let label = &call.buffers[b].label;
            let why = if noop[b] {
                None
            } else if self.overlapping_view(call.buffers[b].node) {
                Some("the written view may overlap itself (expand or zero stride)".to_string())
            } else if self
                .foreign
                .contains(&structural_root(&self.roles, call.buffers[b].node))
            {
                Some("the buffer is also written by another in-place operator".to_string())
            } else if let Some(why) = self.scatter_reinplaced_into_overwritten_input(call, b) {
                Some(why)
            } else {
                sharing.split[b].clone()
            };
            if let Some(why) = why {
                clone[b] = Some(Self::plain_note(label, why, bytes[b]));
            }
        }
        clone_whole_units(&sharing, &mut clone);
        for (root, bufs) in groups {
            let accepted: Vec<usize> = bufs.into_iter().filter(|&b| clone[b].is_none()).collect();
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
                for &b in accepted.iter().filter(|&&b| !noop[b]) {
                    clone[b] = Some(Self::plain_note(
                        &call.buffers[b].label,
                        reason.clone(),
                        bytes[b],
                    ));
                }
                continue;
            }
            let (chain, mut links) =
                match (call.form == Form::V1).then(|| self.scatter_chain(call, &accepted, root)) {
                    Some(Some((chain, links))) => (Some(chain), links),
                    _ => (None, LinkUndo::default()),
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
                values.retain(|&g| Some(g) != wb_src);
                if let Some(r) = self.reader_from(&values, c_pos, copy) {
                    for &b in &accepted {
                        clone[b] = Some(self.reader_note(
                            &call.buffers[b].label,
                            r,
                            bytes[b],
                            "after the graph writes the input back,",
                        ));
                    }
                    self.restore_links(links);
                    continue;
                }
            }
            let excluded: HashSet<NodeId> = chain
                .as_ref()
                .map(|c| c.keys().copied().collect())
                .unwrap_or_default();
            // Readers of the old value matter only where the call writes.
            let active: Vec<usize> = accepted.iter().copied().filter(|&b| !noop[b]).collect();
            let hazards = if active.is_empty() {
                Vec::new()
            } else {
                let written = self.written_geometries(call, &active);
                self.hazards(root, af, &excluded, cut, written.as_deref())
            };
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
                        for &b in &active {
                            clone[b] = Some(self.reader_note(
                                &call.buffers[b].label,
                                blocker,
                                bytes[b],
                                "node",
                            ));
                        }
                        self.restore_links(std::mem::take(&mut links));
                        continue;
                    }
                }
            }
            if let Some(c) = chain {
                chains.push(c);
                kept_links.0.extend(links.0);
            }
        }
        clone_whole_units(&sharing, &mut clone);
        if let Some(reason) = self.unclonable(call, &sharing, &clone) {
            // Nothing is emitted for a node left alone: undo the moves and
            // the write-back chains' links.
            for &m in &moved {
                self.pos[m.idx()] = 2 * i64::from(m.0);
            }
            self.restore_links(kept_links);
            return Outcome::Left(reason);
        }
        self.emit_mutation(call, rule, &sharing, &clone, &moved, &chains);
        Outcome::Rewritten
    }

    /// The reason a unit that must be cloned cannot be, if any: a clone
    /// must reproduce the exact layout of every value it stands for, which
    /// needs at least the rank and a static storage offset (the value's own,
    /// or that of a view source the clone is cut from again), and the
    /// members of a unit must be made again from one copy.
    pub(super) fn unclonable(
        &self,
        call: &MutationCall,
        sharing: &Sharing,
        clone: &[Option<CloneNote>],
    ) -> Option<String> {
        clone.iter().enumerate().find_map(|(b, note)| {
            note.as_ref()?;
            let members = self.unit_members(call, sharing, sharing.unit_of_buffer[b]);
            let why = self.unit_recipe(&members).err()?;
            Some(format!(
                "{} needs a clone with its exact layout, but {why}",
                call.buffers[b].label
            ))
        })
    }

    /// The getitem nodes of `call` that stand for buffer `b`'s new value.
    /// Why buffer `b` must be a copy when it is the result of an operator
    /// that Inductor's reinplace pass later makes write its first argument
    /// in place (`select_scatter`, `index_put`, ...), that argument is a
    /// graph input the graph writes back (`copy_`) with another value, and
    /// the buffer is read after that write-back. Inductor's `can_inplace`
    /// accepts such a scatter whatever the write-back's source, so the
    /// scatter's result becomes the input's memory and the write-back then
    /// overwrites what this call wrote in place (issue 30: a user's clone of
    /// an input written twice, `a1[1] = 7; t0 = a1.clone(); lin_out(out=a1);
    /// opt_list([t0])`). Unrewritten, Inductor writes a clone of it instead.
    fn scatter_reinplaced_into_overwritten_input(
        &self,
        call: &MutationCall,
        b: usize,
    ) -> Option<String> {
        const REINPLACED_BY_INDUCTOR: &[&str] = &[
            "aten::slice_scatter.default",
            "aten::select_scatter.default",
            "aten::as_strided_scatter.default",
            "aten::index_put.default",
            "aten::_unsafe_index_put.default",
        ];
        let root = structural_root(&self.roles, call.buffers[b].node);
        let node = self.graph.node(root);
        if node.op != OpCode::CallFunction
            || !REINPLACED_BY_INDUCTOR.contains(&self.graph.target_of(root).name.as_str())
        {
            return None;
        }
        let first = structural_root(&self.roles, node.args.first()?.as_node()?);
        if self.graph.node(first).op != OpCode::Placeholder {
            return None;
        }
        let copy = *self.writeback.get(&first)?;
        let Role::InputWriteBack { src, .. } = self.roles[copy.idx()] else {
            return None;
        };
        let mut values = self.result_nodes(call, b);
        if values.contains(&src) {
            return None;
        }
        values.push(root);
        let late = self.reader_from(&values, self.pos[copy.idx()], Some(copy))?;
        Some(format!(
            "`{}` writes graph input `{}` in place once Inductor's reinplace pass has run, and the \
             graph's write-back `{}` overwrites that input with another value before `{}` reads \
             this buffer",
            node.name,
            self.graph.node(first).name,
            self.graph.node(copy).name,
            self.graph.node(late).name
        ))
    }

    /// The first node found that reads the memory of one of `values`
    /// (directly or through views) at position `from` or later, other than
    /// `except` (the write-back itself).
    fn reader_from(&self, values: &[NodeId], from: i64, except: Option<NodeId>) -> Option<NodeId> {
        let mut late = None;
        for &v in values {
            for_each_reader(&self.roles, &self.uses, v, &mut |r, _| {
                if self.pos[r.idx()] >= from && Some(r) != except {
                    late = Some(r);
                    return false;
                }
                true
            });
            if late.is_some() {
                break;
            }
        }
        late
    }

    pub(super) fn result_nodes(&self, call: &MutationCall, b: usize) -> Vec<NodeId> {
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

    /// True when `user` is a `control_deps` node that names `af` only among
    /// its ordering dependencies (its first argument): it must run after the
    /// call, and reads none of its values. After the rewrite it depends on
    /// memory the in-place call writes, which orders it after the call just
    /// the same (Inductor orders readers of a mutated buffer after the
    /// mutation).
    pub(super) fn ordering_only_use(&self, user: NodeId, af: NodeId) -> bool {
        let node = self.graph.node(user);
        if self.graph.target_of(user).name != "higher_order.control_deps" {
            return false;
        }
        let mut elsewhere = false;
        for v in node
            .args
            .iter()
            .skip(1)
            .chain(node.kwargs.iter().map(|(_, v)| v))
        {
            v.for_each_node(&mut |n| elsewhere |= n == af);
        }
        let mut in_deps = false;
        if let Some(deps) = node.args.first() {
            deps.for_each_node(&mut |n| in_deps |= n == af);
        }
        in_deps && !elsewhere
    }

    pub(super) fn check_users(&self, call: &MutationCall) -> std::result::Result<(), String> {
        for &u in self.uses.users(call.node) {
            if self.ordering_only_use(u, call.node) {
                if call.buffers.is_empty() {
                    return Err(format!(
                        "node `{}` orders itself after a call that writes no buffer",
                        self.graph.node(u).name
                    ));
                }
                continue;
            }
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

    pub(super) fn reader_note(
        &self,
        arg: &str,
        reader: NodeId,
        bytes: Option<u64>,
        why: &str,
    ) -> CloneNote {
        let r = self.graph.node(reader);
        CloneNote {
            arg: arg.to_string(),
            reason: format!("{why} `{}` reads the old value after the call", r.name),
            reader: Some(r.name.clone()),
            reader_source: r.source.clone(),
            bytes,
        }
    }

    pub(super) fn plain_note(arg: &str, reason: String, bytes: Option<u64>) -> CloneNote {
        CloneNote {
            arg: arg.to_string(),
            reason,
            reader: None,
            reader_source: None,
            bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{only_decision, plan_of};
    use super::*;
    use crate::analysis::test_graph::{add_, n, neg, B};
    use crate::plan::Action;

    /// The one clone note of the plan of `g`.
    fn clone_reason(g: &Graph) -> String {
        let p = plan_of(g);
        let d = only_decision(&p);
        assert_eq!(d.action, Action::Cloned);
        assert_eq!(d.clones.len(), 1);
        d.clones[0].reason.clone()
    }

    #[test]
    fn an_input_the_graph_never_writes_back_is_cloned() {
        let mut b = B::new();
        let x = b.input("x");
        let af = b.scale_v2("af", x);
        let nx = b.getitem("nx", af, 1);
        let reason = clone_reason(&b.output(&[nx]));
        assert!(
            reason.starts_with("graph input `x` is not written back by the graph"),
            "{reason}"
        );
    }

    /// `rms(out=t, x=t)` on a fresh `t`, with the pre pass's record
    /// `groups` (none: no record).
    fn read_and_written_on_one_memory(groups: Option<&[&[&str]]>) -> Graph {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let nt = b.rms_on_one_memory("af", t, groups);
        b.output(&[nt])
    }

    #[test]
    fn sharing_between_arguments_with_no_record_leaves_the_node() {
        let g = read_and_written_on_one_memory(None);
        let p = plan_of(&g);
        let d = only_decision(&p);
        assert_eq!(d.action, Action::Left);
        assert_eq!(d.cause, Some(crate::plan::LeftCause::UnattributedSharing));
        let reason = d.reason.as_deref().unwrap();
        assert!(
            reason.starts_with("arguments `out` and `x` share memory"),
            "{reason}"
        );
        assert!(reason.contains("fxrewrite.install()"), "{reason}");
        assert!(p.edits.is_empty());
    }

    #[test]
    fn sharing_the_program_had_is_kept_in_place() {
        let g = read_and_written_on_one_memory(Some(&[&["x", "out"]]));
        let p = plan_of(&g);
        assert_eq!(only_decision(&p).action, Action::Reinplaced);
    }

    #[test]
    fn sharing_the_program_did_not_have_is_split_by_a_clone() {
        let g = read_and_written_on_one_memory(Some(&[&["x"], &["out"]]));
        let reason = clone_reason(&g);
        assert!(
            reason.starts_with("read argument `x` shares memory with it in the graph as it arrives, but did not in the program"),
            "{reason}"
        );
    }

    #[test]
    fn a_record_that_does_not_name_a_sharing_slot_leaves_the_node() {
        let g = read_and_written_on_one_memory(Some(&[&["out"]]));
        let p = plan_of(&g);
        let d = only_decision(&p);
        assert_eq!(d.action, Action::Left);
        assert!(d
            .reason
            .as_deref()
            .unwrap()
            .contains("does not name argument `x`"));
    }

    #[test]
    fn a_buffer_another_inplace_operator_writes_is_cloned() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let w = b.call("w", &add_(), vec![n(t), n(x)]);
        let af = b.scale_v2("af", t);
        let nt = b.getitem("nt", af, 1);
        let reason = clone_reason(&b.output(&[w, nt]));
        assert_eq!(
            reason,
            "the buffer is also written by another in-place operator"
        );
    }

    #[test]
    fn a_direct_use_of_the_call_leaves_it() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let af = b.scale_v2("af", t);
        let r = b.call("r", &neg(), vec![n(af)]);
        let p = plan_of(&b.output(&[r]));
        let d = only_decision(&p);
        assert_eq!(d.action, Action::Left);
        assert_eq!(
            d.reason.as_deref(),
            Some("node `r` uses the auto_functionalized result directly")
        );
    }

    #[test]
    fn a_write_of_no_element_needs_no_clone_even_into_an_input() {
        let plan_for = |start, end| {
            let mut b = B::new();
            let x = b.input("x");
            let af = b.scale_slice_v2("af", x, start, end);
            let nx = b.getitem("nx", af, 1);
            plan_of(&b.output(&[nx]))
        };
        let p = plan_for(2, 2);
        assert_eq!(only_decision(&p).action, Action::Reinplaced);
        let p = plan_for(0, 2);
        assert_eq!(only_decision(&p).action, Action::Cloned);
    }

    #[test]
    fn the_results_of_a_buffer_are_its_getitems() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let af = b.scale_v2("af", t);
        let ret = b.getitem("ret", af, 0);
        let nt = b.getitem("nt", af, 1);
        let g = b.output(&[ret, nt]);
        let cx = Context::new(&g);
        let Some(Ok(FormCall::Mutation(call))) = crate::forms::parse(&g, af).map(|(_, c)| c) else {
            panic!("a v2 mutation call");
        };
        assert_eq!(cx.result_nodes(&call, 0), [nt]);
        assert!(cx.check_users(&call).is_ok());
    }
}
