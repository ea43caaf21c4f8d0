//! Checks on graphs that come from outside (the Python encoder, a file).
//!
//! After [`validate`] returns `Ok`, the rest of the engine may index nodes and
//! targets without bounds checks failing and may assume every operand refers
//! to an earlier node.

use super::{Graph, NodeId, OpCode, TargetKind, Value};
use crate::error::{Error, Result};

/// Deepest nesting of lists and tuples accepted in one argument. FX arguments
/// are shallow; the limit keeps recursive walks safe on hostile input.
pub const MAX_VALUE_DEPTH: usize = 32;

/// Checks every invariant the engine relies on.
///
/// # Errors
/// [`Error::InvalidGraph`] naming the first offending node.
pub fn validate(graph: &Graph) -> Result<()> {
    if u32::try_from(graph.nodes.len()).is_err() || u32::try_from(graph.targets.len()).is_err() {
        return Err(Error::InvalidGraph {
            node: None,
            detail: "graph too large".into(),
        });
    }
    for (ti, t) in graph.targets.iter().enumerate() {
        if t.kind == TargetKind::Operator && t.schema.is_none() {
            return Err(Error::InvalidGraph {
                node: None,
                detail: format!("operator target #{ti} ({}) has no schema", t.name),
            });
        }
    }
    let mut outputs = 0usize;
    for (i, node) in graph.nodes.iter().enumerate() {
        if node.target.idx() >= graph.targets.len() {
            return Err(Error::invalid(
                i,
                format!("target index {} out of range", node.target.0),
            ));
        }
        if node.op == OpCode::Output {
            outputs += 1;
            if i + 1 != graph.nodes.len() {
                return Err(Error::invalid(i, "the output node must be the last node"));
            }
        }
        let self_id = NodeId(u32::try_from(i).unwrap_or(u32::MAX));
        for v in node.args.iter().chain(node.kwargs.iter().map(|(_, v)| v)) {
            check_value(graph, i, self_id, v, 0)?;
        }
    }
    if outputs != 1 {
        return Err(Error::InvalidGraph {
            node: None,
            detail: format!("expected one output node, found {outputs}"),
        });
    }
    Ok(())
}

fn check_value(graph: &Graph, i: usize, self_id: NodeId, v: &Value, depth: usize) -> Result<()> {
    if depth > MAX_VALUE_DEPTH {
        return Err(Error::invalid(i, "argument nested too deeply"));
    }
    match v {
        Value::Node(n) if *n >= self_id => Err(Error::invalid(
            i,
            format!("operand %{} does not come before its user", n.0),
        )),
        Value::Target(t) if t.idx() >= graph.targets.len() => Err(Error::invalid(
            i,
            format!("target index {} out of range", t.0),
        )),
        Value::List(items) | Value::Tuple(items) => items
            .iter()
            .try_for_each(|item| check_value(graph, i, self_id, item, depth + 1)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Node, Target, TargetId};

    fn node(op: OpCode, args: Vec<Value>) -> Node {
        Node {
            op,
            name: "n".into(),
            target: TargetId(0),
            args,
            kwargs: vec![],
            meta: None,
            source: None,
        }
    }

    fn graph(nodes: Vec<Node>) -> Graph {
        Graph {
            targets: vec![Target {
                name: "x".into(),
                kind: TargetKind::Other,
                schema: None,
            }],
            nodes,
        }
    }

    #[test]
    fn accepts_a_well_formed_graph() {
        let g = graph(vec![
            node(OpCode::Placeholder, vec![]),
            node(OpCode::Output, vec![Value::Node(NodeId(0))]),
        ]);
        assert_eq!(validate(&g), Ok(()));
    }

    #[test]
    fn rejects_forward_references() {
        let g = graph(vec![
            node(OpCode::CallFunction, vec![Value::Node(NodeId(1))]),
            node(OpCode::Output, vec![]),
        ]);
        let err = validate(&g).unwrap_err();
        assert!(
            matches!(err, Error::InvalidGraph { node: Some(0), .. }),
            "{err}"
        );
    }

    #[test]
    fn rejects_missing_or_misplaced_output() {
        assert!(validate(&graph(vec![node(OpCode::Placeholder, vec![])])).is_err());
        let g = graph(vec![
            node(OpCode::Output, vec![]),
            node(OpCode::Placeholder, vec![]),
        ]);
        assert!(validate(&g).is_err());
    }

    #[test]
    fn rejects_bad_target_indices_and_deep_nesting() {
        let mut g = graph(vec![node(OpCode::Output, vec![])]);
        g.nodes[0].target = TargetId(7);
        assert!(validate(&g).is_err());
        let mut deep = Value::Int(1);
        for _ in 0..(MAX_VALUE_DEPTH + 2) {
            deep = Value::List(vec![deep]);
        }
        assert!(validate(&graph(vec![node(OpCode::Output, vec![deep])])).is_err());
    }
}
