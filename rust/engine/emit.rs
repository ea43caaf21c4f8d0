//! Emission: the edits of a decided mutating call (pushed through
//! `PlanBuilder`, `plan_builder.rs`), in order: moves, buffers (`unit_clone.rs`),
//! written arguments (`written_args.rs`), the in-place call, the results
//! bound to what they now are, the removed v1 write-backs, and the report
//! entry ([`Facts::node_report`], the one constructor of a `NodeReport`;
//! the clone reasons decided are made report text here, in
//! [`Facts::unit_notes`]).
//! The blocks an out= call shares (`out_call.rs`) are here too.

use crate::analysis::alias::Role;
use crate::error::Result;
use crate::forms::call::{CallArg, MutationCall, ResultSlot, ViewOfBuffer};
use crate::forms::Form;
use crate::ir::NodeId;
use crate::plan::{Action, Callee, CloneNote, MetaSource, NewId, NodeReport, PlanArg, ValueRef};

use super::bindings::Bind;
use super::clone_reason::CloneReason;
use super::mutation::Decided;
use super::sharing::Sharing;
use super::{writeback, Emitter, Facts};

impl Emitter<'_, '_> {
    /// Emits the rewrite of a decided mutating call: the moves, the buffers
    /// (real, or a unit's copy), the written arguments cut again from them,
    /// the in-place call, the results bound to what they now are, the v1
    /// write-backs it makes no-ops, and the report. `event` is the version
    /// of the memory the call writes in place.
    ///
    /// # Errors
    /// [`crate::Error::Internal`] from [`Self::emit_buffers`].
    pub(super) fn emit_mutation(
        &mut self,
        call: &MutationCall,
        rule: &'static str,
        sharing: &Sharing,
        decided: &Decided,
        event: u32,
    ) -> Result<()> {
        let Decided {
            clone,
            recipes,
            moved,
            chains,
        } = decided;
        let af = call.node;
        for &m in moved {
            self.plan.move_before(m, af);
        }
        // Buffers: the real one, or one copy per unit, every member of the
        // unit (written or read) made again from it.
        let (buf_val, read_val, unit_bytes) = self.emit_buffers(call, sharing, clone, recipes)?;
        let arg_val = self.emit_written_args(call, &buf_val, clone);
        let call_id = self.emit_inplace_call(call, &arg_val, &read_val);
        let binds = result_binds(call, sharing, clone, event);
        self.replace_results(call, &buf_val, &arg_val, call_id, &binds);
        // Ordering-only users (`control_deps`) now depend on written memory.
        if let Some(&first) = buf_val.first() {
            self.order_users_after(af, first);
        }
        self.plan.erase(af);
        self.bindings.bind_results(af, binds);
        let scatters_removed = self.remove_scatters(chains, event);
        self.record_in_place_writes(call, sharing, clone);
        let clones = self.facts.unit_notes(call, sharing, clone, &unit_bytes);
        let action = if clones.is_empty() {
            Action::Reinplaced
        } else {
            Action::Cloned
        };
        let moved = moved
            .iter()
            .map(|m| self.facts.graph.node(*m).name.clone())
            .collect();
        let decision = NodeReport {
            moved,
            clones,
            scatters_removed,
            ..self
                .facts
                .node_report(af, self.facts.op_name(call.op), call.form, rule, action)
        };
        self.plan.decide(decision);
        Ok(())
    }

    /// The in-place call itself, on the written arguments `arg_val` and the
    /// read arguments (some made again from a copy: `read_val`).
    fn emit_inplace_call(
        &mut self,
        call: &MutationCall,
        arg_val: &[ValueRef],
        read_val: &[Option<ValueRef>],
    ) -> NewId {
        let args: Vec<(String, bool, PlanArg)> = call
            .call_args
            .iter()
            .map(|(name, kwarg_only, a)| {
                let pa = match a {
                    CallArg::Kwarg(k) => self.model().read_arg(call, k, read_val),
                    CallArg::Written(w) => PlanArg::Ref(arg_val[*w]),
                    CallArg::WrittenList(items) => PlanArg::List(
                        items
                            .iter()
                            .map(|i| i.map_or(PlanArg::None, |w| PlanArg::Ref(arg_val[w])))
                            .collect(),
                    ),
                    CallArg::None => PlanArg::None,
                };
                (name.clone(), *kwarg_only, pa)
            })
            .collect();
        let (args, kwargs) = positional_where_allowed(args);
        let meta = returns_meta(call.node, call.return_aliases.len(), Some(0));
        self.plan
            .insert(call.node, Callee::Target(call.op), args, kwargs, meta)
    }

    /// Replaces each result of `call` (getitems, and the items of written
    /// lists) with what it now is: its buffer's value, its written
    /// argument, or a return of the in-place call `call_id`.
    fn replace_results(
        &mut self,
        call: &MutationCall,
        buf_val: &[ValueRef],
        arg_val: &[ValueRef],
        call_id: NewId,
        binds: &[Bind],
    ) {
        let af = call.node;
        let n_returns = call.return_aliases.len();
        let users: Vec<NodeId> = self.facts.uses.users(af).to_vec();
        for u in users {
            let Role::AfResult { index, .. } = self.facts.roles[u.idx()] else {
                continue;
            };
            match &call.results[index] {
                ResultSlot::Return(i) => {
                    let v = match call.return_aliases.get(*i).copied().flatten() {
                        Some(w) => arg_val[w],
                        None if n_returns == 1 => ValueRef::New(call_id),
                        None => self.getitem_of(af, call_id, *i),
                    };
                    self.plan.replace(u, v);
                }
                ResultSlot::Buffer(bi) => self.plan.replace(u, buf_val[*bi]),
                ResultSlot::BufferList(items) => {
                    let list_users: Vec<NodeId> = self.facts.uses.users(u).to_vec();
                    for gu in list_users {
                        if let Role::AfListItem { item, .. } = self.facts.roles[gu.idx()] {
                            if let Some(Some(bi)) = items.get(item) {
                                self.plan.replace(gu, buf_val[*bi]);
                                self.plan.erase(gu);
                            }
                        }
                    }
                    self.bindings.bind_results(u, vec![binds[index].clone()]);
                }
            }
            self.plan.erase(u);
        }
    }

    /// Removes the scatters of the v1 write-back chains the call made
    /// no-ops (their users read the base, at version `event`); returns how
    /// many.
    fn remove_scatters(&mut self, chains: &[writeback::ScatterChain], event: u32) -> usize {
        let mut removed = 0;
        for c in chains {
            for (&sc, &(base, _)) in c {
                self.bindings.bind_scatter(sc, base, event);
                self.plan.replace(sc, ValueRef::Old(base));
                self.plan.erase(sc);
                removed += 1;
            }
        }
        removed
    }

    /// Records the buffers `call` writes in place: they (and the read slots
    /// sharing their memory) are realized where the call gets them
    /// (`realize.rs`).
    fn record_in_place_writes(
        &mut self,
        call: &MutationCall,
        sharing: &Sharing,
        clone: &[Option<CloneReason>],
    ) {
        let p = self.pos.of(call.node);
        for (bi, b) in call.buffers.iter().enumerate() {
            if clone[bi].is_none() {
                self.in_place.write(b.node, p);
            }
        }
        // Read slots that share the memory written in place: they must be
        // views of the same buffer in Inductor's lowering too.
        for &(r, u) in &sharing.unit_reads {
            if let Some(b) = (0..call.buffers.len()).find(|&b| sharing.unit_of_buffer[b] == u) {
                if clone[b].is_none() {
                    self.in_place.share(call.read_nodes[r].1);
                }
            }
        }
    }

    /// `getitem(call_id, i)`, return `i` of the inserted call, with the
    /// metadata of output `i` of `af`.
    pub(super) fn getitem_of(&mut self, af: NodeId, call_id: NewId, i: usize) -> ValueRef {
        ValueRef::New(self.plan.insert(
            af,
            Callee::Getitem,
            vec![
                PlanArg::Ref(ValueRef::New(call_id)),
                PlanArg::Int(i64::try_from(i).unwrap_or(0)),
            ],
            vec![],
            MetaSource::AfOutput {
                node: af,
                index: Some(i),
            },
        ))
    }

    /// Makes the ordering-only users of `af` (`control_deps`: see
    /// [`Facts::ordering_only_use`]) depend on `memory`, which the call
    /// writes, once `af` is gone.
    pub(super) fn order_users_after(&mut self, af: NodeId, memory: ValueRef) {
        if self
            .facts
            .uses
            .users(af)
            .iter()
            .any(|&u| self.facts.ordering_only_use(u, af))
        {
            self.plan.replace(af, memory);
        }
    }
}

/// What each result slot of `call` stands for after the rewrite, version
/// `event` of the memory written in place.
fn result_binds(
    call: &MutationCall,
    sharing: &Sharing,
    clone: &[Option<CloneReason>],
    event: u32,
) -> Vec<Bind> {
    let af = call.node;
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
    call.results
        .iter()
        .map(|slot| match slot {
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
        })
        .collect()
}

/// Splits a call's arguments `(name, keyword-only, value)` into positional
/// and keyword ones: positional where the schema allows it (Inductor's
/// lowering mishandles some keyword spellings, e.g. `out`).
pub(super) fn positional_where_allowed(
    args: Vec<(String, bool, PlanArg)>,
) -> (Vec<PlanArg>, Vec<(String, PlanArg)>) {
    let mut positional = Vec::new();
    let mut keyword = Vec::new();
    for (name, kwarg_only, a) in args {
        if kwarg_only {
            keyword.push((name, a));
        } else {
            positional.push(a);
        }
    }
    (positional, keyword)
}

/// The metadata of a call inserted for `af` that returns `n_returns`
/// values: none, output `one` of `af` (a single return), or its outputs.
pub(super) fn returns_meta(af: NodeId, n_returns: usize, one: Option<usize>) -> MetaSource {
    match n_returns {
        0 => MetaSource::Nothing,
        1 => MetaSource::AfOutput {
            node: af,
            index: one,
        },
        k => MetaSource::AfOutputs {
            node: af,
            start: 0,
            end: k,
        },
    }
}

impl Facts<'_> {
    /// The clone notes of a call: one per cloned unit, its reason turned
    /// into the report's text, naming every member the copy serves, with
    /// the bytes the copy moves.
    pub(super) fn unit_notes(
        &self,
        call: &MutationCall,
        sharing: &Sharing,
        clone: &[Option<CloneReason>],
        unit_bytes: &[(usize, Option<u64>)],
    ) -> Vec<CloneNote> {
        let mut notes = Vec::new();
        let mut seen: Vec<usize> = Vec::new();
        for (b, reason) in clone.iter().enumerate() {
            let Some(reason) = reason else { continue };
            let u = sharing.unit_of_buffer[b];
            if seen.contains(&u) {
                continue;
            }
            seen.push(u);
            let mut others: Vec<String> = sharing
                .unit_buffers(b)
                .filter(|&o| o != b)
                .map(|o| call.buffers[o].label.clone())
                .collect();
            others.extend(
                sharing
                    .unit_read_slots(u)
                    .map(|r| call.read_nodes[r].0.clone()),
            );
            let bytes = unit_bytes.iter().find(|(x, _)| *x == u).map_or_else(
                || {
                    let meta = self.graph.node(call.buffers[b].node).meta.as_ref();
                    meta.and_then(crate::ir::TensorMeta::nbytes)
                },
                |(_, bytes)| *bytes,
            );
            let mut note = reason.note(self.graph, &call.buffers[b].label, bytes);
            if !others.is_empty() {
                note.reason = format!(
                    "{}; one copy also serves `{}`, which shared its memory in the program",
                    note.reason,
                    others.join("`, `")
                );
            }
            notes.push(note);
        }
        notes
    }

    /// The qualified name of operator `op`.
    pub(super) fn op_name(&self, op: crate::ir::TargetId) -> String {
        self.graph.targets[op.idx()].name.clone()
    }

    /// The report of auto_functionalized node `af` (operator `op`, read
    /// by `rule`), with no moves, clones, removed scatters or reason: the
    /// one constructor of a [`NodeReport`], the caller adds the rest.
    pub(super) fn node_report(
        &self,
        af: NodeId,
        op: String,
        form: Form,
        rule: &'static str,
        action: Action,
    ) -> NodeReport {
        let node = self.graph.node(af);
        NodeReport {
            node: node.name.clone(),
            op,
            form,
            rule,
            action,
            moved: vec![],
            clones: vec![],
            scatters_removed: 0,
            reason: None,
            cause: None,
            source: node.source.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{call_args, erased, inserted, only_decision, plan_of};
    use super::*;
    use crate::analysis::test_graph::B;
    use crate::plan::Action;
    use crate::plan::Edit;

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
}
