//! `reinplace_v1`: an `auto_functionalized` (v1) node becomes a direct call of
//! its mutating operator on the written arguments themselves. A written view
//! whose new value is scattered back into its base with the same view
//! parameters (`slice_scatter`, `select_scatter`, `as_strided_scatter`) needs
//! no scatter afterwards: the base already holds the result. This is the
//! rotary-embedding-on-split-qkv case where Inductor keeps one clone per slice.

use super::call::{
    alias_groups, collect_nodes, fresh_slots, is_ir_only_kwarg, mutable_op, return_alias_args,
    return_slots, slot_label, Buffer, CallArg, MutationCall, ResultSlot, ViewOfBuffer, WrittenArg,
};
use super::{Form, FormCall, Rule};
use crate::ir::{ArgType, Graph, NodeId, Value};

/// The rule (its name and parser).
pub struct ReinplaceV1;

impl Rule for ReinplaceV1 {
    fn name(&self) -> &'static str {
        "reinplace_v1"
    }

    fn parse(&self, graph: &Graph, node: NodeId) -> Option<Result<FormCall, String>> {
        let mine = Form::of_kind(graph.target_of(node).kind) == Some(Form::V1);
        mine.then(|| parse(graph, node).map(FormCall::Mutation))
    }
}

/// Parses a v1 node: every schema argument is a keyword of the node, and the
/// results are the operator's returns followed by the new values of the
/// written arguments in schema order.
pub fn parse(graph: &Graph, node: NodeId) -> Result<MutationCall, String> {
    let (op, schema) = mutable_op(graph, node)?;
    let n = graph.node(node);
    if n.kwarg("_only_clone_these_tensors").is_some() {
        return Err(
            "already processed by Inductor's reinplace pass (_only_clone_these_tensors is set)"
                .into(),
        );
    }
    if let Some((k, _)) = n
        .kwargs
        .iter()
        .find(|(k, _)| !is_ir_only_kwarg(k) && !schema.args.iter().any(|a| &a.name == k))
    {
        return Err(format!(
            "unknown auto_functionalized argument '{k}' (graph from a newer torch?)"
        ));
    }
    let mut buffers = Vec::new();
    let mut written = Vec::new();
    let mut call_args = Vec::new();
    let mut read_nodes = Vec::new();
    let n_out = return_slots(schema);
    let mut results: Vec<ResultSlot> = (0..n_out).map(ResultSlot::Return).collect();
    let push_written =
        |label: String, b: NodeId, buffers: &mut Vec<Buffer>, written: &mut Vec<WrittenArg>| {
            buffers.push(Buffer {
                label: label.clone(),
                node: b,
            });
            written.push(WrittenArg {
                label,
                buffer: buffers.len() - 1,
                view: ViewOfBuffer::Whole,
            });
            written.len() - 1
        };
    for a in &schema.args {
        let Some(v) = n.kwarg(&a.name) else {
            return Err(format!("missing argument '{}'", a.name));
        };
        if !a.is_written() {
            collect_nodes(&a.name, v, &mut read_nodes);
            call_args.push((a.name.clone(), a.kwarg_only, CallArg::Kwarg(a.name.clone())));
            continue;
        }
        match (a.ty, v) {
            (ArgType::Tensor | ArgType::OptionalTensor, Value::Node(b)) => {
                let w = push_written(a.name.clone(), *b, &mut buffers, &mut written);
                results.push(ResultSlot::Buffer(written[w].buffer));
                call_args.push((a.name.clone(), a.kwarg_only, CallArg::Written(w)));
            }
            (ArgType::OptionalTensor | ArgType::TensorList, Value::None) => {
                results.push(ResultSlot::BufferList(vec![]));
                call_args.push((a.name.clone(), a.kwarg_only, CallArg::None));
            }
            (ArgType::TensorList, Value::List(items) | Value::Tuple(items)) => {
                let mut slots = Vec::new();
                let mut elems = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::Node(b) => {
                            let w = push_written(
                                slot_label(&a.name, i),
                                *b,
                                &mut buffers,
                                &mut written,
                            );
                            slots.push(Some(written[w].buffer));
                            elems.push(Some(w));
                        }
                        Value::None => {
                            slots.push(None);
                            elems.push(None);
                        }
                        other => {
                            return Err(format!(
                                "unexpected element {other} in written list '{}'",
                                a.name
                            ))
                        }
                    }
                }
                results.push(ResultSlot::BufferList(slots));
                call_args.push((a.name.clone(), a.kwarg_only, CallArg::WrittenList(elems)));
            }
            (_, other) => {
                return Err(format!(
                    "unexpected value {other} for written argument '{}'",
                    a.name
                ))
            }
        }
    }
    let return_aliases = return_alias_args(schema)
        .into_iter()
        .map(|ai| {
            let name = &schema.args[ai?].name;
            written.iter().position(|w: &WrittenArg| &w.label == name)
        })
        .collect();
    Ok(MutationCall {
        node,
        op,
        form: Form::V1,
        buffers,
        written,
        call_args,
        results,
        return_aliases,
        read_nodes,
        alias_groups: alias_groups(graph, node),
        fresh_slots: fresh_slots(graph, node),
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_graph::{af_graph, scale_op, x};
    use super::*;
    use crate::forms::call::{ResultSlot, ALIAS_GROUPS, LEGACY_USER_ALIASED_READS};
    use crate::forms::Form;
    use crate::ir::schema::OpTags;

    fn node(kwargs: Vec<(&str, Value)>) -> (Graph, NodeId) {
        af_graph(
            Form::V1.kind(),
            scale_op("m::scale_.default", OpTags::default()),
            kwargs,
        )
    }

    #[test]
    fn a_written_argument_is_its_own_buffer_and_result() {
        let (g, af) = node(vec![("x", x()), ("s", Value::Float(2.0))]);
        let call = parse(&g, af).unwrap();
        assert_eq!(call.form, Form::V1);
        assert_eq!(call.buffers.len(), 1);
        assert_eq!(call.buffers[0].node, NodeId(0));
        // No returns: slot 0 is the (None) return, slot 1 the new x.
        assert_eq!(call.results, [ResultSlot::Return(0), ResultSlot::Buffer(0)]);
        assert!(call.read_nodes.is_empty());
    }

    #[test]
    fn unknown_and_missing_arguments_are_reasons_not_guesses() {
        let (g, af) = node(vec![
            ("x", x()),
            ("s", Value::Float(2.0)),
            ("new", Value::Int(1)),
        ]);
        assert!(parse(&g, af)
            .unwrap_err()
            .contains("unknown auto_functionalized argument 'new'"));
        let (g, af) = node(vec![("x", x())]);
        assert!(parse(&g, af).unwrap_err().contains("missing argument 's'"));
        // The pre pass's record is not an unknown argument; an earlier
        // build's record is accepted and carries no groups.
        let groups = Value::List(vec![Value::List(vec![Value::Str("x".into())])]);
        let (g, af) = node(vec![
            ("x", x()),
            ("s", Value::Float(2.0)),
            (ALIAS_GROUPS, groups),
        ]);
        assert_eq!(
            parse(&g, af).unwrap().alias_groups,
            Some(vec![vec!["x".to_string()]])
        );
        let legacy = Value::List(vec![Value::Str("s".into())]);
        let (g, af) = node(vec![
            ("x", x()),
            ("s", Value::Float(2.0)),
            (LEGACY_USER_ALIASED_READS, legacy),
        ]);
        assert_eq!(parse(&g, af).unwrap().alias_groups, None);
    }
}

#[cfg(test)]
mod message_tests {
    use super::super::test_graph::{af_graph, scale_op};
    use super::*;
    use crate::forms::Form;
    use crate::ir::schema::OpTags;

    #[test]
    fn unexpected_values_read_as_values_not_debug_output() {
        let (g, af) = af_graph(
            Form::V1.kind(),
            scale_op("m::scale_.default", OpTags::default()),
            vec![
                ("x", Value::List(vec![Value::Node(NodeId(0))])),
                ("s", Value::Float(2.0)),
            ],
        );
        assert_eq!(
            parse(&g, af).unwrap_err(),
            "unexpected value [node 0] for written argument 'x'"
        );
    }
}
