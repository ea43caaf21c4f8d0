//! The shared safety analysis of a generic mutating call (v1 and v2):
//! per written buffer, re-inplace, move readers, or clone, and why.
//!
//! Decide, then emit: deciding pushes no edit and records no report entry
//! (the plan, `plan_builder.rs`, is only written by `emit_mutation`), and the
//! clone decision is data (`Decided`: per buffer the `CloneReason`, turned
//! into report text only in `unit_notes`). Deciding does change walk state
//! that the checks themselves read, before it knows whether the call is
//! rewritten:
//! - positions (`positions.rs`): the readers a storage class moves ahead of
//!   the call. The checks of a *later* class of the same call must see
//!   them (`readers_to_move`, `reader_from` and `view_geometry` read
//!   `Positions::of`), so an accepted class's moves are live before the
//!   call is decided; a refused class, or a call left because a unit has no
//!   recipe, drops them.
//! - geometry links (`links.rs`, set by the v1 scatter-chain search,
//!   `writeback.rs`): the geometries the search compares run through the
//!   links it gives nodes not walked yet.
//!
//! Both are journaled (`journal.rs`): the call takes a [`Mark`] of them,
//! each storage class a nested one, and a refused class or call rolls back
//! to its mark; nothing here remembers previous values.

use std::collections::BTreeSet;

use crate::analysis::alias::Role;
use crate::analysis::liveness::for_each_reader;
use crate::error::Result;
use crate::forms::call::{MutationCall, ResultSlot};
use crate::ir::NodeId;

use super::clone_reason::CloneReason;
use super::journal::Checkpoint;
use super::sharing::{clone_whole_units, Sharing};
use super::unit_clone::UnitRecipe;
use super::{writeback, Context, Facts, LeftReason, Model, Outcome};

/// Where the journaled walk state (positions and links) stood when a call,
/// or one storage class of it, began to be decided: closed by
/// [`Context::commit`] when it is written in place, by
/// [`Context::rollback`] when not.
#[must_use = "a mark is closed by commit or rollback"]
struct Mark {
    positions: Checkpoint,
    links: Checkpoint,
}

/// What writing buffers in place needs beyond the journaled state: the
/// readers moved ahead of the call and the v1 write-back chains made
/// no-ops (for `emit_mutation`).
#[derive(Debug, Default)]
struct InPlaceNeeds {
    /// Readers moved ahead of the call.
    moved: BTreeSet<NodeId>,
    /// The v1 write-back chains the call makes no-ops.
    chains: Vec<writeback::ScatterChain>,
}

/// What deciding a call settled, for [`super::Emitter::emit_mutation`].
pub(super) struct Decided {
    /// Per buffer, why it is cloned, or `None` when written in place (the
    /// report's text is made from the reason when the report entry is
    /// built: [`Facts::unit_notes`]).
    pub(super) clone: Vec<Option<CloneReason>>,
    /// How each unit with a clone is copied, by unit.
    pub(super) recipes: Vec<(usize, UnitRecipe)>,
    /// Readers moved ahead of the call.
    pub(super) moved: BTreeSet<NodeId>,
    /// The v1 write-back chains the call makes no-ops.
    pub(super) chains: Vec<writeback::ScatterChain>,
}

impl InPlaceNeeds {
    /// Adds the needs of `other`, decided after these.
    fn absorb(&mut self, other: Self) {
        self.moved.extend(other.moved);
        self.chains.extend(other.chains);
    }
}

impl Context<'_> {
    /// Plans a generic mutating call (v1 or v2): decides, per written
    /// buffer, whether it is written in place (moving the readers of its old
    /// value ahead of the call where they can be) or cloned and why
    /// ([`Self::decide_clones`]), then emits the call, or leaves it when a
    /// unit that must be cloned cannot be.
    ///
    /// # Errors
    /// [`crate::Error::Internal`] from `emit_mutation`.
    pub fn rewrite_mutation(&mut self, call: &MutationCall, rule: &'static str) -> Result<Outcome> {
        if let Err(reason) = self.facts.check_users(call) {
            return Ok(Outcome::Left(reason));
        }
        let sharing = match self.sharing(call) {
            Ok(s) => s,
            Err(reason) => return Ok(Outcome::Left(reason)),
        };
        let mark = self.mark();
        let mut needs = InPlaceNeeds::default();
        let clone = self.decide_clones(call, &sharing, &mut needs);
        let recipes = match self.model().unit_recipes(call, &sharing, &clone) {
            Ok(recipes) => recipes,
            Err(reason) => {
                // Nothing is emitted for a node left alone.
                self.rollback(mark);
                return Ok(Outcome::Left(reason));
            }
        };
        self.commit(mark);
        let decided = Decided {
            clone,
            recipes,
            moved: needs.moved,
            chains: needs.chains,
        };
        // What the call writes in place is a new version of that memory.
        let event = self.classes.new_version();
        self.emitter()
            .emit_mutation(call, rule, &sharing, &decided, event)?;
        self.set_written_versions(call, &decided.clone, event);
        Ok(Outcome::Rewritten)
    }

    /// Drops the members of class `root` whose last reader is at or before
    /// `af`, for good: later calls are further down the graph, and a node
    /// moves only ahead of a call, so no reader of them is after one.
    fn drop_dead_members(&mut self, root: usize, af: NodeId) {
        let p = self.pos.of(af);
        let last_read = &self.facts.last_read;
        self.classes.retain_members(
            root,
            |m| matches!(last_read[m.idx()], Some(lr) if 2 * i64::from(lr) > p),
        );
    }

    /// The classes of the buffers `call` writes in place (those not
    /// cloned) hold version `event` of their memory now.
    fn set_written_versions(
        &mut self,
        call: &MutationCall,
        clone: &[Option<CloneReason>],
        event: u32,
    ) {
        let mut touched: Vec<usize> = Vec::new();
        for (bi, b) in call.buffers.iter().enumerate() {
            if clone[bi].is_none() {
                let r = self.classes.find(b.node);
                if !touched.contains(&r) {
                    touched.push(r);
                }
            }
        }
        for r in touched {
            self.classes.set_latest(r, event);
        }
    }

    /// Per buffer of `call`, the note of its clone, or `None` when it is
    /// written in place; the moves and write-back chains that writing in
    /// place needs are added to `needs`. Reasons that hold whatever the
    /// later readers are decided first ([`Model::buffer_reason`]), for whole
    /// units, so that the readers are weighed only for what stays; then the
    /// buffers of each storage class ([`Self::decide_class`]).
    fn decide_clones(
        &mut self,
        call: &MutationCall,
        sharing: &Sharing,
        needs: &mut InPlaceNeeds,
    ) -> Vec<Option<CloneReason>> {
        let nb = call.buffers.len();
        let mut classes: Vec<(usize, Vec<usize>)> = Vec::new();
        for b in 0..nb {
            let r = self.classes.find(call.buffers[b].node);
            match classes.iter_mut().find(|(cr, _)| *cr == r) {
                Some((_, v)) => v.push(b),
                None => classes.push((r, vec![b])),
            }
        }
        // Buffers the call writes no element of: no reason to clone applies
        // to them (they still bind the call's results).
        let noop: Vec<bool> = (0..nb)
            .map(|b| self.model().writes_nothing(call, b))
            .collect();
        let mut clone: Vec<Option<CloneReason>> = (0..nb)
            .map(|b| {
                let reason = (!noop[b]).then(|| self.model().buffer_reason(call, sharing, b));
                reason.flatten()
            })
            .collect();
        clone_whole_units(sharing, &mut clone);
        for (root, bufs) in classes {
            let accepted: Vec<usize> = bufs.into_iter().filter(|&b| clone[b].is_none()).collect();
            if accepted.is_empty() {
                continue;
            }
            let mark = self.mark();
            let mut class = InPlaceNeeds::default();
            match self.decide_class(call, root, &accepted, &noop, &mut class) {
                Ok(()) => {
                    self.commit(mark);
                    needs.absorb(class);
                }
                Err((buffers, reason)) => {
                    self.rollback(mark);
                    for b in buffers {
                        clone[b] = Some(reason.clone());
                    }
                }
            }
        }
        clone_whole_units(sharing, &mut clone);
        clone
    }

    /// Decides buffers `accepted` of storage class `root` (none of them
    /// cloned for a reason of its own): written in place, with the moves and
    /// write-back chain that needs added to `needs`, or the buffers to
    /// clone and why.
    fn decide_class(
        &mut self,
        call: &MutationCall,
        root: usize,
        accepted: &[usize],
        noop: &[bool],
        needs: &mut InPlaceNeeds,
    ) -> std::result::Result<(), (Vec<usize>, CloneReason)> {
        let af = call.node;
        let active: Vec<usize> = accepted.iter().copied().filter(|&b| !noop[b]).collect();
        if let Some(reason) = self.model().input_must_not_change(root, af) {
            return Err((active, reason));
        }
        let cut = self.model().write_back_cut(root, af);
        if call.form.writes_views_back_by_scatter() {
            if let Some(chain) = self.scatter_chain(call, accepted, root) {
                needs.chains.push(chain);
            }
        }
        let chain = needs.chains.first();
        if let Some(reason) = cut.and_then(|cut| {
            self.model()
                .read_after_write_back(call, accepted, cut, chain)
        }) {
            return Err((accepted.to_vec(), reason));
        }
        if !active.is_empty() {
            self.drop_dead_members(root, af);
        }
        let moves = self
            .model()
            .readers_to_move(call, root, &active, cut, chain)
            .map_err(|reason| (active, reason))?;
        for m in moves {
            self.pos.move_ahead_of(m, af);
            needs.moved.insert(m);
        }
        Ok(())
    }

    /// Starts recording the journaled walk state (positions and links).
    fn mark(&mut self) -> Mark {
        Mark {
            positions: self.pos.checkpoint(),
            links: self.links.checkpoint(),
        }
    }

    /// Keeps the changes since `mark`.
    fn commit(&mut self, mark: Mark) {
        self.pos.commit(mark.positions);
        self.links.commit(mark.links);
    }

    /// Restores positions and links as they were at `mark`.
    fn rollback(&mut self, mark: Mark) {
        self.pos.rollback(mark.positions);
        self.links.rollback(mark.links);
    }
}

impl Model<'_, '_> {
    /// How each unit with a clone is copied (by unit), or the reason one
    /// cannot be: a clone must reproduce the exact layout of every value it
    /// stands for, which needs at least the rank and a static storage
    /// offset (the value's own, or that of a view source the clone is cut
    /// from again), and the members of a unit must be made again from one
    /// copy.
    pub(super) fn unit_recipes(
        &self,
        call: &MutationCall,
        sharing: &Sharing,
        clone: &[Option<CloneReason>],
    ) -> std::result::Result<Vec<(usize, UnitRecipe)>, LeftReason> {
        let mut recipes: Vec<(usize, UnitRecipe)> = Vec::new();
        for (b, note) in clone.iter().enumerate() {
            let u = sharing.unit_of_buffer[b];
            if note.is_none() || recipes.iter().any(|(ru, _)| *ru == u) {
                continue;
            }
            let members = self.unit_members(call, sharing, u);
            if let [only] = members[..] {
                if self.facts.unit_is_a_deleted_clone(call, sharing, u) {
                    recipes.push((u, UnitRecipe::FreshClone { node: only }));
                    continue;
                }
            }
            let recipe = self
                .unit_recipe(&members)
                .map_err(|why| LeftReason::NoExactClone {
                    arg: call.buffers[b].label.clone(),
                    why,
                })?;
            recipes.push((u, recipe));
        }
        Ok(recipes)
    }

    /// The first node found that reads the memory of one of `values`
    /// (directly or through views) at position `from` or later, other than
    /// `except` (the write-back itself).
    pub(super) fn reader_from(
        &self,
        values: &[NodeId],
        from: i64,
        except: Option<NodeId>,
    ) -> Option<NodeId> {
        let mut late = None;
        for &v in values {
            for_each_reader(&self.facts.roles, &self.facts.uses, v, &mut |r, _| {
                if self.pos.of(r) >= from && Some(r) != except {
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
}

impl Facts<'_> {
    /// The getitem nodes of `call` that stand for buffer `b`'s new value.
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

    /// Why `call` is left for a use of its result the engine does not
    /// follow, if one has such a use.
    pub(super) fn check_users(&self, call: &MutationCall) -> std::result::Result<(), LeftReason> {
        for &u in self.uses.users(call.node) {
            if self.ordering_only_use(u, call.node) {
                if call.buffers.is_empty() {
                    return Err(LeftReason::OrdersAfterNoWrite { user: u });
                }
                continue;
            }
            let Role::AfResult { index, .. } = self.roles[u.idx()] else {
                return Err(LeftReason::ResultUsedDirectly { user: u });
            };
            match call.results.get(index) {
                None => return Err(LeftReason::GetitemOutOfRange { index }),
                Some(ResultSlot::BufferList(items)) => {
                    for &gu in self.uses.users(u) {
                        match self.roles[gu.idx()] {
                            Role::AfListItem { item, .. }
                                if items.get(item).copied().flatten().is_some() => {}
                            _ => return Err(LeftReason::ListUsedDirectly { user: gu }),
                        }
                    }
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{only_decision, plan_of};
    use super::*;
    use crate::analysis::test_graph::{add, add_, n, neg, op, B};
    use crate::forms::FormCall;
    use crate::ir::schema::ArgType::Tensor;
    use crate::ir::{Graph, Value};
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
        assert_eq!(cx.facts.result_nodes(&call, 0), [nt]);
        assert!(cx.facts.check_users(&call).is_ok());
    }

    #[test]
    fn a_call_left_alone_leaves_the_readers_it_moved_where_they_stood() {
        // `t`'s class is decided first and moves `r` ahead of the call;
        // `u`'s old value is read by `late` after the call (which needs
        // the call's result, so it cannot move) and `u` has no metadata to
        // clone it with: the call is left, and `r` must be back.
        let two = op(
            "m::two_.default",
            &[("x", Tensor, "a!"), ("y", Tensor, "b!")],
            &[],
        );
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let u = b.call("u", &neg(), vec![n(x)]);
        let af = b.af(
            "af",
            true,
            &two,
            vec![
                ("_x_base_index", Value::Int(0)),
                ("_y_base_index", Value::Int(1)),
                ("_all_bases", Value::List(vec![n(t), n(u)])),
            ],
        );
        let nt = b.getitem("nt", af, 1);
        let r = b.fresh("r", t);
        let late = b.call("late", &add(), vec![n(u), n(nt)]);
        let g = b.output(&[nt, r, late]);
        let plan = plan_of(&g);
        assert_eq!(only_decision(&plan).action, Action::Left, "{plan:#?}");
        let mut cx = Context::new(&g);
        cx.run().unwrap();
        assert_eq!(cx.pos.of(r), 2 * i64::from(r.0));
    }
}
