//! Use/def index: for every node, the nodes that use it, in graph order.

use crate::ir::{Graph, NodeId};

/// Users of every node, stored flat (CSR layout): one allocation for the
/// whole graph, which matters at 10^6 nodes.
#[derive(Clone, Debug, Default)]
pub struct Uses {
    offsets: Vec<u32>,
    users: Vec<NodeId>,
}

impl Uses {
    /// Builds the index in two passes over the operands. A node that uses
    /// another twice is listed once.
    #[must_use]
    pub fn build(graph: &Graph) -> Self {
        let n = graph.len();
        let mut counts = vec![0u32; n + 1];
        let mut last_user = vec![u32::MAX; n];
        for (i, node) in graph.nodes.iter().enumerate() {
            let i32_ = u32::try_from(i).unwrap_or(u32::MAX);
            node.for_each_operand(|op| {
                if last_user[op.idx()] != i32_ {
                    last_user[op.idx()] = i32_;
                    counts[op.idx() + 1] += 1;
                }
            });
        }
        for i in 0..n {
            counts[i + 1] += counts[i];
        }
        let mut fill = counts.clone();
        let mut users = vec![NodeId(0); counts[n] as usize];
        last_user.iter_mut().for_each(|u| *u = u32::MAX);
        for (i, node) in graph.nodes.iter().enumerate() {
            let id = NodeId(u32::try_from(i).unwrap_or(u32::MAX));
            node.for_each_operand(|op| {
                if last_user[op.idx()] != id.0 {
                    last_user[op.idx()] = id.0;
                    users[fill[op.idx()] as usize] = id;
                    fill[op.idx()] += 1;
                }
            });
        }
        Self {
            offsets: counts,
            users,
        }
    }

    /// The users of `n`, in graph order.
    #[must_use]
    pub fn users(&self, n: NodeId) -> &[NodeId] {
        let (a, b) = (
            self.offsets[n.idx()] as usize,
            self.offsets[n.idx() + 1] as usize,
        );
        &self.users[a..b]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Node, OpCode, Target, TargetId, TargetKind, Value};

    #[test]
    fn users_are_listed_once_in_graph_order() {
        let mk = |op, args| Node {
            op,
            name: String::new(),
            target: TargetId(0),
            args,
            kwargs: vec![],
            meta: None,
            source: None,
        };
        let g = Graph {
            targets: vec![Target {
                name: "f".into(),
                kind: TargetKind::Other,
                schema: None,
            }],
            nodes: vec![
                mk(OpCode::Placeholder, vec![]),
                mk(
                    OpCode::CallFunction,
                    vec![
                        Value::Node(NodeId(0)),
                        Value::List(vec![Value::Node(NodeId(0))]),
                    ],
                ),
                mk(
                    OpCode::Output,
                    vec![Value::Tuple(vec![
                        Value::Node(NodeId(1)),
                        Value::Node(NodeId(0)),
                    ])],
                ),
            ],
        };
        let u = Uses::build(&g);
        assert_eq!(u.users(NodeId(0)), &[NodeId(1), NodeId(2)]);
        assert_eq!(u.users(NodeId(1)), &[NodeId(2)]);
        assert!(u.users(NodeId(2)).is_empty());
    }
}
