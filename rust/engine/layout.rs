//! The layout a clone must reproduce, from a node's metadata, and the
//! emission of an exact clone with it (a flat copy of the storage viewed
//! back with the layout: [`Emitter::exact_clone`]). A clone of several
//! slots that shared memory in the program is one copy made by
//! `unit_clone.rs` from these.

use crate::analysis::alias::Role;
use crate::ir::{Dim, Graph, NodeId, TargetKind};
use crate::plan::{Callee, MetaSource, NewId, PlanArg, ValueRef};

use super::{Emitter, Facts, Model};

/// Static (size, stride, storage offset) of a node, from its metadata.
pub(super) fn strided_layout(graph: &Graph, n: NodeId) -> Option<(Vec<i64>, Vec<i64>, i64)> {
    let m = graph.node(n).meta.as_ref()?;
    Some((m.shape()?, m.stride()?, m.storage_offset()?))
}

/// The layout a clone of a node must reproduce.
#[derive(Clone, Debug)]
pub(super) enum CloneLayout {
    /// Every size and stride and the storage offset are known numbers.
    Static {
        size: Vec<i64>,
        stride: Vec<i64>,
        offset: i64,
    },
    /// Some sizes or strides are symbolic: those are read at run time, the
    /// static ones are plain numbers (the releases before 2.12 cannot
    /// lower a `sym_stride` of a static dimension).
    Symbolic {
        size: Vec<Dim>,
        stride: Vec<Dim>,
        offset: i64,
    },
}

/// Why [`clone_layout`] gives no layout for a node; its `Display` is the
/// reason reports give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NoLayout {
    /// The node has no tensor metadata.
    NoMetadata,
    /// Its storage offset is symbolic (or, for [`Model::clone_source`],
    /// not its own to read): a view may still be cloned through its source.
    SymbolicOffset,
}

impl std::fmt::Display for NoLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NoLayout::NoMetadata => "the graph carries no tensor metadata for it",
            NoLayout::SymbolicOffset => SYMBOLIC_OFFSET,
        })
    }
}

/// How a clone of `n` gets its exact layout, or why it cannot.
pub(super) fn clone_layout(graph: &Graph, n: NodeId) -> std::result::Result<CloneLayout, NoLayout> {
    let Some(m) = graph.node(n).meta.as_ref() else {
        return Err(NoLayout::NoMetadata);
    };
    let (Some(strides), Some(offset)) = (&m.strides, m.storage_offset()) else {
        return Err(NoLayout::SymbolicOffset);
    };
    Ok(match (m.shape(), m.stride()) {
        (Some(size), Some(stride)) => CloneLayout::Static {
            size,
            stride,
            offset,
        },
        _ => CloneLayout::Symbolic {
            size: m.sizes.clone(),
            stride: strides.clone(),
            offset,
        },
    })
}

/// The reason [`NoLayout::SymbolicOffset`] gives, which the reasons of
/// [`Model::clone_source`] for such a view begin with.
const SYMBOLIC_OFFSET: &str = "its storage offset is symbolic";
/// A view of a node the plan replaced: its metadata describes the replaced
/// value's layout, not the memory it now views.
const STALE_VIEW: &str =
    "it views a removed write-back scatter (its metadata is the scatter's layout)";

/// View operators a clone replays on a copy of its view's source, by name.
/// Every one takes its source as argument 0 and computes the view's layout
/// from the source's layout and its other arguments alone, so replaying it on
/// an exact clone of the source gives exactly the view's size, stride and
/// storage offset.
const REPLAYABLE_VIEWS: &[&str] = &[
    "aten::alias.default",
    "aten::as_strided.default",
    "aten::chunk.default",
    "aten::detach.default",
    "aten::diagonal.default",
    "aten::expand.default",
    "aten::movedim.int",
    "aten::narrow.default",
    "aten::permute.default",
    "aten::reshape.default",
    "aten::select.int",
    "aten::slice.Tensor",
    "aten::split.Tensor",
    "aten::split_with_sizes.default",
    "aten::squeeze.default",
    "aten::squeeze.dim",
    "aten::squeeze.dims",
    "aten::t.default",
    "aten::transpose.int",
    "aten::unbind.int",
    "aten::unflatten.int",
    "aten::unfold.default",
    "aten::unsqueeze.default",
    "aten::view.default",
    "aten::view.dtype",
];

/// The `'static` name of a view operator a clone can replay.
pub(super) fn replayable_view(name: &str) -> Option<&'static str> {
    REPLAYABLE_VIEWS.iter().copied().find(|v| *v == name)
}

/// One view node applied again: its callee, and its arguments after the
/// source (argument 0, the copy being cut).
pub(super) type Replay = (Callee, Vec<PlanArg>, Vec<(String, PlanArg)>);

/// How a clone of a node is made: an exact clone of `anchor` (a node whose
/// layout [`clone_layout`] gives), then the graph's own view nodes `chain`
/// (outermost first) replayed on it. The chain is empty unless the node's
/// storage offset is symbolic: its view source's may not be.
#[derive(Clone, Debug)]
pub(super) struct CloneSource {
    pub(super) anchor: NodeId,
    pub(super) layout: CloneLayout,
    pub(super) chain: Vec<Replay>,
}

impl Emitter<'_, '_> {
    /// Emits a copy of `base` (the value of `node`) with exactly its size,
    /// stride and storage offset, as torch's `clone_preserve_strides` does:
    /// the storage is copied as a flat 1-d buffer and viewed back with the
    /// original layout. A plain `clone` is not enough: Inductor picks the
    /// clone's strides itself (any stride for a size-1 dimension), and real
    /// kernels read raw strides. Symbolic sizes and strides are read at run
    /// time with `sym_size` / `sym_stride`; a symbolic storage offset is
    /// reached by copying a view source of `node` and applying the view
    /// nodes again: `source` is [`Model::clone_source`] of `node`, which
    /// the unit's recipe holds (no clone is emitted without one).
    pub(super) fn exact_clone(
        &mut self,
        af: NodeId,
        base: ValueRef,
        source: &CloneSource,
    ) -> NewId {
        let CloneSource {
            anchor,
            layout,
            chain,
        } = source.clone();
        let base = if chain.is_empty() {
            base
        } else {
            self.plan.resolve(anchor)
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
            CloneLayout::Symbolic {
                size,
                stride,
                offset,
            } => self.symbolic_layout(af, base, &size, &stride, offset),
        };
        let copy = self.plan.flat_copy(af, base, needed);
        let mut out = self.plan.insert(
            af,
            Callee::Aten("aten::as_strided.default"),
            vec![PlanArg::Ref(ValueRef::New(copy)), size, stride, offset],
            vec![],
            MetaSource::Compute,
        );
        for (callee, rest, kwargs) in chain {
            let mut args = vec![PlanArg::Ref(ValueRef::New(out))];
            args.extend(rest);
            out = self
                .plan
                .insert(af, callee, args, kwargs, MetaSource::Compute);
        }
        out
    }

    /// Sizes, strides, storage offset and required storage length of `base`
    /// as run-time values: a number for each static dimension, `sym_size` /
    /// `sym_stride` for each symbolic one, and the
    /// `offset + 1 + sum((size - 1) * stride)` of
    /// `torch._prims_common.compute_required_storage_length`, with its
    /// static terms summed here. Symbolic dimensions are at least 2 under
    /// Inductor's shape environment, so the zero-size case of that function
    /// arises only for a static size 0.
    pub(super) fn symbolic_layout(
        &mut self,
        af: NodeId,
        base: ValueRef,
        size: &[Dim],
        stride: &[Dim],
        offset: i64,
    ) -> (PlanArg, PlanArg, PlanArg, PlanArg) {
        let mut sizes = Vec::new();
        let mut strides = Vec::new();
        let mut known = offset + 1;
        let mut needed: Option<PlanArg> = None;
        let mut empty = false;
        for (d, (sz, st)) in (0_i64..).zip(size.iter().zip(stride)) {
            let query = |cx: &mut Self, dim: &Dim, op: &'static str| match dim {
                Dim::Static(v) => PlanArg::Int(*v),
                Dim::Symbolic(_) => PlanArg::Ref(ValueRef::New(cx.plan.insert(
                    af,
                    Callee::Aten(op),
                    vec![PlanArg::Ref(base), PlanArg::Int(d)],
                    vec![],
                    MetaSource::Compute,
                ))),
            };
            let size_arg = query(self, sz, "aten::sym_size.int");
            let stride_arg = query(self, st, "aten::sym_stride.int");
            match (sz.as_static(), st.as_static()) {
                (Some(0), _) => empty = true,
                // A size-1 dimension or a stride-0 one adds nothing.
                (Some(1), _) | (_, Some(0)) => {}
                (Some(s), Some(t)) => known += (s - 1) * t,
                _ => {
                    let last = self.arith(af, "sub", size_arg.clone(), PlanArg::Int(1));
                    let extent = self.arith(af, "mul", last, stride_arg.clone());
                    needed = Some(match needed {
                        None => extent,
                        Some(sum) => self.arith(af, "add", sum, extent),
                    });
                }
            }
            sizes.push(size_arg);
            strides.push(stride_arg);
        }
        let needed = match (empty, needed) {
            (true, _) => PlanArg::Int(0),
            (false, None) => PlanArg::Int(known),
            (false, Some(sum)) => self.arith(af, "add", sum, PlanArg::Int(known)),
        };
        (
            PlanArg::List(sizes),
            PlanArg::List(strides),
            PlanArg::Int(offset),
            needed,
        )
    }

    /// `a op b` on run-time integers (`operator.add` and its kin).
    fn arith(&mut self, af: NodeId, op: &'static str, a: PlanArg, b: PlanArg) -> PlanArg {
        PlanArg::Ref(ValueRef::New(self.plan.insert(
            af,
            Callee::Operator(op),
            vec![a, b],
            vec![],
            MetaSource::Compute,
        )))
    }
}

impl Model<'_, '_> {
    /// How to clone `n` with its exact layout, or why it cannot be. A view
    /// whose storage offset is symbolic is cloned through the nearest view
    /// source whose offset is static: that source's memory is copied with
    /// its exact layout and the view nodes from it to `n` are applied again
    /// to the copy, which gives the copy exactly `n`'s size, stride and
    /// storage offset, as torch computes them (no offset arithmetic here;
    /// Inductor also miscomputes an `as_strided` fed by
    /// `sym_storage_offset`). The copy holds `n`'s current contents: a view
    /// shares its source's memory.
    pub(super) fn clone_source(&self, n: NodeId) -> std::result::Result<CloneSource, String> {
        let mut chain = Vec::new();
        // Why the node's own layout was not used, for the reason when the
        // walk up its view sources fails too.
        let mut why_up = SYMBOLIC_OFFSET;
        let mut cur = n;
        loop {
            // A node holding a list (`split`) has no layout of its own: the
            // copy is cut from its source, and it is applied again.
            // A view of a removed write-back scatter (or of a result the
            // plan replaced by its buffer) has metadata computed from the
            // replaced value's layout, not from the memory it now views:
            // it is cut again from its source, whose layout is known.
            let stand_in = self.views_a_stand_in(cur);
            if chain.is_empty() && stand_in {
                why_up = STALE_VIEW;
            }
            let layout = if self.facts.holds_a_list(cur) || stand_in {
                Err(NoLayout::SymbolicOffset)
            } else {
                clone_layout(self.facts.graph, self.layout_source(cur))
            };
            match layout {
                Ok(layout) => {
                    chain.reverse();
                    return Ok(CloneSource {
                        anchor: cur,
                        layout,
                        chain,
                    });
                }
                Err(NoLayout::SymbolicOffset) => {}
                Err(why) if chain.is_empty() => return Err(why.to_string()),
                Err(why) => {
                    return Err(format!(
                        "{why_up} and its view source `{}` cannot be cloned: {why}",
                        self.facts.graph.node(cur).name
                    ))
                }
            }
            let Role::View { src, .. } = self.facts.roles[cur.idx()] else {
                return Err(if chain.is_empty() {
                    format!("{why_up} and it is not a view")
                } else {
                    format!(
                        "{why_up} and so is that of `{}`, not a view",
                        self.facts.graph.node(cur).name
                    )
                });
            };
            match self.replay_args(cur, src) {
                Ok(replay) => chain.push(replay),
                Err(why) => {
                    return Err(format!(
                        "{why_up} and its view `{}` cannot be applied again to a copy: {why}",
                        self.facts.graph.node(cur).name
                    ))
                }
            }
            cur = src;
        }
    }

    /// True when a node up `n`'s chain of view sources was replaced by an
    /// original node standing for its memory (`stood_for`): `n`'s own
    /// metadata then describes a layout the rewritten program does not have.
    fn views_a_stand_in(&self, n: NodeId) -> bool {
        let mut cur = n;
        while let Role::View { src, .. } = &self.facts.roles[cur.idx()] {
            if self.plan.stood_for(*src).is_some() {
                return true;
            }
            cur = *src;
        }
        false
    }

    /// The callee and arguments that apply view node `v` (a view of `src`,
    /// its first argument) again, to another source.
    pub(super) fn replay_args(
        &self,
        v: NodeId,
        src: NodeId,
    ) -> std::result::Result<Replay, String> {
        let node = self.facts.graph.node(v);
        if node.args.first() != Some(&crate::ir::Value::Node(src)) {
            return Err("its source is not its first argument".into());
        }
        let target = self.facts.graph.target_of(v);
        let callee = if target.kind == TargetKind::Getitem {
            Callee::Getitem
        } else {
            match replayable_view(&target.name) {
                Some(name) => Callee::Aten(name),
                None => return Err(format!("`{}` is not a view it replays", target.name)),
            }
        };
        // Constants with no plan argument of their own (a dtype) are read
        // off the view node itself.
        let args = node.args[1..]
            .iter()
            .enumerate()
            .map(|(i, a)| {
                self.plan_arg(a).unwrap_or(PlanArg::FromArg {
                    node: v,
                    index: i + 1,
                })
            })
            .collect();
        let kwargs = node
            .kwargs
            .iter()
            .map(|(k, _)| {
                (
                    k.clone(),
                    PlanArg::FromKwarg {
                        node: v,
                        key: k.clone(),
                    },
                )
            })
            .collect();
        Ok((callee, args, kwargs))
    }

    /// An argument of an original node as a plan argument: integers, None,
    /// nodes (SymInts) and lists of them.
    pub(super) fn plan_arg(&self, a: &crate::ir::Value) -> Option<PlanArg> {
        use crate::ir::Value;
        Some(match a {
            Value::Int(i) => PlanArg::Int(*i),
            Value::None => PlanArg::None,
            Value::Node(m) => PlanArg::Ref(self.plan.resolve(*m)),
            Value::List(items) | Value::Tuple(items) => PlanArg::List(
                items
                    .iter()
                    .map(|i| self.plan_arg(i))
                    .collect::<Option<Vec<_>>>()?,
            ),
            _ => return None,
        })
    }
}

/// Elements a strided tensor needs from its storage, as
/// `torch._prims_common.compute_required_storage_length`.
pub(super) fn required_storage(size: &[i64], stride: &[i64], offset: i64) -> i64 {
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

impl Facts<'_> {
    /// True for a node whose value is a list of tensors (its operator
    /// returns `Tensor[]`, as `split` does).
    fn holds_a_list(&self, n: NodeId) -> bool {
        let node = self.graph.node(n);
        node.op == crate::ir::OpCode::CallFunction
            && self
                .graph
                .target_of(n)
                .schema
                .as_ref()
                .is_some_and(crate::ir::OpSchema::returns_list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_storage_matches_torch() {
        // [T=5, 1, 64] cut at column 16 of a [5, 80] buffer: the size-1
        // dimension's stride does not matter, the offset does.
        assert_eq!(
            required_storage(&[5, 1, 64], &[80, 64, 1], 16),
            16 + 4 * 80 + 63 + 1
        );
        assert_eq!(
            required_storage(&[5, 1, 64], &[80, 12345, 1], 16),
            16 + 4 * 80 + 63 + 1
        );
        // Empty tensors need no storage, whatever their offset.
        assert_eq!(required_storage(&[0, 8], &[8, 1], 40), 0);
        // A scalar needs one element past its offset.
        assert_eq!(required_storage(&[], &[], 3), 4);
        // Transposed: the extent is the same.
        assert_eq!(required_storage(&[8, 4], &[1, 8], 0), 32);
    }
}
