//! A summary of a graph for `fxrewrite inspect`: sizes, auto_functionalized
//! nodes per operator and form, and the graph inputs the graph writes back.

use serde::Serialize;

use crate::analysis::alias::{classify, Role};
use crate::forms::Form;
use crate::ir::{Graph, OpCode, Value};

/// auto_functionalized nodes of one operator in one form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AfCount {
    /// The mutating operator.
    pub op: String,
    /// The form (`"v1"` or `"v2"` in JSON).
    pub form: Form,
    /// How many nodes.
    pub count: usize,
}

/// What `inspect` prints about one graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Inspection {
    /// Nodes in the graph.
    pub nodes: usize,
    /// Graph inputs.
    pub inputs: usize,
    /// Distinct callables.
    pub targets: usize,
    /// auto_functionalized nodes per operator and form, in order of first appearance.
    pub auto_functionalized: Vec<AfCount>,
    /// Graph inputs the graph writes back with `copy_(input, value)`.
    pub mutated_inputs: Vec<String>,
}

/// Summarises `graph` (which must be valid).
#[must_use]
pub fn inspect(graph: &Graph) -> Inspection {
    let roles = classify(graph);
    let mut af: Vec<AfCount> = Vec::new();
    let mut mutated_inputs: Vec<String> = Vec::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        let target = &graph.targets[node.target.idx()];
        let form = match Form::of_kind(target.kind) {
            Some(form) if node.op == OpCode::CallFunction => form,
            _ => {
                if let Role::InputWriteBack { dst, .. } = roles[i] {
                    let name = &graph.node(dst).name;
                    if !mutated_inputs.contains(name) {
                        mutated_inputs.push(name.clone());
                    }
                }
                continue;
            }
        };
        let op = match node.args.first() {
            Some(Value::Target(t)) => graph
                .targets
                .get(t.idx())
                .map_or("<unknown>".to_string(), |t| t.name.clone()),
            _ => "<unknown>".to_string(),
        };
        match af.iter_mut().find(|c| c.op == op && c.form == form) {
            Some(c) => c.count += 1,
            None => af.push(AfCount { op, form, count: 1 }),
        }
    }
    Inspection {
        nodes: graph.len(),
        inputs: graph
            .nodes
            .iter()
            .filter(|n| n.op == OpCode::Placeholder)
            .count(),
        targets: graph.targets.len(),
        auto_functionalized: af,
        mutated_inputs,
    }
}
