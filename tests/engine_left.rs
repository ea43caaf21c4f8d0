//! Engine rules: the nodes the engine leaves alone (with the reason and
//! its cause), and the invalid graphs it refuses with an error.
//!
//! Every plan made through `common::plans::planned` is also checked by
//! simulation: structurally (edits on user sets) and semantically, by the
//! reference interpreter (`common::interp`), which runs the original graph
//! with torch's functional semantics and the planned program with real
//! in-place calls on shared memory.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::builder::*;
use common::graphs::*;
use common::ops::*;
use common::plans::*;
use fxrewrite::ir::{Graph, Node, NodeId, OpCode, TargetId, TargetKind, Value};
use fxrewrite::{plan, Action, Error};

// ----- 9: nodes left alone ---------------------------------------------------------

fn v2_with_extra(key: &str, val: Value) -> Graph {
    let mut b = B::new();
    let EmptyBuf { x, w, buf } = empty_buffer(&mut b);
    let af = b.v2(
        &rms_op(),
        vec![
            ("_out_base_index", Value::Int(0)),
            ("x", n(x)),
            ("w", n(w)),
            ("_all_bases", nodes(&[buf])),
            (key, val),
        ],
    );
    let g1 = b.getitem(af, 1);
    b.output(&[g1])
}

#[test]
fn unknown_v2_kwarg_is_left() {
    let p = planned(&v2_with_extra("_foo", Value::Int(1)));
    assert_eq!(actions(&p), [Action::Left]);
    let reason = p.report.decisions[0].reason.as_deref().unwrap();
    assert!(reason.contains("_foo"), "{reason}");
    assert!(p.edits.is_empty());
    assert_eq!(p.report.left(), 1);
}

#[test]
fn v2_already_processed_by_inductor_is_left() {
    let p = planned(&v2_with_extra("_only_clone_these_bases", ints(&[0])));
    assert_eq!(actions(&p), [Action::Left]);
    let reason = p.report.decisions[0].reason.as_deref().unwrap();
    assert!(reason.contains("_only_clone_these_bases"), "{reason}");
    assert!(p.edits.is_empty());
}

#[test]
fn v1_unknown_or_processed_kwargs_are_left() {
    for key in ["_foo", "_only_clone_these_tensors"] {
        let mut b = B::new();
        let EmptyBuf { x, w, buf } = empty_buffer(&mut b);
        let af = b.v1(
            &rms_op(),
            vec![
                ("out", n(buf)),
                ("x", n(x)),
                ("w", n(w)),
                (key, Value::List(vec![])),
            ],
        );
        let g1 = b.getitem(af, 1);
        let g = b.output(&[g1]);
        let p = planned(&g);
        assert_eq!(actions(&p), [Action::Left], "{key}");
        let reason = p.report.decisions[0].reason.as_deref().unwrap();
        assert!(reason.contains(key), "{reason}");
        assert!(p.edits.is_empty());
    }
}

#[test]
fn af_result_used_directly_is_left() {
    let mut b = B::new();
    let EmptyBuf { x, w, buf } = empty_buffer(&mut b);
    let af = rms_v2(&mut b, buf, x, w);
    let g = b.output(&[af]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Left]);
    assert!(p.edits.is_empty());
}

// ----- 12: invalid graphs ------------------------------------------------------------

fn raw_node(op: OpCode, name: &str, target: TargetId, args: Vec<Value>) -> Node {
    Node {
        op,
        name: name.into(),
        target,
        args,
        kwargs: vec![],
        meta: None,
        source: None,
    }
}

#[test]
fn invalid_graphs_are_errors() {
    // A forward reference (pushed directly: `add_node` debug-asserts order).
    let mut b = B::new();
    let x = b.input("x", None);
    let mul = b.op(&mul_op());
    let out_t = b.target("output", TargetKind::Other, None);
    let mut g = b.g.clone();
    g.nodes.push(raw_node(
        OpCode::CallFunction,
        "mul",
        mul,
        vec![n(x), n(NodeId(2))],
    ));
    g.nodes.push(raw_node(
        OpCode::Output,
        "output",
        out_t,
        vec![Value::Tuple(vec![n(NodeId(1))])],
    ));
    let err = plan(&g).unwrap_err();
    assert!(
        matches!(err, Error::InvalidGraph { node: Some(1), .. }),
        "{err}"
    );

    // No output node.
    let mut b = B::new();
    let x = b.input("x", None);
    let w = b.input("w", None);
    let buf = b.empty(&[4]);
    let af = rms_v2(&mut b, buf, x, w);
    b.getitem(af, 1);
    assert!(matches!(plan(&b.g), Err(Error::InvalidGraph { .. })));

    // The empty graph.
    assert!(matches!(
        plan(&Graph::new()),
        Err(Error::InvalidGraph { .. })
    ));

    // Output not last, two outputs, self reference, bad target in an af.
    let mut g2 = g.clone();
    g2.nodes.truncate(1);
    g2.nodes
        .push(raw_node(OpCode::Output, "output", out_t, vec![]));
    g2.nodes
        .push(raw_node(OpCode::Placeholder, "y", TargetId(0), vec![]));
    assert!(matches!(plan(&g2), Err(Error::InvalidGraph { .. })));
    let mut g3 = g.clone();
    g3.nodes.truncate(1);
    g3.nodes
        .push(raw_node(OpCode::CallFunction, "m", mul, vec![n(NodeId(1))]));
    g3.nodes
        .push(raw_node(OpCode::Output, "output", out_t, vec![]));
    assert!(matches!(plan(&g3), Err(Error::InvalidGraph { .. })));
    let mut g4 = g.clone();
    g4.nodes.truncate(1);
    g4.nodes.push(raw_node(
        OpCode::CallFunction,
        "af",
        out_t,
        vec![Value::Target(TargetId(99))],
    ));
    g4.nodes
        .push(raw_node(OpCode::Output, "output", out_t, vec![]));
    assert!(matches!(plan(&g4), Err(Error::InvalidGraph { .. })));
    // An operator target without a schema.
    let mut g5 = g.clone();
    g5.nodes.truncate(1);
    g5.nodes
        .push(raw_node(OpCode::Output, "output", out_t, vec![]));
    g5.targets[mul.0 as usize].schema = None;
    assert!(matches!(plan(&g5), Err(Error::InvalidGraph { .. })));
}
