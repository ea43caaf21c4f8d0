//! View steps: the canonical form of one view operator applied to a tensor,
//! read from the operator's name and arguments.
//!
//! Negative dims and indices are resolved with tensor metadata where it is
//! present; a step that cannot be resolved becomes `ViewStep::Opaque`, equal
//! only to itself, so a missing size makes the engine prove less, never
//! something wrong.

use crate::ir::{Graph, NodeId, OpSchema, TargetKind, Value};

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

/// The view operators whose result is defined by their source's own sizes,
/// strides and storage offset (the base name, before the overload): given
/// the same elements in another storage, they give the same elements. Not
/// `as_strided` (absolute strides and offset) nor `view.dtype` (its strides
/// are its source's, rescaled: another layout of the same elements can give
/// other bytes), nor any operator not named here.
const ELEMENT_RELATIVE_VIEWS: &[&str] = &[
    "alias",
    "broadcast_to",
    "chunk",
    "detach",
    "diagonal",
    "expand",
    "expand_as",
    "flatten",
    "lift_fresh",
    "movedim",
    "narrow",
    "permute",
    "reshape",
    "select",
    "slice",
    "split",
    "split_with_sizes",
    "squeeze",
    "swapaxes",
    "swapdims",
    "t",
    "tensor_split",
    "transpose",
    "unbind",
    "unflatten",
    "unfold",
    "unsqueeze",
    "_unsafe_view",
    "view_as",
];

impl ViewStep {
    /// True when the step addresses its source's storage rather than its
    /// source's elements: an `as_strided`, or a view the engine does not
    /// model whose operator is not one of [`ELEMENT_RELATIVE_VIEWS`] (a
    /// `getitem` of a list view is judged by the list's operator). Only such
    /// a step can tell two tensors of the same elements in different
    /// storages apart.
    #[must_use]
    pub fn addresses_storage(&self, graph: &Graph) -> bool {
        match self {
            Self::AsStrided { .. } => true,
            Self::Opaque(node) => {
                let mut op = *node;
                if graph.target_of(op).kind == TargetKind::Getitem {
                    match graph.node(op).args.first().and_then(Value::as_node) {
                        Some(list) => op = list,
                        None => return true,
                    }
                }
                let target = graph.target_of(op);
                if target.kind != TargetKind::Operator {
                    return true;
                }
                let name = target.name.strip_prefix("aten::").unwrap_or("");
                let base = name.split('.').next().unwrap_or("");
                // `view.default` only: `view.dtype` reinterprets.
                let relative = name == "view.default" || ELEMENT_RELATIVE_VIEWS.contains(&base);
                !relative
            }
            _ => false,
        }
    }
}

/// One size in a [`ViewStep::Reshape`]: a number, or the SymInt a node holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A static size.
    Int(i64),
    /// A symbolic size: the value of this node.
    Sym(NodeId),
}

fn meta_rank(graph: &Graph, n: NodeId) -> Option<i64> {
    graph.node(n).meta.as_ref().map(|m| i64::from(m.rank()))
}

fn meta_size(graph: &Graph, n: NodeId, dim: i64) -> Option<i64> {
    let sizes = &graph.node(n).meta.as_ref()?.sizes;
    sizes.get(usize::try_from(dim).ok()?)?.as_static()
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
pub(super) fn slice_step(
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

pub(super) fn select_step(
    graph: &Graph,
    node: NodeId,
    src: NodeId,
    dim: i64,
    index: i64,
) -> ViewStep {
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

pub(super) fn arg(node: &crate::ir::Node, schema: &OpSchema, i: usize) -> Option<Value> {
    if let Some(v) = node.args.get(i) {
        return Some(v.clone());
    }
    let name = &schema.args.get(i)?.name;
    node.kwarg(name).cloned()
}

pub(super) fn opt_int(v: Option<Value>) -> Option<Option<i64>> {
    match v {
        None | Some(Value::None) => Some(None),
        Some(Value::Int(i)) => Some(Some(i)),
        _ => None,
    }
}

/// The step of a view operator applied by `node` to `src`, from its name and
/// arguments: `None` for an identity view, and whether the view may map two
/// indices to one element.
pub(super) fn view_step(
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
                (Some(shape), Some(m)) => m.shape().as_ref() == Some(&shape),
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
pub(super) fn list_item_step(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_graph::{expand, ints, meta, n, op, B};
    use crate::ir::schema::ArgType::{Other, Tensor};

    /// A graph holding input `x` (`[4, 8]`, with metadata) and `y`, a node
    /// with no metadata; returns it with the two ids.
    fn x_and_bare_y() -> (Graph, NodeId, NodeId) {
        let mut b = B::new();
        let x = b.input("x");
        let y = b.slice("y", x, 0, 0, 4);
        (b.output(&[y]), x, y)
    }

    fn sl(dim: i64, start: i64, end: i64) -> Option<ViewStep> {
        Some(ViewStep::Slice {
            dim,
            start,
            end,
            step: 1,
        })
    }

    #[test]
    fn a_slice_is_resolved_against_the_sizes_it_cuts() {
        let (g, x, y) = x_and_bare_y();
        let node = NodeId(9);
        // Negative dim, start and end count from the back; ends clamp.
        assert_eq!(
            slice_step(&g, node, x, -1, Some(-6), Some(-2), 1),
            sl(1, 2, 6)
        );
        assert_eq!(
            slice_step(&g, node, x, 0, Some(1), Some(100), 1),
            sl(0, 1, 4)
        );
        // The whole dimension is no step at all.
        assert_eq!(slice_step(&g, node, x, 1, None, Some(8), 1), None);
        assert_eq!(slice_step(&g, node, x, 1, Some(0), None, 2), {
            Some(ViewStep::Slice {
                dim: 1,
                start: 0,
                end: 8,
                step: 2,
            })
        });
        // Without sizes, a negative bound cannot be resolved, and an open
        // end stays open.
        assert_eq!(
            slice_step(&g, node, y, 0, Some(-1), None, 1),
            Some(ViewStep::Opaque(node))
        );
        assert_eq!(
            slice_step(&g, node, y, 0, Some(1), None, 1),
            sl(0, 1, i64::MAX)
        );
        assert_eq!(slice_step(&g, node, y, 0, None, None, 1), None);
    }

    #[test]
    fn a_negative_select_index_needs_the_size() {
        let (g, x, y) = x_and_bare_y();
        let node = NodeId(9);
        assert_eq!(
            select_step(&g, node, x, -2, -1),
            ViewStep::Select { dim: 0, index: 3 }
        );
        assert_eq!(select_step(&g, node, x, 0, -5), ViewStep::Opaque(node));
        assert_eq!(
            select_step(&g, node, y, 1, 2),
            ViewStep::Select { dim: 1, index: 2 }
        );
        assert_eq!(select_step(&g, node, y, 0, -1), ViewStep::Opaque(node));
    }

    #[test]
    fn view_operators_give_their_steps_and_overlap() {
        let unsqueeze = op(
            "aten::unsqueeze.default",
            &[("self", Tensor, "a"), ("dim", Other, "")],
            &[(Tensor, "a")],
        );
        let squeeze = op(
            "aten::squeeze.dim",
            &[("self", Tensor, "a"), ("dim", Other, "")],
            &[(Tensor, "a")],
        );
        let as_strided = op(
            "aten::as_strided.default",
            &[
                ("self", Tensor, "a"),
                ("size", Other, ""),
                ("stride", Other, ""),
                ("storage_offset", Other, ""),
            ],
            &[(Tensor, "a")],
        );
        let mut b = B::new();
        let x = b.input("x");
        let u = b.call("u", &unsqueeze, vec![n(x), Value::Int(-1)]);
        let s = b.call("s", &squeeze, vec![n(x), Value::Int(0)]);
        let e = b.call("e", &expand(), vec![n(x), ints(&[2, 4, 8])]);
        let bcast = b.call(
            "bcast",
            &as_strided,
            vec![n(x), ints(&[4, 8]), ints(&[0, 1]), Value::Int(0)],
        );
        let strided = b.call(
            "strided",
            &as_strided,
            vec![n(x), ints(&[2, 8]), ints(&[8, 1]), Value::Int(8)],
        );
        let g = b.output(&[u, s, e, bcast, strided]);
        let step = |id: NodeId| {
            let schema = g.target_of(id).schema.clone().unwrap();
            view_step(&g, id, x, &g.target_of(id).name, &schema)
        };
        // `unsqueeze(-1)` of a rank-2 tensor adds dimension 2.
        assert_eq!(step(u), (Some(ViewStep::Unsqueeze { dim: 2 }), false));
        // Squeezing a dimension of size 4 changes nothing.
        assert_eq!(step(s), (None, false));
        assert_eq!(step(e), (Some(ViewStep::Opaque(e)), true));
        assert!(step(bcast).1, "a zero stride over size 4");
        assert_eq!(
            step(strided),
            (
                Some(ViewStep::AsStrided {
                    size: vec![2, 8],
                    stride: vec![8, 1],
                    offset: 8
                }),
                false
            )
        );
    }

    #[test]
    fn only_as_strided_and_unknown_views_address_the_storage() {
        let one = |name: &'static str| {
            op(
                name,
                &[("self", Tensor, "a"), ("arg", Other, "")],
                &[(Tensor, "a")],
            )
        };
        let mut b = B::new();
        let x = b.input("x");
        // `reshape(x, [-1, 4])`: not modelled (-1), yet element-relative.
        let r = b.call(
            "r",
            &one("aten::reshape.default"),
            vec![n(x), ints(&[-1, 4])],
        );
        let d = b.call("d", &one("aten::view.dtype"), vec![n(x), Value::Int(3)]);
        let u = b.call(
            "u",
            &one("mylib::my_view.default"),
            vec![n(x), Value::Int(0)],
        );
        let t = b.call(
            "t",
            &one("aten::permute.default"),
            vec![n(x), ints(&[1, 0])],
        );
        let g = b.output(&[r, d, u, t]);
        let opaque = |v: NodeId| ViewStep::Opaque(v).addresses_storage(&g);
        assert!(!opaque(r));
        assert!(!opaque(t));
        assert!(opaque(d), "view.dtype rescales its source's strides");
        assert!(opaque(u), "an operator the engine does not know");
        let strided = ViewStep::AsStrided {
            size: vec![4],
            stride: vec![1],
            offset: 0,
        };
        assert!(strided.addresses_storage(&g));
        assert!(!sl(0, 0, 2).unwrap().addresses_storage(&g));
    }

    #[test]
    fn a_reshape_is_a_step_only_on_one_storage() {
        let view = op(
            "aten::view.default",
            &[("self", Tensor, "a"), ("size", Other, "")],
            &[(Tensor, "a")],
        );
        let on_storage = |key: Option<u64>| {
            let mut b = B::new();
            let x = b.input("x");
            b.g.nodes[x.idx()].meta.as_mut().unwrap().storage = Some(1);
            let mut m = meta(&[32]);
            m.storage = key;
            let v = b.call_meta("v", &view, vec![n(x), ints(&[32])], Some(m));
            let g = b.output(&[v]);
            let schema = g.target_of(v).schema.clone().unwrap();
            view_step(&g, v, x, "aten::view.default", &schema)
        };
        assert_eq!(
            on_storage(Some(1)),
            (
                Some(ViewStep::Reshape {
                    shape: vec![Dim::Int(32)]
                }),
                false
            )
        );
        // A reshape that copied (another storage) is not a modelled view.
        assert!(matches!(on_storage(Some(2)).0, Some(ViewStep::Opaque(_))));
    }

    #[test]
    fn an_item_of_a_split_is_its_slice() {
        let split = op(
            "aten::split.Tensor",
            &[
                ("self", Tensor, "a"),
                ("split_size", Other, ""),
                ("dim", Other, ""),
            ],
            &[(crate::ir::schema::ArgType::TensorList, "a")],
        );
        let sizes = op(
            "aten::split_with_sizes.default",
            &[
                ("self", Tensor, "a"),
                ("split_sizes", Other, ""),
                ("dim", Other, ""),
            ],
            &[(crate::ir::schema::ArgType::TensorList, "a")],
        );
        let mut b = B::new();
        let x = b.input("x");
        let parts = b.call("parts", &split, vec![n(x), Value::Int(3), Value::Int(1)]);
        let by_sizes = b.call("by_sizes", &sizes, vec![n(x), ints(&[1, 3]), Value::Int(0)]);
        let g = b.output(&[parts, by_sizes]);
        let item = |list: NodeId, i: usize| {
            let t = g.target_of(list);
            list_item_step(&g, NodeId(99), list, i, &t.name, t.schema.as_ref().unwrap())
        };
        assert_eq!(item(parts, 1), sl(1, 3, 6));
        // The last item is cut short by the size.
        assert_eq!(item(parts, 2), sl(1, 6, 8));
        assert_eq!(item(by_sizes, 1), sl(0, 1, 4));
        assert_eq!(item(by_sizes, 2), Some(ViewStep::Opaque(NodeId(99))));
    }
}
