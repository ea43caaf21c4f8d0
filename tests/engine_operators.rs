//! Engine rules by kind of operator: out= operators (fresh buffers), and
//! operators with optional, list and returned arguments.
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
use fxrewrite::ir::{NodeId, Value};
use fxrewrite::plan::{Callee, MetaSource, NewId, PlanArg, ValueRef};
use fxrewrite::{Action, Edit};

/// The written buffers of the list and multi-output operators: input `w`
/// `[8]` and two fresh `[4, 8]` buffers.
fn two_empty_buffers(b: &mut B) -> (NodeId, [NodeId; 2]) {
    let w = b.input("w", Some(meta(&[8])));
    let b0 = b.empty(&[4, 8]);
    let b1 = b.empty(&[4, 8]);
    (w, [b0, b1])
}

// ----- 10: out= operators ------------------------------------------------------------

#[test]
fn out_tagged_op_gets_a_fresh_buffer() {
    let mut b = B::new();
    let x = b.input("x", Some(meta(&[4, 8])));
    let af = b.v2(
        &mk_op(),
        vec![
            ("x", n(x)),
            ("_out_size", ints(&[4, 8])),
            ("_out_stride", ints(&[8, 1])),
            ("_out_dtype", Value::Dtype("float32".into())),
            ("_out_device", Value::Device("cpu".into())),
            ("_all_bases", Value::List(vec![])),
        ],
    );
    let r = b.call(&add_op(), vec![n(af), n(x)]);
    let g = b.output(&[r]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced]);
    assert_eq!(p.report.decisions[0].rule, "out_buffers_v2");
    let (buf, bargs, bkwargs) = p
        .edits
        .iter()
        .find_map(|e| match e {
            Edit::Insert {
                id,
                callee: Callee::Aten("aten::empty_strided.default"),
                args,
                kwargs,
                ..
            } => Some((*id, args, kwargs)),
            _ => None,
        })
        .unwrap();
    let from = |k: &str| PlanArg::FromKwarg {
        node: af,
        key: k.into(),
    };
    assert_eq!(bargs, &vec![from("_out_size"), from("_out_stride")]);
    assert_eq!(
        bkwargs,
        &vec![
            ("dtype".to_string(), from("_out_dtype")),
            ("device".to_string(), from("_out_device")),
        ]
    );
    let calls = inserted_calls(&p);
    assert_eq!(calls.len(), 1);
    // `out` is keyword-only in the schema: passed by keyword.
    assert_eq!(calls[0].1, &vec![from("x")]);
    assert_eq!(
        calls[0].2,
        &vec![("out".to_string(), PlanArg::Ref(ValueRef::New(buf)))]
    );
    assert_eq!(replaced_with(&p, af), Some(ValueRef::New(buf)));
    assert!(erased(&p, af));
}

#[test]
fn out_tagged_op_missing_size_is_left() {
    let mut b = B::new();
    let x = b.input("x", Some(meta(&[4, 8])));
    let af = b.v2(
        &mk_op(),
        vec![
            ("x", n(x)),
            ("_out_stride", ints(&[8, 1])),
            ("_out_dtype", Value::Dtype("float32".into())),
            ("_out_device", Value::Device("cpu".into())),
            ("_all_bases", Value::List(vec![])),
        ],
    );
    let g = b.output(&[af]);
    // Without `_out_size` no one can allocate the output: the graph cannot
    // run (in torch or the reference interpreter), only be left.
    let (p, why) = planned_unrunnable(&g);
    assert!(why.contains("expected ints, got None"), "{why}");
    assert_eq!(actions(&p), [Action::Left]);
    let reason = p.report.decisions[0].reason.as_deref().unwrap();
    assert!(reason.contains("_out_size"), "{reason}");
    assert!(p.edits.is_empty());
}

// ----- 11: optional, list and returning operators --------------------------------

#[test]
fn optional_written_arg_none() {
    for v2 in [true, false] {
        let mut b = B::new();
        let w = b.input("w", Some(meta(&[8])));
        let buf = b.empty(&[4, 8]);
        let af = if v2 {
            b.v2(
                &opt_op(),
                vec![
                    ("_x_base_index", Value::Int(0)),
                    ("_res_base_index", Value::None),
                    ("w", n(w)),
                    ("_all_bases", nodes(&[buf])),
                ],
            )
        } else {
            b.v1(
                &opt_op(),
                vec![("x", n(buf)), ("res", Value::None), ("w", n(w))],
            )
        };
        let g1 = b.getitem(af, 1);
        let g = b.output(&[g1]);
        let p = planned(&g);
        assert_eq!(actions(&p), [Action::Reinplaced], "v2={v2}");
        let calls = inserted_calls(&p);
        assert_eq!(
            calls[0].1,
            &vec![
                PlanArg::Ref(ValueRef::Old(buf)),
                PlanArg::None,
                PlanArg::FromKwarg {
                    node: af,
                    key: "w".into()
                }
            ],
            "v2={v2}"
        );
        assert_eq!(replaced_with(&p, g1), Some(ValueRef::Old(buf)));
    }
}

#[test]
fn v1_written_tensor_list() {
    let mut b = B::new();
    let (w, [b0, b1]) = two_empty_buffers(&mut b);
    let af = b.v1(&foreach_op(), vec![("xs", nodes(&[b0, b1])), ("w", n(w))]);
    let list = b.getitem(af, 1);
    let l0 = b.getitem(list, 0);
    let l1 = b.getitem(list, 1);
    let g = b.output(&[l0, l1]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced]);
    assert_eq!(replaced_with(&p, l0), Some(ValueRef::Old(b0)));
    assert_eq!(replaced_with(&p, l1), Some(ValueRef::Old(b1)));
    assert!(erased(&p, l0) && erased(&p, l1) && erased(&p, list) && erased(&p, af));
    let calls = inserted_calls(&p);
    assert_eq!(calls[0].1[0], old_list(&[b0, b1]));
}

#[test]
fn v1_written_list_used_whole_is_left() {
    let mut b = B::new();
    let (w, [b0, b1]) = two_empty_buffers(&mut b);
    let af = b.v1(&foreach_op(), vec![("xs", nodes(&[b0, b1])), ("w", n(w))]);
    let list = b.getitem(af, 1);
    let g = b.output(&[list]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Left]);
    assert!(p.edits.is_empty());
}

#[test]
fn v2_written_tensor_list_of_two_bases() {
    let mut b = B::new();
    let (w, [b0, b1]) = two_empty_buffers(&mut b);
    let af = b.v2(
        &foreach_op(),
        vec![
            ("_xs_length", Value::Int(2)),
            ("_xs_0_base_index", Value::Int(0)),
            ("_xs_1_base_index", Value::Int(1)),
            ("w", n(w)),
            ("_all_bases", nodes(&[b0, b1])),
        ],
    );
    let n0 = b.getitem(af, 1);
    let n1 = b.getitem(af, 2);
    let g = b.output(&[n0, n1]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced]);
    assert_eq!(replaced_with(&p, n0), Some(ValueRef::Old(b0)));
    assert_eq!(replaced_with(&p, n1), Some(ValueRef::Old(b1)));
    let calls = inserted_calls(&p);
    assert_eq!(calls[0].1[0], old_list(&[b0, b1]));
}

#[test]
fn v2_written_list_of_slices_of_one_base() {
    let mut b = B::new();
    let w = b.input("w", Some(meta(&[8])));
    let buf = b.empty(&[4, 8]);
    let af = foreach_v2_two_row_slices(&mut b, buf, w, 2, 4);
    let nb = b.getitem(af, 1);
    let g = b.output(&[nb]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced]);
    assert_eq!(replaced_with(&p, nb), Some(ValueRef::Old(buf)));
    // Both views are regenerated on the base from the node's own kwargs.
    let slices: Vec<(NewId, Vec<PlanArg>)> = p
        .edits
        .iter()
        .filter_map(|e| match e {
            Edit::Insert {
                id,
                callee: Callee::Aten("aten::slice.Tensor"),
                args,
                ..
            } => Some((*id, args.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(slices.len(), 2);
    for (i, (_, args)) in slices.iter().enumerate() {
        assert_eq!(args[0], PlanArg::Ref(ValueRef::Old(buf)));
        assert_eq!(
            args[1],
            PlanArg::FromKwarg {
                node: af,
                key: format!("_xs_{i}_slice_dim")
            }
        );
    }
    let calls = inserted_calls(&p);
    assert_eq!(
        calls[0].1[0],
        PlanArg::List(vec![
            PlanArg::Ref(ValueRef::New(slices[0].0)),
            PlanArg::Ref(ValueRef::New(slices[1].0))
        ])
    );
}

#[test]
fn op_with_a_return_value_shifts_result_indices() {
    for v2 in [true, false] {
        let mut b = B::new();
        let (w, [xb, rb]) = two_empty_buffers(&mut b);
        let af = if v2 {
            b.v2(
                &add_rms_op(),
                vec![
                    ("_x_base_index", Value::Int(0)),
                    ("_res_base_index", Value::Int(1)),
                    ("w", n(w)),
                    ("_all_bases", nodes(&[xb, rb])),
                ],
            )
        } else {
            b.v1(
                &add_rms_op(),
                vec![("x", n(xb)), ("res", n(rb)), ("w", n(w))],
            )
        };
        let ret0 = b.getitem(af, 0);
        let nx = b.getitem(af, 1);
        let nr = b.getitem(af, 2);
        let g = b.output(&[ret0, nx, nr]);
        let p = planned(&g);
        assert_eq!(actions(&p), [Action::Reinplaced], "v2={v2}");
        let calls = inserted_calls(&p);
        assert_eq!(calls.len(), 1);
        let call = calls[0].0;
        assert_eq!(
            replaced_with(&p, ret0),
            Some(ValueRef::New(call)),
            "v2={v2}"
        );
        assert_eq!(replaced_with(&p, nx), Some(ValueRef::Old(xb)), "v2={v2}");
        assert_eq!(replaced_with(&p, nr), Some(ValueRef::Old(rb)), "v2={v2}");
        assert!(p.edits.iter().any(|e| matches!(
            e,
            Edit::Insert {
                meta: MetaSource::AfOutput { node, index: Some(0) },
                ..
            } if *node == af
        )));
    }
}
