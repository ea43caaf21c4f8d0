//! `out_buffers_v2`: an `auto_functionalized_v2` node of an operator tagged
//! `torch.Tag.out`. Its written arguments are write-only output buffers that
//! torch encodes as `_<arg>_size/_stride/_dtype/_device` and allocates fresh;
//! the rewrite allocates them with `empty_strided` and calls the operator on
//! them. A fresh buffer has no other reader, so no safety analysis is needed.

use super::call::{mutable_op, OutCall, USER_ALIASED_READS};
use super::{Form, FormCall};
use crate::ir::{ArgType, Graph, NodeId, TargetKind, Value};

/// The rule value.
pub struct OutBuffersV2;

impl Form for OutBuffersV2 {
    fn name(&self) -> &'static str {
        "out_buffers_v2"
    }

    fn parse(&self, graph: &Graph, node: NodeId) -> Option<Result<FormCall, String>> {
        let mine = graph.target_of(node).kind == TargetKind::AutoFunctionalizedV2
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
        .find(|(k, _)| !used.contains(k) && k != USER_ALIASED_READS)
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
        op,
        args,
        return_buffers,
        n_returns: schema.returns.len(),
    })
}
