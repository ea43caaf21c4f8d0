//! One copy for a unit of slots that shared memory in the program
//! (`sharing.rs`): when the unit cannot be written in place, the common
//! memory of its members is copied once and every member, written or read,
//! is made again from that copy with its own layout. One clone per member
//! would split the sharing the kernel saw in eager.

use crate::analysis::alias::Role;
use crate::error::Result;
use crate::forms::call::{slot_label, MutationCall};
use crate::ir::{NodeId, TargetKind};
use crate::plan::{Callee, MetaSource, PlanArg, ValueRef};

use super::clone_reason::CloneReason;
use super::layout::{replayable_view, required_storage, strided_layout, CloneSource, Replay};
use super::sharing::Sharing;
use super::{Emitter, Facts, Model};

/// What [`Emitter::emit_buffers`] gives the call: per buffer its value, per
/// read slot the value made again from a copy (if any), and per cloned unit
/// the bytes its copy moves.
pub(super) type EmittedBuffers = (
    Vec<ValueRef>,
    Vec<Option<ValueRef>>,
    Vec<(usize, Option<u64>)>,
);

/// How the members of a cloned unit are made from one copy.
pub(super) enum UnitRecipe {
    /// One member: an exact clone of it, made as `source` says.
    Single { node: NodeId, source: CloneSource },
    /// One member whose every slot held the whole result of a `clone` in
    /// the program (the pre pass's record), deleted by `remove_noop_ops`: a
    /// plain `clone` of it, the layout eager's clone had (offset 0), where
    /// an exact clone would keep the offset of the memory it now views.
    FreshClone { node: NodeId },
    /// An exact clone of `anchor` (made as `source` says), a view source of
    /// every member (or a member itself); each member is its graph view
    /// nodes from the anchor, applied again to the copy (outermost first).
    Ancestor {
        anchor: NodeId,
        source: CloneSource,
        paths: Vec<(NodeId, Vec<Replay>)>,
    },
    /// Members related only through their storage: the first `needed`
    /// elements of the storage of `source` are copied flat, and every member
    /// is an `as_strided` of the copy with its static layout.
    Flat {
        source: NodeId,
        needed: i64,
        layouts: Vec<(NodeId, Vec<i64>, Vec<i64>, i64)>,
    },
}

impl Emitter<'_, '_> {
    /// Emits the copy of `recipe` before `af`; returns each member's value
    /// made from it.
    pub(super) fn emit_unit_clone(
        &mut self,
        af: NodeId,
        recipe: &UnitRecipe,
    ) -> Vec<(NodeId, ValueRef)> {
        match recipe {
            UnitRecipe::Single { node, source } => {
                let base = self.plan.resolve(*node);
                vec![(*node, ValueRef::New(self.exact_clone(af, base, source)))]
            }
            UnitRecipe::FreshClone { node } => {
                let base = self.plan.resolve(*node);
                let copy = self.plan.insert(
                    af,
                    Callee::Aten("aten::clone.default"),
                    vec![PlanArg::Ref(base)],
                    vec![],
                    MetaSource::Compute,
                );
                // A plain clone is a lazy value to Inductor, and the call may
                // get it in several slots (`two_(t, t, x)` where `t` was a
                // clone): Inductor, given one lazy value in two written
                // slots, computes it into two buffers, and the call writes
                // two memories where eager's wrote one. Realized where it
                // stands, it is one buffer every slot views. (An exact clone
                // needs no mark: its `as_strided` realizes the copy.)
                self.plan.realize_new(copy);
                vec![(*node, ValueRef::New(copy))]
            }
            UnitRecipe::Ancestor {
                anchor,
                source,
                paths,
            } => {
                let base = self.plan.resolve(*anchor);
                let copy = ValueRef::New(self.exact_clone(af, base, source));
                let mut out = Vec::new();
                for (m, replays) in paths {
                    let mut v = copy;
                    for (callee, rest, kwargs) in replays.clone() {
                        let mut args = vec![PlanArg::Ref(v)];
                        args.extend(rest);
                        v = ValueRef::New(self.plan.insert(
                            af,
                            callee,
                            args,
                            kwargs,
                            MetaSource::Compute,
                        ));
                    }
                    out.push((*m, v));
                }
                out
            }
            UnitRecipe::Flat {
                source,
                needed,
                layouts,
            } => {
                let source = self.plan.resolve(*source);
                let copy = self.plan.flat_copy(af, source, PlanArg::Int(*needed));
                layouts
                    .iter()
                    .map(|(m, size, stride, offset)| {
                        let v = self.plan.insert(
                            af,
                            Callee::Aten("aten::as_strided.default"),
                            vec![
                                PlanArg::Ref(ValueRef::New(copy)),
                                PlanArg::IntList(size.clone()),
                                PlanArg::IntList(stride.clone()),
                                PlanArg::Int(*offset),
                            ],
                            vec![],
                            MetaSource::Compute,
                        );
                        (*m, ValueRef::New(v))
                    })
                    .collect()
            }
        }
    }

    /// The values the call gets for its buffers (the real memory, or a
    /// unit's copy) and for the read slots made again from a copy, and the
    /// bytes each unit's copy moves.
    ///
    /// # Errors
    /// [`crate::Error::Internal`] when a cloned buffer's unit has no recipe,
    /// or its copy makes no value for one of the unit's buffers: the call
    /// would otherwise write the real buffer it was to spare.
    pub(super) fn emit_buffers(
        &mut self,
        call: &MutationCall,
        sharing: &Sharing,
        clone: &[Option<CloneReason>],
        recipes: &[(usize, UnitRecipe)],
    ) -> Result<EmittedBuffers> {
        let nb = call.buffers.len();
        let mut buf_val: Vec<Option<ValueRef>> = vec![None; nb];
        let mut read_val: Vec<Option<ValueRef>> = vec![None; call.read_nodes.len()];
        let mut unit_bytes = Vec::new();
        for b in 0..nb {
            if clone[b].is_none() {
                buf_val[b] = Some(self.plan.resolve(call.buffers[b].node));
                continue;
            }
            if buf_val[b].is_some() {
                continue;
            }
            let u = sharing.unit_of_buffer[b];
            let Some((_, recipe)) = recipes.iter().find(|(ru, _)| *ru == u) else {
                return Err(self.facts.unmade(
                    call,
                    &call.buffers[b].label,
                    "its unit has no recipe",
                ));
            };
            unit_bytes.push((u, self.model().recipe_bytes(recipe)));
            let made = self.emit_unit_clone(call.node, recipe);
            let value_of = |cx: &Self, n: NodeId| {
                made.iter()
                    .find(|(m, _)| cx.plan.resolve(*m) == cx.plan.resolve(n))
                    .map(|(_, v)| *v)
            };
            let no_value = "its unit's copy made no value for it";
            for o in sharing.unit_buffers(b).collect::<Vec<_>>() {
                let v = value_of(self, call.buffers[o].node);
                buf_val[o] =
                    Some(v.ok_or_else(|| {
                        self.facts.unmade(call, &call.buffers[o].label, no_value)
                    })?);
            }
            for r in sharing.unit_read_slots(u).collect::<Vec<_>>() {
                let v = value_of(self, call.read_nodes[r].1);
                read_val[r] = Some(
                    v.ok_or_else(|| self.facts.unmade(call, &call.read_nodes[r].0, no_value))?,
                );
            }
        }
        // Every buffer is set: written in place, or by its unit's copy.
        let buf_val = buf_val
            .into_iter()
            .enumerate()
            .map(|(b, v)| {
                v.ok_or_else(|| {
                    self.facts
                        .unmade(call, &call.buffers[b].label, "it got no value")
                })
            })
            .collect::<Result<Vec<ValueRef>>>()?;
        Ok((buf_val, read_val, unit_bytes))
    }
}

impl Model<'_, '_> {
    /// The distinct memories of unit `u` of `call`: its buffers' nodes and
    /// its read slots' nodes, one node per distinct value (two slots holding
    /// one tensor are one member).
    pub(super) fn unit_members(
        &self,
        call: &MutationCall,
        sharing: &Sharing,
        u: usize,
    ) -> Vec<NodeId> {
        let mut members: Vec<NodeId> = Vec::new();
        let nodes = (0..call.buffers.len())
            .filter(|&b| sharing.unit_of_buffer[b] == u)
            .map(|b| call.buffers[b].node)
            .chain(sharing.unit_read_slots(u).map(|r| call.read_nodes[r].1));
        for n in nodes {
            if !members
                .iter()
                .any(|&m| self.plan.resolve(m) == self.plan.resolve(n))
            {
                members.push(n);
            }
        }
        members
    }

    /// How to make `members` from one copy, or why they cannot be.
    pub(super) fn unit_recipe(
        &self,
        members: &[NodeId],
    ) -> std::result::Result<UnitRecipe, String> {
        if let [only] = members {
            let source = self.clone_source(*only)?;
            return Ok(UnitRecipe::Single {
                node: *only,
                source,
            });
        }
        match self.common_view_source(members) {
            Ok(recipe) => Ok(recipe),
            Err(why) => self.flat_recipe(members).map_err(|flat| {
                format!("its arguments that share memory cannot be made again from one copy: {why}, and {flat}")
            }),
        }
    }

    /// The chain of view sources of `n` (itself first), as far as the views
    /// can be replayed. A node the plan replaced stands for its replacement
    /// (a result bound to its buffer), so the chain continues from there.
    fn view_chain(&self, n: NodeId) -> Vec<NodeId> {
        let ValueRef::Old(mut cur) = self.plan.resolve(n) else {
            return Vec::new();
        };
        let mut chain = vec![cur];
        while let Role::View { src, .. } = self.facts.roles[cur.idx()] {
            if self.replay_args_of(cur, src).is_err() {
                break;
            }
            let ValueRef::Old(next) = self.plan.resolve(src) else {
                break;
            };
            chain.push(next);
            cur = next;
        }
        chain
    }

    fn replay_args_of(&self, v: NodeId, src: NodeId) -> std::result::Result<Replay, String> {
        let target = self.facts.graph.target_of(v);
        if target.kind != TargetKind::Getitem && replayable_view(&target.name).is_none() {
            return Err(format!("`{}` is not a view it replays", target.name));
        }
        self.replay_args(v, src)
    }

    fn common_view_source(&self, members: &[NodeId]) -> std::result::Result<UnitRecipe, String> {
        let chains: Vec<Vec<NodeId>> = members.iter().map(|&m| self.view_chain(m)).collect();
        let anchor = chains
            .first()
            .and_then(|c0| {
                c0.iter()
                    .copied()
                    .find(|a| chains.iter().all(|c| c.contains(a)))
            })
            .ok_or("they have no common view source")?;
        let source = self
            .clone_source(anchor)
            .map_err(|why| format!("their common view source cannot be cloned: {why}"))?;
        let mut paths = Vec::new();
        for (m, chain) in members.iter().zip(&chains) {
            let below: Vec<NodeId> = chain.iter().copied().take_while(|&c| c != anchor).collect();
            let mut replays = Vec::new();
            for (i, &v) in below.iter().enumerate().rev() {
                // The view's own source argument (the chain holds what it
                // resolves to).
                let Some(Role::View { src, .. }) = self.facts.roles.get(v.idx()).cloned() else {
                    return Err(format!("`{}` is not a view", self.facts.graph.node(v).name));
                };
                debug_assert_eq!(self.plan.resolve(src), ValueRef::Old(chain[i + 1]));
                if self.facts.graph.target_of(v).name == "aten::as_strided.default"
                    && !self.within(v, anchor)
                {
                    return Err(format!(
                        "`{}` is an as_strided view not provably inside the memory of `{}`",
                        self.facts.graph.node(v).name,
                        self.facts.graph.node(anchor).name
                    ));
                }
                replays.push(self.replay_args(v, src)?);
            }
            paths.push((*m, replays));
        }
        Ok(UnitRecipe::Ancestor {
            anchor,
            source,
            paths,
        })
    }

    /// True when the static layout of `v` needs no storage element past
    /// those of `anchor`: a copy of the anchor's storage holds it.
    fn within(&self, v: NodeId, anchor: NodeId) -> bool {
        let needed = |n: NodeId| {
            strided_layout(self.facts.graph, self.layout_source(n))
                .map(|(size, stride, offset)| required_storage(&size, &stride, offset))
        };
        matches!((needed(v), needed(anchor)), (Some(a), Some(b)) if a <= b)
    }

    fn flat_recipe(&self, members: &[NodeId]) -> std::result::Result<UnitRecipe, String> {
        let mut layouts = Vec::new();
        let mut storage = None;
        let mut dtype = None;
        let mut needed = 0;
        for &m in members {
            let src = self.layout_source(m);
            let meta = self.facts.graph.node(src).meta.as_ref();
            let Some((size, stride, offset)) = strided_layout(self.facts.graph, src) else {
                return Err(format!(
                    "the layout of `{}` is not static",
                    self.facts.graph.node(m).name
                ));
            };
            let key = meta.and_then(|m| m.storage);
            if key.is_none() || storage.is_some_and(|s| Some(s) != key) {
                return Err("their storage is not known to be one".into());
            }
            storage = key;
            let dt = meta.map(|m| m.dtype.clone());
            if dtype.is_some() && dtype != dt {
                return Err("they differ in dtype".into());
            }
            dtype = dt;
            needed = needed.max(required_storage(&size, &stride, offset));
            layouts.push((m, size, stride, offset));
        }
        Ok(UnitRecipe::Flat {
            source: members[0],
            needed,
            layouts,
        })
    }

    /// Bytes one copy of the recipe moves, when static.
    pub(super) fn recipe_bytes(&self, recipe: &UnitRecipe) -> Option<u64> {
        let nbytes = |n: NodeId| {
            self.facts
                .graph
                .node(self.layout_source(n))
                .meta
                .as_ref()
                .and_then(crate::ir::TensorMeta::nbytes)
        };
        match recipe {
            UnitRecipe::Single { node: n, .. }
            | UnitRecipe::FreshClone { node: n }
            | UnitRecipe::Ancestor { anchor: n, .. } => nbytes(*n),
            UnitRecipe::Flat { source, needed, .. } => {
                let item = self.facts.graph.node(*source).meta.as_ref()?.itemsize;
                u64::try_from(*needed).ok()?.checked_mul(u64::from(item))
            }
        }
    }

    /// Read argument `key` of the call: passed through, or, where a slot of
    /// it is made again from a unit's copy, rebuilt with that value.
    pub(super) fn read_arg(
        &self,
        call: &MutationCall,
        key: &str,
        read_val: &[Option<ValueRef>],
    ) -> PlanArg {
        let from_kwarg = PlanArg::FromKwarg {
            node: call.node,
            key: key.to_string(),
        };
        let made = |label: &str| {
            call.read_nodes
                .iter()
                .zip(read_val)
                .find(|((l, _), v)| l == label && v.is_some())
                .and_then(|(_, v)| *v)
        };
        match self.facts.graph.node(call.node).kwarg(key) {
            Some(crate::ir::Value::Node(_)) => made(key).map_or(from_kwarg, PlanArg::Ref),
            Some(crate::ir::Value::List(items) | crate::ir::Value::Tuple(items))
                if (0..items.len()).any(|i| made(&slot_label(key, i)).is_some()) =>
            {
                let rebuilt: Option<Vec<PlanArg>> = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| match made(&slot_label(key, i)) {
                        Some(v) => Some(PlanArg::Ref(v)),
                        None => self.plan_arg(item),
                    })
                    .collect();
                rebuilt.map_or(from_kwarg, PlanArg::List)
            }
            _ => from_kwarg,
        }
    }
}

impl Facts<'_> {
    /// True when every slot of unit `u` of `call` held the whole result of
    /// a `clone` in the program, as the pre pass recorded: its copy stands
    /// for that clone. Judged per unit, not per node: `remove_noop_ops` can
    /// make a deleted clone's slot the very tensor another slot holds (`[v,
    /// v[0], v.clone()]` arrives as `[v, v[0], v]`), and only the clone's
    /// unit gets a fresh copy's layout.
    pub(super) fn unit_is_a_deleted_clone(
        &self,
        call: &MutationCall,
        sharing: &Sharing,
        u: usize,
    ) -> bool {
        if call.fresh_slots.is_empty() {
            return false;
        }
        let mut labels = call
            .written
            .iter()
            .filter(|w| sharing.unit_of_buffer[w.buffer] == u)
            .map(|w| w.label.as_str())
            .chain(
                sharing
                    .unit_read_slots(u)
                    .map(|r| call.read_nodes[r].0.as_str()),
            )
            .peekable();
        labels.peek().is_some() && labels.all(|l| call.fresh_slots.iter().any(|f| f == l))
    }

    /// The internal error for slot `label` of `call`, cloned but `why`.
    fn unmade(&self, call: &MutationCall, label: &str, why: &str) -> crate::Error {
        crate::Error::Internal {
            node: Some(call.node.0),
            detail: format!(
                "`{label}` of {} is cloned but {why}",
                self.graph.node(call.node).name
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::inserted;
    use super::super::{nid, Context};
    use super::*;
    use crate::analysis::test_graph::{meta, B};
    use crate::forms::FormCall;
    use crate::ir::Graph;

    #[test]
    fn one_member_is_an_exact_clone_of_it() {
        let mut b = B::new();
        let x = b.input("x");
        let g = b.output(&[x]);
        let cx = Context::new(&g);
        let recipe = cx.model().unit_recipe(&[x]).unwrap();
        assert!(matches!(recipe, UnitRecipe::Single { node, .. } if node == x));
        // A [4, 8] float32 copy.
        assert_eq!(cx.model().recipe_bytes(&recipe), Some(128));
    }

    #[test]
    fn views_of_one_source_are_cut_again_from_one_copy_of_it() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let top = b.slice("top", t, 0, 0, 2);
        let bottom = b.slice("bottom", t, 0, 2, 4);
        let g = b.output(&[top, bottom]);
        let mut cx = Context::new(&g);
        let recipe = cx.model().unit_recipe(&[top, bottom]).unwrap();
        let UnitRecipe::Ancestor { anchor, paths, .. } = &recipe else {
            panic!("one copy of the common source");
        };
        assert_eq!(*anchor, t);
        let members: Vec<NodeId> = paths.iter().map(|(m, _)| *m).collect();
        assert_eq!(members, [top, bottom]);
        assert!(paths.iter().all(|(_, replays)| replays.len() == 1));
        // Emitted: the exact clone of `t`, then each slice on the copy.
        let made = cx.emitter().emit_unit_clone(top, &recipe);
        assert_eq!(made.len(), 2);
        let p = cx.finish();
        assert_eq!(
            inserted(&g, &p),
            [
                "aten::as_strided.default",
                "aten::clone.default",
                "aten::as_strided.default",
                "aten::slice.Tensor",
                "aten::slice.Tensor"
            ]
        );
    }

    /// Two graph inputs `[4, 8]` with storage keys `kx`, `ky` and dtype of
    /// `y` `dy`.
    fn two_inputs(kx: Option<u64>, ky: Option<u64>, dy: &str) -> (Graph, NodeId, NodeId) {
        let mut b = B::new();
        let x = b.input("x");
        let y = b.input("y");
        let m = |k, d: &str| {
            let mut m = meta(&[4, 8]);
            m.storage = k;
            m.dtype = d.into();
            Some(m)
        };
        b.g.nodes[x.idx()].meta = m(kx, "float32");
        b.g.nodes[y.idx()].meta = m(ky, dy);
        (b.output(&[x, y]), x, y)
    }

    #[test]
    fn members_on_one_known_storage_are_viewed_from_one_flat_copy() {
        let (g, x, y) = two_inputs(Some(7), Some(7), "float32");
        let cx = Context::new(&g);
        let recipe = cx.model().unit_recipe(&[x, y]).unwrap();
        let UnitRecipe::Flat {
            source,
            needed,
            layouts,
        } = &recipe
        else {
            panic!("a flat copy");
        };
        assert_eq!((*source, *needed), (x, 32));
        assert_eq!(layouts.len(), 2);
        assert_eq!(cx.model().recipe_bytes(&recipe), Some(128));
    }

    #[test]
    fn members_not_known_to_share_one_storage_cannot_be_made_from_one_copy() {
        let why = |g: &Graph, x, y| Context::new(g).model().unit_recipe(&[x, y]).err().unwrap();
        let (g, x, y) = two_inputs(None, None, "float32");
        assert_eq!(
            why(&g, x, y),
            "its arguments that share memory cannot be made again from one copy: they have no \
             common view source, and their storage is not known to be one"
        );
        let (g, x, y) = two_inputs(Some(7), Some(8), "float32");
        assert!(why(&g, x, y).ends_with("their storage is not known to be one"));
        let (g, x, y) = two_inputs(Some(7), Some(7), "bfloat16");
        assert!(why(&g, x, y).ends_with("they differ in dtype"));
    }

    /// `rms` whose `out` and `x` are both the fresh `t` (a record says the
    /// program shared them), walked up to the call: `check` gets the
    /// context, the call, its sharing, the call's node and `t`.
    fn on_one_memory_call(
        check: impl FnOnce(&mut Context<'_>, &MutationCall, &Sharing, NodeId, NodeId),
    ) {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let nt = b.rms_on_one_memory("af", t, Some(&[&["out", "x"]]));
        let g = b.output(&[nt]);
        let af = NodeId(nt.0 - 1);
        let mut cx = Context::new(&g);
        for i in 0..af.idx() {
            cx.step(nid(i)).unwrap();
        }
        let Some(Ok(FormCall::Mutation(call))) = crate::forms::parse(&g, af).map(|(_, c)| c) else {
            panic!("a mutation call");
        };
        let sharing = cx.sharing(&call).unwrap();
        check(&mut cx, &call, &sharing, af, t);
    }

    #[test]
    fn slots_holding_one_tensor_are_one_member() {
        on_one_memory_call(|cx, call, sharing, _, t| {
            // `out` and `x` are both `t`.
            assert_eq!(cx.model().unit_members(call, sharing, 0), [t]);
        });
    }

    #[test]
    fn a_unit_every_slot_of_which_held_a_clone_is_copied_by_a_plain_clone() {
        on_one_memory_call(|cx, call, sharing, af, t| {
            let with = |fresh: &[&str]| {
                let mut c = call.clone();
                c.fresh_slots = fresh.iter().map(|s| (*s).to_string()).collect();
                c
            };
            assert!(
                !cx.facts.unit_is_a_deleted_clone(call, sharing, 0),
                "no record"
            );
            assert!(
                !cx.facts
                    .unit_is_a_deleted_clone(&with(&["out"]), sharing, 0),
                "`x` is in the unit too"
            );
            assert!(cx
                .facts
                .unit_is_a_deleted_clone(&with(&["out", "x"]), sharing, 0));
            let made = cx
                .emitter()
                .emit_unit_clone(af, &UnitRecipe::FreshClone { node: t });
            let [(m, ValueRef::New(copy))] = made[..] else {
                panic!("one new value: {made:?}");
            };
            assert_eq!(m, t);
            // The plain clone is realized where it stands: both slots of
            // the call get its one buffer (Inductor computes a lazy value
            // given in two written slots into two).
            let (edits, realized) = cx.plan.edits_and_realized();
            assert!(
                edits.contains(&crate::plan::Edit::RealizeNew { id: copy }),
                "{edits:?}"
            );
            assert_eq!(realized, 1);
        });
    }

    #[test]
    fn a_cloned_buffer_with_no_copy_is_an_internal_error_never_the_real_buffer() {
        on_one_memory_call(|cx, call, sharing, af, _| {
            let clone = vec![Some(CloneReason::OverlappingView); call.buffers.len()];
            // No recipe for the cloned unit.
            let err = cx
                .emitter()
                .emit_buffers(call, sharing, &clone, &[])
                .unwrap_err();
            assert!(
                matches!(&err, crate::Error::Internal { node: Some(n), detail }
                    if *n == af.0 && detail.contains("no recipe")),
                "{err}"
            );
        });
    }
}
