//! What each node *is*, as far as memory is concerned: a fresh buffer, a view
//! of another node (with its geometry), an auto_functionalized call or one of
//! its results, a scatter back into a base, a graph-input write-back, another
//! mutation, or something opaque that may alias its operands.
//!
//! Everything here comes from schema alias annotations and the structure of
//! the graph. Tensor metadata only sharpens geometry (normalising negative
//! dims and clamping slice ends); without it the engine proves less, never
//! something wrong.
//!
//! Reading a view operator's arguments into a step (`steps`) and reasoning
//! about where steps lead (`geometry`) are separate files: the engine only
//! needs the second, and each grows with the operators it learns.

mod geometry;
mod steps;
mod storages;

pub use geometry::Geometry;
pub use steps::{Dim, ViewStep};
pub use storages::arrival_storages;

/// True when the value of mutating node `id` may alias what it writes: its
/// schema annotates a return as an alias, or it has no schema to say. A
/// call with no such return (every operator auto_functionalized wraps)
/// shares no memory with its written arguments, nor joins them.
#[must_use]
pub fn returns_an_alias(graph: &Graph, id: NodeId) -> bool {
    graph
        .target_of(id)
        .schema
        .as_ref()
        .is_none_or(|s| s.returns.iter().any(|r| r.alias.is_some()))
}

use crate::ir::{Graph, NodeId, OpCode, OpSchema, TargetKind, Value};
use steps::{arg, list_item_step, opt_int, select_step, slice_step, view_step};

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
        TargetKind::AutoFunctionalized(_) => Role::AutoFunctionalized,
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
                if schema.returns_list() {
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
            if schema.returns_list() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_graph::{
        add_, copy_, ints, n, neg, op, scale_, slice_scatter, sym_size, B,
    };
    use crate::ir::schema::ArgType::{Other, Tensor};

    #[test]
    fn inputs_fresh_results_views_and_the_output() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let v = b.slice("v", t, 0, 1, 3);
        let whole = b.slice("whole", t, 0, 0, 4);
        let sz = b.call("sz", &sym_size(), vec![n(t), Value::Int(0)]);
        let g = b.output(&[v, whole, sz]);
        let roles = classify(&g);
        assert_eq!(roles[x.idx()], Role::Input);
        assert_eq!(roles[t.idx()], Role::Fresh);
        assert_eq!(
            roles[v.idx()],
            Role::View {
                src: t,
                step: Some(ViewStep::Slice {
                    dim: 0,
                    start: 1,
                    end: 3,
                    step: 1
                }),
                overlapping: false
            }
        );
        // A slice of all of `t` (its sizes known) is the same geometry.
        assert!(matches!(roles[whole.idx()], Role::View { step: None, .. }));
        assert_eq!(roles[sz.idx()], Role::MetaOnly);
        assert_eq!(roles.last(), Some(&Role::Output));
    }

    #[test]
    fn a_copy_into_an_input_is_its_write_back_and_other_writes_are_mutations() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let into_x = b.call("into_x", &copy_(), vec![n(x), n(t)]);
        let into_t = b.call("into_t", &copy_(), vec![n(t), n(x)]);
        let added = b.call("added", &add_(), vec![n(t), n(x)]);
        let g = b.output(&[into_x, into_t, added]);
        let roles = classify(&g);
        assert_eq!(roles[into_x.idx()], Role::InputWriteBack { dst: x, src: t });
        assert_eq!(
            roles[into_t.idx()],
            Role::OtherMutation { written: vec![t] }
        );
        assert_eq!(roles[added.idx()], Role::OtherMutation { written: vec![t] });
    }

    #[test]
    fn getitems_of_a_call_and_of_its_written_lists() {
        let mut b = B::new();
        let x = b.input("x");
        let af = b.scale_v2("af", x);
        let list = b.getitem("list", af, 1);
        let item = b.getitem("item", list, 2);
        let g = b.output(&[item]);
        let roles = classify(&g);
        assert_eq!(roles[af.idx()], Role::AutoFunctionalized);
        assert_eq!(roles[list.idx()], Role::AfResult { af, index: 1 });
        assert_eq!(roles[item.idx()], Role::AfListItem { list, item: 2 });
    }

    #[test]
    fn a_scatter_is_a_write_into_a_view_of_its_base_only_when_the_view_is_modelled() {
        let mut b = B::new();
        let x = b.input("x");
        let v = b.fresh("v", x);
        let args = |step: i64| {
            vec![
                n(x),
                n(v),
                Value::Int(-2),
                Value::Int(1),
                Value::Int(3),
                Value::Int(step),
            ]
        };
        let sc = b.call("sc", &slice_scatter(), args(1));
        let backwards = b.call("backwards", &slice_scatter(), args(0));
        let g = b.output(&[sc, backwards]);
        let roles = classify(&g);
        assert_eq!(
            roles[sc.idx()],
            Role::Scatter {
                base: x,
                src: v,
                step: ViewStep::Slice {
                    dim: 0,
                    start: 1,
                    end: 3,
                    step: 1
                }
            }
        );
        // A step below 1 is no view: a plain fresh result.
        assert_eq!(roles[backwards.idx()], Role::Fresh);
    }

    #[test]
    fn an_operator_whose_lowering_returns_a_view_is_a_view() {
        let unsafe_view = op(
            "aten::_unsafe_view.default",
            &[("self", Tensor, ""), ("size", Other, "")],
            &[(Tensor, "")],
        );
        let mut b = B::new();
        let x = b.input("x");
        let v = b.call("v", &unsafe_view, vec![n(x), ints(&[32])]);
        let g = b.output(&[v]);
        assert!(matches!(classify(&g)[v.idx()], Role::View { src, .. } if src == x));
    }

    #[test]
    fn only_a_return_annotated_as_an_alias_may_alias_what_a_call_writes() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let added = b.call("added", &add_(), vec![n(t), n(x)]);
        let scaled = b.call("scaled", &scale_(), vec![n(t), Value::Float(2.0)]);
        let negated = b.call("negated", &neg(), vec![n(t)]);
        let g = b.output(&[added, scaled, negated]);
        assert!(returns_an_alias(&g, added));
        assert!(!returns_an_alias(&g, scaled));
        assert!(!returns_an_alias(&g, negated));
        // No schema: nothing says it does not.
        assert!(returns_an_alias(&g, x));
    }
}
