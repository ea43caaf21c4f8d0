//! `out_buffers_v2`: an `auto_functionalized_v2` node of an operator tagged
//! `torch.Tag.out`. Its written arguments are write-only output buffers that
//! torch encodes as `_<arg>_size/_stride/_dtype/_device` and allocates fresh;
//! the rewrite allocates them with `empty_strided` and calls the operator on
//! them. A fresh buffer has no other reader, so no safety analysis is needed.

use super::call::{is_ir_only_kwarg, mutable_op, OutCall};
use super::{Form, FormCall, Rule};
use crate::ir::{ArgType, Graph, NodeId, Value};

/// The rule (its name and parser).
pub struct OutBuffersV2;

impl Rule for OutBuffersV2 {
    fn name(&self) -> &'static str {
        "out_buffers_v2"
    }

    fn parse(&self, graph: &Graph, node: NodeId) -> Option<Result<FormCall, String>> {
        let mine = Form::of_kind(graph.target_of(node).kind) == Some(Form::V2)
            && mutable_op(graph, node).is_ok_and(|(_, s)| s.tags.out);
        mine.then(|| parse(graph, node).map(FormCall::Out))
    }
}

fn parse(graph: &Graph, node: NodeId) -> Result<OutCall, String> {
    let (op, schema) = mutable_op(graph, node)?;
    let n = graph.node(node);
    match n.kwarg("_all_bases") {
        Some(Value::List(items) | Value::Tuple(items)) if items.is_empty() => {}
        _ => return Err("out= operator without an empty _all_bases".into()),
    }
    let mut used: Vec<String> = vec!["_all_bases".into()];
    let mut args = Vec::new();
    for a in &schema.args {
        if a.is_written() {
            if a.ty != ArgType::Tensor {
                return Err(format!("out= argument '{}' is not a plain Tensor", a.name));
            }
            let keys = ["size", "stride", "dtype", "device"].map(|s| format!("_{}_{s}", a.name));
            if let Some(k) = keys.iter().find(|k| n.kwarg(k).is_none()) {
                return Err(format!("missing {k}"));
            }
            used.extend(keys.iter().cloned());
            args.push((a.name.clone(), a.kwarg_only, Some(keys)));
        } else {
            if n.kwarg(&a.name).is_none() {
                return Err(format!("missing argument '{}'", a.name));
            }
            used.push(a.name.clone());
            args.push((a.name.clone(), a.kwarg_only, None));
        }
    }
    if let Some((k, _)) = n
        .kwargs
        .iter()
        .find(|(k, _)| !used.contains(k) && !is_ir_only_kwarg(k))
    {
        return Err(format!(
            "unknown auto_functionalized_v2 argument '{k}' (graph from a newer torch?)"
        ));
    }
    let return_buffers = (0..schema.returns.len())
        .map(|i| {
            let ai = schema.written_return_source(i)?;
            schema.written_args().position(|(wi, _)| wi == ai)
        })
        .collect();
    Ok(OutCall {
        node,
        form: Form::V2,
        op,
        args,
        return_buffers,
        n_returns: schema.returns.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_graph::{af_graph, scale_op};
    use super::*;
    use crate::forms::Form;
    use crate::ir::schema::OpTags;

    fn out_tags() -> OpTags {
        OpTags {
            out: true,
            ..OpTags::default()
        }
    }

    #[test]
    fn written_arguments_become_fresh_buffers_from_their_layout_keys() {
        let (g, af) = af_graph(
            Form::V2.kind(),
            scale_op("m::scale.out", out_tags()),
            vec![
                ("s", Value::Float(2.0)),
                ("_x_size", Value::List(vec![Value::Int(4)])),
                ("_x_stride", Value::List(vec![Value::Int(1)])),
                ("_x_dtype", Value::Dtype("float32".into())),
                ("_x_device", Value::Device("cpu".into())),
                ("_all_bases", Value::List(vec![])),
            ],
        );
        let call = parse(&g, af).unwrap();
        assert_eq!(call.n_returns, 0);
        assert_eq!(call.args.len(), 2);
        assert_eq!(
            call.args[0].2.as_ref().map(|k| k[0].as_str()),
            Some("_x_size")
        );
        assert!(call.args[1].2.is_none());
    }

    #[test]
    fn a_missing_layout_key_is_a_reason() {
        let (g, af) = af_graph(
            Form::V2.kind(),
            scale_op("m::scale.out", out_tags()),
            vec![
                ("s", Value::Float(2.0)),
                ("_all_bases", Value::List(vec![])),
            ],
        );
        assert!(parse(&g, af).is_err());
    }
}
