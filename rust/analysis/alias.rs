//! What each node *is*, as far as memory is concerned: a fresh buffer, a view
//! of another node (with its geometry), an auto_functionalized call or one of
//! its results, a scatter back into a base, a graph-input write-back, another
//! mutation, or something opaque that may alias its operands.
//!
//! Everything here comes from schema alias annotations and the structure of
//! the graph. Tensor metadata only sharpens geometry (normalising negative
//! dims and clamping slice ends); without it the engine proves less, never
//! something wrong.

use crate::ir::{Graph, NodeId, OpCode, OpSchema, TargetKind, Value};

/// One primitive step from a tensor to a view of it, in canonical form.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ViewStep {
    /// `slice(dim, start, end, step)` with non-negative dim/start and an end
    /// that is `i64::MAX` only when the size is unknown.
    Slice {
        /// Dimension.
        dim: i64,
        /// First index.
        start: i64,
        /// One past the last index.
        end: i64,
        /// Stride in elements.
        step: i64,
    },
    /// `select(dim, index)` with non-negative dim and index.
    Select {
        /// Dimension.
        dim: i64,
        /// Index.
        index: i64,
    },
    /// `as_strided(size, stride, storage_offset)`: absolute on the storage.
    AsStrided {
        /// Sizes.
        size: Vec<i64>,
        /// Strides.
        stride: Vec<i64>,
        /// Storage offset.
        offset: i64,
    },
    /// `view` / `reshape` to `shape`, proven a view (the result shares its
    /// source's storage in the traced program). Views of one memory reshaped
    /// to one shape address the same elements: reshape follows row-major
    /// element order.
    Reshape {
        /// The new sizes.
        shape: Vec<Dim>,
    },
    /// `unsqueeze(dim)`, dim normalised.
    Unsqueeze {
        /// The new size-1 dimension.
        dim: i64,
    },
    /// `squeeze(dim)` of a size-1 dimension, dim normalised.
    Squeeze {
        /// The dimension removed.
        dim: i64,
    },
    /// A view the engine does not model; equal only to itself.
    Opaque(NodeId),
}

/// One size in a [`ViewStep::Reshape`]: a number, or the SymInt a node holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A static size.
    Int(i64),
    /// A symbolic size: the value of this node.
    Sym(NodeId),
}

/// How a node's value relates to the memory of other nodes.
#[derive(Clone, Debug, PartialEq)]
pub enum Role {
    /// A graph input or module attribute: memory the caller owns.
    Input,
    /// A fresh tensor (or a non-tensor value).
    Fresh,
    /// A view of `src`: same memory, geometry `src` + `step` (`None` = same
    /// geometry, as for `alias`).
    View {
        /// The viewed node.
        src: NodeId,
        /// The step, or `None` for an identity view.
        step: Option<ViewStep>,
        /// True when the view may map two indices to one element (expand,
        /// zero strides): never written in place.
        overlapping: bool,
    },
    /// An `auto_functionalized` (v1) or `auto_functionalized_v2` node.
    AutoFunctionalized,
    /// `getitem(af, index)` of an auto_functionalized node.
    AfResult {
        /// The auto_functionalized node.
        af: NodeId,
        /// The tuple index.
        index: usize,
    },
    /// `getitem(getitem(af, index), item)`: one tensor of a written list.
    AfListItem {
        /// The outer getitem node.
        list: NodeId,
        /// The list index.
        item: usize,
    },
    /// `*_scatter(base, src, ...)`: a copy of `base` with `src` written into
    /// the view `step` of it.
    Scatter {
        /// The base operand.
        base: NodeId,
        /// The written source operand.
        src: NodeId,
        /// The view of `base` that `src` lands in.
        step: ViewStep,
    },
    /// `aten.copy_(input, src)`: the write-back epilogue of a mutated input.
    InputWriteBack {
        /// The graph input written.
        dst: NodeId,
        /// The new value.
        src: NodeId,
    },
    /// Any other operator that writes its arguments.
    OtherMutation {
        /// The nodes it writes.
        written: Vec<NodeId>,
    },
    /// An operator that reads only metadata (`sym_size`, ...).
    MetaOnly,
    /// Something the engine cannot see into: its value may alias any operand.
    Opaque,
    /// The output node.
    Output,
}

fn is_meta_only(name: &str) -> bool {
    matches!(
        name,
        "aten::sym_size.int"
            | "aten::sym_stride.int"
            | "aten::sym_numel.default"
            | "aten::sym_storage_offset.default"
    )
}

/// Operators whose schema claims a fresh result but whose Inductor lowering
/// returns a view of the input.
fn hides_alias(name: &str) -> bool {
    matches!(
        name,
        "aten::_unsafe_view.default" | "prims::view_of.default" | "aten::_reshape_alias.default"
    )
}

fn meta_rank(graph: &Graph, n: NodeId) -> Option<i64> {
    graph.node(n).meta.as_ref().map(|m| i64::from(m.rank))
}

fn meta_size(graph: &Graph, n: NodeId, dim: i64) -> Option<i64> {
    let shape = graph.node(n).meta.as_ref()?.shape.as_ref()?;
    shape.get(usize::try_from(dim).ok()?).copied()
}

fn norm_dim(graph: &Graph, src: NodeId, dim: i64) -> Option<i64> {
    if dim >= 0 {
        return Some(dim);
    }
    let r = meta_rank(graph, src)?;
    (dim + r >= 0).then_some(dim + r)
}

/// Canonical slice step, or `None` when it is the identity. Falls back to an
/// opaque step when a negative index cannot be resolved without sizes.
fn slice_step(
    graph: &Graph,
    node: NodeId,
    src: NodeId,
    dim: i64,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
) -> Option<ViewStep> {
    let opaque = Some(ViewStep::Opaque(node));
    let Some(dim) = norm_dim(graph, src, dim) else {
        return opaque;
    };
    let size = meta_size(graph, src, dim);
    let resolve = |v: i64| -> Option<i64> {
        if v >= 0 {
            Some(size.map_or(v, |s| v.min(s)))
        } else {
            size.map(|s| (v + s).max(0))
        }
    };
    let Some(start) = resolve(start.unwrap_or(0)) else {
        return opaque;
    };
    let Some(end) = resolve(end.unwrap_or(i64::MAX)) else {
        return opaque;
    };
    let identity = start == 0 && step == 1 && size.map_or(end == i64::MAX, |s| end >= s);
    if identity {
        return None;
    }
    Some(ViewStep::Slice {
        dim,
        start,
        end,
        step,
    })
}

fn select_step(graph: &Graph, node: NodeId, src: NodeId, dim: i64, index: i64) -> ViewStep {
    let Some(dim) = norm_dim(graph, src, dim) else {
        return ViewStep::Opaque(node);
    };
    if index >= 0 {
        return ViewStep::Select { dim, index };
    }
    match meta_size(graph, src, dim) {
        Some(s) if index + s >= 0 => ViewStep::Select {
            dim,
            index: index + s,
        },
        _ => ViewStep::Opaque(node),
    }
}

fn arg(node: &crate::ir::Node, schema: &OpSchema, i: usize) -> Option<Value> {
    if let Some(v) = node.args.get(i) {
        return Some(v.clone());
    }
    let name = &schema.args.get(i)?.name;
    node.kwarg(name).cloned()
}

fn opt_int(v: Option<Value>) -> Option<Option<i64>> {
    match v {
        None | Some(Value::None) => Some(None),
        Some(Value::Int(i)) => Some(Some(i)),
        _ => None,
    }
}

/// The step of a view operator applied by `node` to `src`, from its name and
/// arguments. `Ok(None)` is an identity view.
fn view_step(
    graph: &Graph,
    node_id: NodeId,
    src: NodeId,
    name: &str,
    schema: &OpSchema,
) -> (Option<ViewStep>, bool) {
    let node = graph.node(node_id);
    let opaque = (Some(ViewStep::Opaque(node_id)), false);
    match name {
        "aten::alias.default" | "aten::detach.default" | "aten::lift_fresh.default" => {
            (None, false)
        }
        "aten::slice.Tensor" => {
            let dim = opt_int(arg(node, schema, 1)).flatten().unwrap_or(0);
            let (Some(start), Some(end)) =
                (opt_int(arg(node, schema, 2)), opt_int(arg(node, schema, 3)))
            else {
                return opaque;
            };
            let step = opt_int(arg(node, schema, 4)).flatten().unwrap_or(1);
            if step < 1 {
                return opaque;
            }
            (
                slice_step(graph, node_id, src, dim, start, end, step),
                false,
            )
        }
        "aten::select.int" => {
            let (Some(Some(dim)), Some(Some(index))) =
                (opt_int(arg(node, schema, 1)), opt_int(arg(node, schema, 2)))
            else {
                return opaque;
            };
            (Some(select_step(graph, node_id, src, dim, index)), false)
        }
        "aten::as_strided.default" => {
            let size = arg(node, schema, 1).and_then(|v| v.as_int_list());
            let stride = arg(node, schema, 2).and_then(|v| v.as_int_list());
            let offset = opt_int(arg(node, schema, 3)).flatten();
            match (size, stride, offset) {
                (Some(size), Some(stride), Some(offset)) => {
                    let overlapping = size.iter().zip(&stride).any(|(&s, &st)| st == 0 && s > 1);
                    (
                        Some(ViewStep::AsStrided {
                            size,
                            stride,
                            offset,
                        }),
                        overlapping,
                    )
                }
                _ => opaque,
            }
        }
        "aten::view.default" | "aten::reshape.default" | "aten::_unsafe_view.default" => {
            let same_shape = match (
                arg(node, schema, 1).and_then(|v| v.as_int_list()),
                graph.node(src).meta.as_ref(),
            ) {
                (Some(shape), Some(m)) => m.shape.as_ref() == Some(&shape),
                _ => false,
            };
            if same_shape {
                (None, false)
            } else {
                match reshape_step(graph, node_id, src, arg(node, schema, 1)) {
                    Some(step) => (Some(step), false),
                    None => opaque,
                }
            }
        }
        "aten::unsqueeze.default" => {
            let Some(Some(dim)) = opt_int(arg(node, schema, 1)) else {
                return opaque;
            };
            let dim = if dim >= 0 {
                Some(dim)
            } else {
                meta_rank(graph, src)
                    .map(|r| dim + r + 1)
                    .filter(|d| *d >= 0)
            };
            match dim {
                Some(dim) => (Some(ViewStep::Unsqueeze { dim }), false),
                None => opaque,
            }
        }
        "aten::squeeze.dim" => {
            let Some(Some(dim)) = opt_int(arg(node, schema, 1)) else {
                return opaque;
            };
            match norm_dim(graph, src, dim) {
                // Squeezing a dimension that is not of size 1 is the identity.
                Some(d) if meta_size(graph, src, d).is_some_and(|s| s != 1) => (None, false),
                // Of size 1, or unknown: either way the same step on the same
                // memory gives the same elements, and after `unsqueeze(d)` the
                // size is 1 (see `Geometry::then`).
                Some(d) => (Some(ViewStep::Squeeze { dim: d }), false),
                None => opaque,
            }
        }
        "aten::expand.default"
        | "aten::expand_as.default"
        | "aten::broadcast_to.default"
        | "aten::unfold.default" => (Some(ViewStep::Opaque(node_id)), true),
        _ => opaque,
    }
}

/// The step of `reshape(src, shape)`, when the traced program proves it a
/// view: the result shares `src`'s storage. A reshape that had to copy gets
/// no step (it is then opaque, never a modelled view).
fn reshape_step(
    graph: &Graph,
    node: NodeId,
    src: NodeId,
    shape: Option<Value>,
) -> Option<ViewStep> {
    let storage = |n: NodeId| graph.node(n).meta.as_ref().and_then(|m| m.storage);
    if storage(node)? != storage(src)? {
        return None;
    }
    let dims = match shape? {
        Value::List(items) | Value::Tuple(items) => items
            .iter()
            .map(|v| match v {
                Value::Int(i) if *i >= 0 => Some(Dim::Int(*i)),
                Value::Node(n) => Some(Dim::Sym(*n)),
                _ => None,
            })
            .collect::<Option<Vec<Dim>>>()?,
        _ => return None,
    };
    Some(ViewStep::Reshape { shape: dims })
}

/// The step selecting item `item` of a list-returning view (`split`,
/// `split_with_sizes`, `unbind`, `chunk`) applied by `list_node`.
fn list_item_step(
    graph: &Graph,
    getitem: NodeId,
    list_node: NodeId,
    item: usize,
    name: &str,
    schema: &OpSchema,
) -> Option<ViewStep> {
    let node = graph.node(list_node);
    let src = arg(node, schema, 0)?.as_node()?;
    let opaque = Some(ViewStep::Opaque(getitem));
    let item = i64::try_from(item).ok()?;
    match name {
        "aten::split_with_sizes.default" => {
            let Some(sizes) = arg(node, schema, 1).and_then(|v| v.as_int_list()) else {
                return opaque;
            };
            let dim = opt_int(arg(node, schema, 2)).flatten().unwrap_or(0);
            let idx = usize::try_from(item).ok()?;
            if idx >= sizes.len() {
                return opaque;
            }
            let start: i64 = sizes[..idx].iter().sum();
            slice_step(
                graph,
                getitem,
                src,
                dim,
                Some(start),
                Some(start + sizes[idx]),
                1,
            )
        }
        "aten::split.Tensor" => {
            let Some(Some(size)) = opt_int(arg(node, schema, 1)) else {
                return opaque;
            };
            let dim = opt_int(arg(node, schema, 2)).flatten().unwrap_or(0);
            slice_step(
                graph,
                getitem,
                src,
                dim,
                Some(item * size),
                Some((item + 1) * size),
                1,
            )
        }
        "aten::unbind.int" => {
            let dim = opt_int(arg(node, schema, 1)).flatten().unwrap_or(0);
            Some(select_step(graph, getitem, src, dim, item))
        }
        _ => opaque,
    }
}

fn scatter_role(graph: &Graph, node_id: NodeId, name: &str, schema: &OpSchema) -> Option<Role> {
    let node = graph.node(node_id);
    let base = arg(node, schema, 0)?.as_node()?;
    let src = arg(node, schema, 1)?.as_node()?;
    let step = match name {
        "aten::slice_scatter.default" => {
            let dim = opt_int(arg(node, schema, 2))?.unwrap_or(0);
            let start = opt_int(arg(node, schema, 3))?;
            let end = opt_int(arg(node, schema, 4))?;
            let step = opt_int(arg(node, schema, 5))?.unwrap_or(1);
            if step < 1 {
                return None;
            }
            slice_step(graph, node_id, base, dim, start, end, step)?
        }
        "aten::select_scatter.default" => {
            let dim = opt_int(arg(node, schema, 2))??;
            let index = opt_int(arg(node, schema, 3))??;
            select_step(graph, node_id, base, dim, index)
        }
        "aten::as_strided_scatter.default" => ViewStep::AsStrided {
            size: arg(node, schema, 2)?.as_int_list()?,
            stride: arg(node, schema, 3)?.as_int_list()?,
            offset: opt_int(arg(node, schema, 4))??,
        },
        _ => return None,
    };
    if matches!(step, ViewStep::Opaque(_)) {
        return None;
    }
    Some(Role::Scatter { base, src, step })
}

/// Classifies every node of `graph`. The result is indexed by node id.
#[must_use]
pub fn classify(graph: &Graph) -> Vec<Role> {
    let mut roles: Vec<Role> = Vec::with_capacity(graph.len());
    for (i, node) in graph.nodes.iter().enumerate() {
        let id = NodeId(u32::try_from(i).unwrap_or(u32::MAX));
        let role = classify_one(graph, &roles, id, node);
        roles.push(role);
    }
    roles
}

fn classify_one(graph: &Graph, roles: &[Role], id: NodeId, node: &crate::ir::Node) -> Role {
    let target = graph.target_of(id);
    match node.op {
        OpCode::Placeholder | OpCode::GetAttr => return Role::Input,
        OpCode::Output => return Role::Output,
        OpCode::CallMethod | OpCode::CallModule => return Role::Opaque,
        OpCode::CallFunction => {}
    }
    match target.kind {
        TargetKind::AutoFunctionalized | TargetKind::AutoFunctionalizedV2 => {
            Role::AutoFunctionalized
        }
        TargetKind::Getitem => classify_getitem(graph, roles, id, node),
        TargetKind::HigherOrder | TargetKind::Other => Role::Opaque,
        TargetKind::Operator => {
            let Some(schema) = target.schema.as_ref() else {
                return Role::Opaque;
            };
            let name = target.name.as_str();
            if is_meta_only(name) {
                return Role::MetaOnly;
            }
            if let Some(role) = scatter_role(graph, id, name, schema) {
                return role;
            }
            if schema.is_mutable() {
                if name == "aten::copy_.default" {
                    if let (Some(dst), Some(src)) = (
                        arg(node, schema, 0).and_then(|v| v.as_node()),
                        arg(node, schema, 1).and_then(|v| v.as_node()),
                    ) {
                        if graph.node(dst).op == OpCode::Placeholder
                            || graph.node(dst).op == OpCode::GetAttr
                        {
                            return Role::InputWriteBack { dst, src };
                        }
                    }
                }
                let mut written = Vec::new();
                for (ai, _) in schema.written_args() {
                    if let Some(v) = arg(node, schema, ai) {
                        v.for_each_node(&mut |n| written.push(n));
                    }
                }
                return Role::OtherMutation { written };
            }
            let src_index = schema
                .view_source()
                .or_else(|| hides_alias(name).then_some(0));
            if let Some(si) = src_index {
                let Some(src) = arg(node, schema, si).and_then(|v| v.as_node()) else {
                    return Role::Opaque;
                };
                if schema.returns.len() == 1
                    && schema.returns[0].ty == crate::ir::ArgType::TensorList
                {
                    // A list of views: it forwards its source's memory (so its
                    // readers and its getitems' readers are found through it)
                    // with the source's geometry; each getitem adds its step.
                    return Role::View {
                        src,
                        step: None,
                        overlapping: false,
                    };
                }
                let (step, overlapping) = view_step(graph, id, src, name, schema);
                return Role::View {
                    src,
                    step,
                    overlapping,
                };
            }
            if schema.returns.iter().any(|r| r.alias.is_some()) {
                return Role::Opaque;
            }
            Role::Fresh
        }
    }
}

fn classify_getitem(graph: &Graph, roles: &[Role], id: NodeId, node: &crate::ir::Node) -> Role {
    let (Some(src), Some(index)) = (
        node.args.first().and_then(Value::as_node),
        node.args.get(1).and_then(Value::as_int),
    ) else {
        return Role::Opaque;
    };
    let Ok(index) = usize::try_from(index) else {
        return Role::Opaque;
    };
    match &roles[src.idx()] {
        Role::AutoFunctionalized => return Role::AfResult { af: src, index },
        Role::AfResult { .. } => {
            return Role::AfListItem {
                list: src,
                item: index,
            }
        }
        Role::Opaque => return Role::Opaque,
        _ => {}
    }
    let src_target = graph.target_of(src);
    if src_target.kind != TargetKind::Operator {
        return Role::Opaque;
    }
    let Some(schema) = src_target.schema.as_ref() else {
        return Role::Opaque;
    };
    let ret = if schema.returns.len() == 1 {
        schema.returns.first()
    } else {
        schema.returns.get(index)
    };
    match ret.and_then(|r| r.alias.as_ref()) {
        None => Role::Fresh,
        Some(a) if a.is_write => Role::Opaque,
        Some(_) => {
            if schema.returns.len() == 1 && schema.returns[0].ty == crate::ir::ArgType::TensorList {
                if arg(graph.node(src), schema, 0)
                    .and_then(|v| v.as_node())
                    .is_none()
                {
                    return Role::Opaque;
                }
                // A view of the list node, which carries its source's geometry:
                // the step is relative to that source.
                let step = list_item_step(graph, id, src, index, &src_target.name, schema);
                Role::View {
                    src,
                    step,
                    overlapping: false,
                }
            } else {
                Role::Opaque
            }
        }
    }
}

/// The canonical geometry of a node: the node at the top of its view chain
/// and the steps from there, with identity steps dropped and absolute
/// `as_strided` steps cutting the chain.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Geometry {
    /// The node whose memory this is a view of (itself for a non-view).
    pub root: NodeId,
    /// Steps from `root`, outermost first.
    pub steps: Vec<ViewStep>,
}

impl Geometry {
    /// This geometry followed by one more step.
    #[must_use]
    pub fn then(&self, step: &ViewStep) -> Geometry {
        let mut g = self.clone();
        match (g.steps.last(), step) {
            (_, ViewStep::AsStrided { .. }) => g.steps.clear(),
            // Squeezing the dimension just added gives the view back.
            (Some(ViewStep::Unsqueeze { dim: a }), ViewStep::Squeeze { dim: b }) if a == b => {
                g.steps.pop();
                return g;
            }
            // Both are views of one memory in row-major order: the last
            // shape alone defines the elements.
            (Some(ViewStep::Reshape { .. }), ViewStep::Reshape { .. }) => {
                g.steps.pop();
            }
            _ => {}
        }
        g.steps.push(step.clone());
        g
    }

    /// True when the view provably has no element: a step leaves a size 0
    /// (an empty slice range, an `as_strided` or reshape to a size 0), and
    /// every step after it keeps the element count at 0 (slices, selects,
    /// reshapes, `unsqueeze`/`squeeze` do; an opaque view might be an
    /// `as_strided` that reaches elements again).
    #[must_use]
    pub fn provably_empty(&self) -> bool {
        let mut empty = false;
        for s in &self.steps {
            match s {
                ViewStep::Slice { start, end, .. } if end <= start => empty = true,
                ViewStep::Reshape { shape } if shape.contains(&Dim::Int(0)) => empty = true,
                ViewStep::AsStrided { size, .. } => empty = size.contains(&0),
                ViewStep::Opaque(_) => empty = false,
                ViewStep::Slice { .. }
                | ViewStep::Select { .. }
                | ViewStep::Reshape { .. }
                | ViewStep::Unsqueeze { .. }
                | ViewStep::Squeeze { .. } => {}
            }
        }
        empty
    }

    /// True when the two views provably touch disjoint elements: one of them
    /// has no element, or after a common prefix of steps, the next steps
    /// select disjoint ranges of one dimension (whatever follows them).
    #[must_use]
    pub fn provably_disjoint(&self, other: &Geometry) -> bool {
        if self.provably_empty() || other.provably_empty() {
            return true;
        }
        if self.root != other.root {
            return false;
        }
        let k = self
            .steps
            .iter()
            .zip(&other.steps)
            .take_while(|(x, y)| x == y)
            .count();
        match (self.steps.get(k), other.steps.get(k)) {
            (Some(_), Some(y)) => {
                let mine = Geometry {
                    root: self.root,
                    steps: self.steps[..=k].to_vec(),
                };
                let theirs = Geometry {
                    root: other.root,
                    steps: [&self.steps[..k], std::slice::from_ref(y)].concat(),
                };
                mine.disjoint_from(&theirs)
            }
            _ => false,
        }
    }

    /// True when the two views provably touch disjoint elements: one of them
    /// has no element, or the same chain up to a last step that selects
    /// disjoint ranges of one dimension.
    #[must_use]
    pub fn disjoint_from(&self, other: &Geometry) -> bool {
        if self.provably_empty() || other.provably_empty() {
            return true;
        }
        if self.root != other.root || self.steps.len() != other.steps.len() || self.steps.is_empty()
        {
            return false;
        }
        let n = self.steps.len() - 1;
        if self.steps[..n] != other.steps[..n] {
            return false;
        }
        let range = |s: &ViewStep| match s {
            ViewStep::Slice {
                dim,
                start,
                end,
                step: 1,
            } => Some((*dim, *start, *end)),
            ViewStep::Select { dim, index } => Some((*dim, *index, index + 1)),
            _ => None,
        };
        match (range(&self.steps[n]), range(&other.steps[n])) {
            (Some((d1, s1, e1)), Some((d2, s2, e2))) => d1 == d2 && (e1 <= s2 || e2 <= s1),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(root: u32, steps: Vec<ViewStep>) -> Geometry {
        Geometry {
            root: NodeId(root),
            steps,
        }
    }

    #[test]
    fn disjoint_slices_and_selects() {
        let a = g(
            0,
            vec![ViewStep::Slice {
                dim: 1,
                start: 0,
                end: 4,
                step: 1,
            }],
        );
        let b = g(
            0,
            vec![ViewStep::Slice {
                dim: 1,
                start: 4,
                end: 8,
                step: 1,
            }],
        );
        let c = g(
            0,
            vec![ViewStep::Slice {
                dim: 1,
                start: 3,
                end: 8,
                step: 1,
            }],
        );
        assert!(a.disjoint_from(&b));
        assert!(!a.disjoint_from(&c));
        let s0 = g(0, vec![ViewStep::Select { dim: 0, index: 0 }]);
        let s1 = g(0, vec![ViewStep::Select { dim: 0, index: 1 }]);
        assert!(s0.disjoint_from(&s1));
        assert!(!s0.disjoint_from(&s0));
        assert!(!a.disjoint_from(&g(1, b.steps.clone())));
    }

    #[test]
    fn squeeze_undoes_unsqueeze_and_reshapes_collapse() {
        let slice = ViewStep::Slice {
            dim: 1,
            start: 16,
            end: 24,
            step: 1,
        };
        let base = g(0, vec![slice.clone()]);
        let round_trip = base
            .then(&ViewStep::Unsqueeze { dim: 1 })
            .then(&ViewStep::Squeeze { dim: 1 });
        assert_eq!(round_trip, base);
        // Another dimension is another view.
        let other = base
            .then(&ViewStep::Unsqueeze { dim: 1 })
            .then(&ViewStep::Squeeze { dim: 0 });
        assert_ne!(other, base);
        let shape = |v: &[i64]| ViewStep::Reshape {
            shape: v.iter().map(|&d| Dim::Int(d)).collect(),
        };
        let twice = g(0, vec![])
            .then(&shape(&[5, 2, 24]))
            .then(&shape(&[10, 24]));
        assert_eq!(twice, g(0, vec![shape(&[10, 24])]));
        // A reshape after a slice is not merged with one before it.
        let sliced = g(0, vec![])
            .then(&shape(&[5, 2, 24]))
            .then(&slice)
            .then(&shape(&[80]));
        assert_eq!(sliced.steps.len(), 3);
    }

    #[test]
    fn empty_views_touch_nothing() {
        let slice = |start, end| ViewStep::Slice {
            dim: 0,
            start,
            end,
            step: 1,
        };
        let empty = g(0, vec![slice(2, 2)]);
        let whole = g(0, vec![]);
        let other_root = g(1, vec![slice(0, 4)]);
        assert!(empty.provably_empty());
        assert!(g(0, vec![slice(3, 1)]).provably_empty());
        assert!(!g(0, vec![slice(1, 3)]).provably_empty());
        assert!(!whole.provably_empty());
        // Emptiness survives later views, not an as_strided or opaque one.
        assert!(empty
            .then(&ViewStep::Select { dim: 1, index: 0 })
            .then(&ViewStep::Unsqueeze { dim: 0 })
            .provably_empty());
        assert!(!empty.then(&ViewStep::Opaque(NodeId(7))).provably_empty());
        let strided = |size: Vec<i64>| ViewStep::AsStrided {
            size,
            stride: vec![8, 1],
            offset: 16,
        };
        assert!(!empty.then(&strided(vec![2, 3])).provably_empty());
        assert!(whole.then(&strided(vec![0, 3])).provably_empty());
        let reshape0 = ViewStep::Reshape {
            shape: vec![Dim::Int(4), Dim::Int(0)],
        };
        assert!(whole.then(&reshape0).provably_empty());
        // An empty view is disjoint from anything, itself included.
        assert!(empty.provably_disjoint(&whole));
        assert!(whole.provably_disjoint(&empty));
        assert!(empty.provably_disjoint(&empty));
        assert!(empty.disjoint_from(&other_root));
        assert!(!whole.provably_disjoint(&g(0, vec![slice(1, 3)])));
    }

    #[test]
    fn as_strided_cuts_the_chain() {
        let base = g(0, vec![ViewStep::Select { dim: 0, index: 1 }]);
        let st = ViewStep::AsStrided {
            size: vec![2],
            stride: vec![1],
            offset: 4,
        };
        assert_eq!(base.then(&st), g(0, vec![st.clone()]));
    }
}
