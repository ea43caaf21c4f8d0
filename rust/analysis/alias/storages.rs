//! Which nodes lie on one storage in the graph *as it arrives*: before any
//! rewrite, every auto_functionalized result and scatter a fresh value, as
//! torch's functional semantics say.
//!
//! The pre pass (`fxrewrite.pre_pass`) records alias groups on the joint
//! graph, where the same holds; between it and this graph Inductor's
//! cleanups only *merge* storages (`remove_noop_ops` deletes clones). So
//! every group the pre pass records lies on one storage here, and a record
//! that groups slots of two storages is not one the pre pass made (the
//! engine does not trust it). The engine's own storage classes differ: they
//! grow as the walk writes results into their buffers.

use super::{returns_an_alias, Role};
use crate::ir::{Graph, NodeId};
use std::collections::HashMap;

/// Per node, a storage id in the graph as it arrives: equal ids may share
/// memory (views, operands of an opaque node, one metadata storage key, the
/// alias a mutation returns), different ids never do.
#[must_use]
pub fn arrival_storages(graph: &Graph, roles: &[Role]) -> Vec<usize> {
    let n = graph.len();
    let mut parent: Vec<usize> = (0..n).collect();
    let mut keys: HashMap<u64, usize> = HashMap::new();
    for (i, role) in roles.iter().enumerate().take(n) {
        let id = NodeId(u32::try_from(i).unwrap_or(u32::MAX));
        match role {
            Role::View { src, .. } => union(&mut parent, i, src.idx()),
            Role::Opaque => {
                let mut ops = Vec::new();
                graph.node(id).for_each_operand(|o| ops.push(o));
                for o in ops {
                    union(&mut parent, i, o.idx());
                }
            }
            Role::InputWriteBack { dst, .. } => union(&mut parent, i, dst.idx()),
            Role::OtherMutation { written } if returns_an_alias(graph, id) => {
                for w in written {
                    union(&mut parent, i, w.idx());
                }
            }
            _ => {}
        }
        let key = graph.node(id).meta.as_ref().and_then(|m| m.storage);
        if let Some(key) = key {
            match keys.get(&key) {
                Some(&first) => union(&mut parent, i, first),
                None => {
                    keys.insert(key, i);
                }
            }
        }
    }
    (0..n).map(|i| root(&mut parent, i)).collect()
}

fn root(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

fn union(parent: &mut [usize], a: usize, b: usize) {
    let (ra, rb) = (root(parent, a), root(parent, b));
    parent[ra.max(rb)] = ra.min(rb);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::alias::classify;
    use crate::analysis::test_graph::{n, neg, slice_scatter, B};
    use crate::ir::Value;

    #[test]
    fn views_share_their_source_and_fresh_values_do_not() {
        let mut b = B::new();
        let x = b.input("x");
        let t = b.fresh("t", x);
        let s = b.slice("s", t, 0, 0, 2);
        let u = b.fresh("u", x);
        let xv = b.slice("xv", x, 1, 0, 4);
        let g = b.output(&[s, u, xv]);
        let st = arrival_storages(&g, &classify(&g));
        assert_eq!(st[s.idx()], st[t.idx()]);
        assert_eq!(st[xv.idx()], st[x.idx()]);
        assert_ne!(st[u.idx()], st[t.idx()]);
        assert_ne!(st[t.idx()], st[x.idx()]);
    }

    #[test]
    fn a_scatter_result_is_a_storage_of_its_own() {
        // `slice_scatter(buf, v, ...)` is a fresh value in the graph as it
        // arrives, whatever the engine later makes of it.
        let mut b = B::new();
        let x = b.input("x");
        let buf = b.fresh("buf", x);
        let piece = b.slice("piece", buf, 1, 0, 2);
        let v = b.call("v", &neg(), vec![n(piece)]);
        let sc = b.call(
            "sc",
            &slice_scatter(),
            vec![
                n(buf),
                n(v),
                Value::Int(1),
                Value::Int(0),
                Value::Int(2),
                Value::Int(1),
            ],
        );
        let g = b.output(&[sc, piece]);
        let st = arrival_storages(&g, &classify(&g));
        assert_eq!(st[piece.idx()], st[buf.idx()]);
        assert_ne!(st[sc.idx()], st[buf.idx()]);
    }
}
