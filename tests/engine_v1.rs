//! Engine rules, v1: `auto_functionalized` calls on views, the scatters
//! that write their new values back (removed when pure write-backs), and
//! arguments that share memory.
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
use fxrewrite::ir::{Graph, NodeId, Value};
use fxrewrite::plan::{PlanArg, ValueRef};
use fxrewrite::{Action, Form};

// ----- 5-8: v1 views, scatters, aliasing ---------------------------------------

#[test]
fn v1_rotary_on_split_qkv_removes_both_scatters() {
    let mut b = B::new();
    let qkv = split_qkv(&mut b);
    let Qkv { mm, q, k, .. } = qkv;
    let RotScatters { af, g1, g2, s1, s2 } = rot_v1_scattered(&mut b, &qkv, (4, 8));
    let r = b.call(&add_op(), vec![n(s2), n(s2)]);
    let g = b.output(&[r]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced], "{:#?}", p.report);
    let d = &p.report.decisions[0];
    assert_eq!((d.form, d.rule), (Form::V1, "reinplace_v1"));
    assert_eq!(d.scatters_removed, 2);
    assert!(d.clones.is_empty());
    assert_eq!(replaced_with(&p, s2), Some(ValueRef::Old(mm)));
    assert_eq!(replaced_with(&p, s1), Some(ValueRef::Old(mm)));
    assert!(erased(&p, s1) && erased(&p, s2) && erased(&p, af));
    assert_eq!(replaced_with(&p, g1), Some(ValueRef::Old(q)));
    assert_eq!(replaced_with(&p, g2), Some(ValueRef::Old(k)));
    let calls = inserted_calls(&p);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].1[0], PlanArg::Ref(ValueRef::Old(q)));
    assert_eq!(calls[0].1[1], PlanArg::Ref(ValueRef::Old(k)));
    assert_eq!(p.new_nodes, 1);
}

/// vLLM's layer with a symbolic token count, v1 form, the one line: the
/// rotary writes `q` and `k`, two `split` outputs of one `qkv` matmul, each
/// viewed as heads (`[s0, 2, 2]`, `s0` a SymInt node). They share a storage
/// but not one element (column ranges `[0, 4)` and `[4, 8)`); only the row
/// count is symbolic. Proven disjoint as with static shapes: rewritten in
/// place, not held back for sharing (issue 30).
#[test]
fn v1_rotary_on_head_views_of_split_qkv_with_a_symbolic_token_count_is_rewritten() {
    let (sym_size, view) = (sym_size_op(), view_op());
    // Symbolic layouts: every size and stride symbolic in the metadata.
    let symbolic = |rank: u32| symbolic_meta(rank, Some(0));
    let mut b = B::new();
    let a = b.input("a", Some(symbolic(2)));
    let wq = b.input("wqkv", Some(meta(&[8, 16])));
    let cos = b.input("cos", Some(symbolic(2)));
    let mm = b.call_meta(&mm_op(), vec![n(a), n(wq)], Some(symbolic(2)));
    let s0 = b.call(&sym_size, vec![n(a), Value::Int(0)]);
    let split = b.call(
        &split_with_sizes_op(),
        vec![n(mm), ints(&[4, 4, 8]), Value::Int(-1)],
    );
    let q = b.getitem(split, 0);
    let k = b.getitem(split, 1);
    let heads = |b: &mut B, t: NodeId| {
        b.call_meta(
            &view,
            vec![n(t), Value::List(vec![n(s0), Value::Int(2), Value::Int(2)])],
            Some(symbolic(3)),
        )
    };
    let qh = heads(&mut b, q);
    let kh = heads(&mut b, k);
    let af = b.v1(&rot_op(), vec![("q", n(qh)), ("k", n(kh)), ("cos", n(cos))]);
    let g1 = b.getitem(af, 1);
    let g2 = b.getitem(af, 2);
    let r = b.call(&add_op(), vec![n(g1), n(g2)]);
    let g = b.output(&[r]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced], "{:#?}", p.report);
    assert!(p.report.decisions[0].clones.is_empty());
    same_results(&g, &p).unwrap();
}

#[test]
fn v1_rotary_scatter_with_other_bounds_is_kept() {
    // The second scatter puts k's new value somewhere else than where k was
    // cut from: not a pure write-back, so no scatter can be dropped.
    let mut b = B::new();
    let qkv = split_qkv(&mut b);
    qkv.with_column_layouts(&mut b);
    let RotScatters { s1, s2, .. } = rot_v1_scattered(&mut b, &qkv, (8, 12));
    let g = b.output(&[s2]);
    let p = planned(&g);
    assert_eq!(p.report.decisions.len(), 1);
    let d = &p.report.decisions[0];
    assert_eq!(d.scatters_removed, 0);
    assert!(!erased(&p, s1) && !erased(&p, s2));
    // mm is read by the kept scatter after the call: the old value is needed.
    assert_eq!(d.action, Action::Cloned);
}

#[test]
fn v1_op_on_each_row_through_select_scatter_chains() {
    // for i in 0..2: op(x[i]) on an intermediate buffer, functionalised as
    // select -> auto_functionalized -> select_scatter.
    let mut b = B::new();
    let x = b.input("x", Some(meta(&[8])));
    let w = b.input("w", Some(meta(&[8])));
    let buf = b.empty(&[2, 8]);
    let s0 = b.call(&select_op(), vec![n(buf), Value::Int(0), Value::Int(0)]);
    let af0 = b.v1(&rms_op(), vec![("out", n(s0)), ("x", n(x)), ("w", n(w))]);
    let g0 = b.getitem(af0, 1);
    let sc0 = b.call_meta(
        &select_scatter_op(),
        vec![n(buf), n(g0), Value::Int(0), Value::Int(0)],
        Some(meta(&[2, 8])),
    );
    let s1 = b.call(&select_op(), vec![n(sc0), Value::Int(0), Value::Int(1)]);
    let af1 = b.v1(&rms_op(), vec![("out", n(s1)), ("x", n(x)), ("w", n(w))]);
    let g1 = b.getitem(af1, 1);
    let sc1 = b.call_meta(
        &select_scatter_op(),
        vec![n(sc0), n(g1), Value::Int(0), Value::Int(1)],
        Some(meta(&[2, 8])),
    );
    let g = b.output(&[sc1]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced, Action::Reinplaced]);
    let removed: Vec<usize> = p
        .report
        .decisions
        .iter()
        .map(|d| d.scatters_removed)
        .collect();
    assert_eq!(removed, [1, 1]);
    assert_eq!(replaced_with(&p, sc0), Some(ValueRef::Old(buf)));
    assert_eq!(replaced_with(&p, sc1), Some(ValueRef::Old(buf)));
    assert!(erased(&p, sc0) && erased(&p, sc1));
    let calls = inserted_calls(&p);
    assert_eq!(calls[0].1[0], PlanArg::Ref(ValueRef::Old(s0)));
    assert_eq!(calls[1].1[0], PlanArg::Ref(ValueRef::Old(s1)));
    assert_eq!(inserted_aten(&p, "aten::clone.default"), 0);
}

/// The pre pass's record of alias groups, as the encoder passes it.
fn record(groups: &[&[&str]]) -> (&'static str, Value) {
    (
        fxrewrite::forms::call::ALIAS_GROUPS,
        Value::List(
            groups
                .iter()
                .map(|g| Value::List(g.iter().map(|s| Value::Str((*s).into())).collect()))
                .collect(),
        ),
    )
}

/// `rot(q=sl, k=sl)`: one slice of a matmul result (or, with `input`, of a
/// graph input the graph never writes back) in both written slots, with the
/// pre pass's record `groups`.
fn two_written_on_one_slice(groups: Option<&[&[&str]]>, input: bool) -> (Graph, [NodeId; 3]) {
    let mut b = B::new();
    let a = b.input("a", Some(meta(&[3, 8])));
    let wq = b.input("wqkv", Some(meta(&[8, 16])));
    let cos = b.input("cos", Some(meta(&[3, 4])));
    let x = b.input("x", Some(meta(&[3, 16])));
    let mm = if input {
        x
    } else {
        b.call_meta(&mm_op(), vec![n(a), n(wq)], Some(meta(&[3, 16])))
    };
    let sl = b.call_meta(
        &slice_op(),
        vec![n(mm), Value::Int(1), Value::Int(0), Value::Int(4)],
        Some(strided_meta(&[3, 4], &[16, 1], 0)),
    );
    let mut kwargs = vec![("q", n(sl)), ("k", n(sl)), ("cos", n(cos))];
    kwargs.extend(groups.map(record));
    let af = b.v1(&rot_op(), kwargs);
    let g1 = b.getitem(af, 1);
    let g2 = b.getitem(af, 2);
    (b.output(&[g1, g2]), [sl, g1, g2])
}

#[test]
fn v1_two_written_args_on_one_slice_need_the_record() {
    // No record: the sharing could be the user's or a deleted clone's.
    let (g, _) = two_written_on_one_slice(None, false);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Left]);
    let reason = p.report.decisions[0].reason.as_deref().unwrap();
    assert!(
        reason.starts_with("arguments `q` and `k` share memory"),
        "{reason}"
    );
    // The program passed one tensor twice: in place, both results the slice.
    let (g, [sl, g1, g2]) = two_written_on_one_slice(Some(&[&["q", "k"], &["cos"]]), false);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Reinplaced]);
    assert_eq!(replaced_with(&p, g1), Some(ValueRef::Old(sl)));
    assert_eq!(replaced_with(&p, g2), Some(ValueRef::Old(sl)));
    // The program passed a tensor and its clone: `k` gets a memory of its own.
    let (g, [sl, g1, g2]) = two_written_on_one_slice(Some(&[&["q"], &["k"], &["cos"]]), false);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned]);
    let d = &p.report.decisions[0];
    assert_eq!(d.clones.len(), 1);
    assert_eq!(d.clones[0].arg, "k");
    assert!(
        d.clones[0].reason.starts_with("written `q` shares memory with it in the graph as it arrives, but did not in the program"),
        "{}",
        d.clones[0].reason
    );
    assert_eq!(inserted_aten(&p, "aten::clone.default"), 1);
    assert_eq!(replaced_with(&p, g1), Some(ValueRef::Old(sl)));
    assert!(matches!(replaced_with(&p, g2), Some(ValueRef::New(_))));
}

#[test]
fn v1_two_written_args_on_one_memory_that_must_be_cloned_share_one_clone() {
    // A graph input never written back cannot be written: one copy serves
    // both slots, so the kernel still sees them as one memory.
    let (g, [_, g1, g2]) = two_written_on_one_slice(Some(&[&["q", "k"], &["cos"]]), true);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned]);
    let d = &p.report.decisions[0];
    assert_eq!(d.clones.len(), 1, "{:?}", d.clones);
    assert!(
        d.clones[0].reason.contains("one copy also serves `k`"),
        "{}",
        d.clones[0].reason
    );
    assert_eq!(inserted_aten(&p, "aten::clone.default"), 1);
    let call = inserted_calls(&p)[0];
    assert_eq!(call.1[0], call.1[1], "q and k are one value: {:?}", call.1);
    assert_eq!(replaced_with(&p, g1), replaced_with(&p, g2));
}

/// `rms(out=mm, x=mm)` on a matmul result, v2 or v1, with the record `groups`.
fn written_and_read_on_one_buffer(v2: bool, groups: Option<&[&[&str]]>, input: bool) -> Graph {
    let mut b = B::new();
    let a = b.input("a", Some(meta(&[4, 8])));
    let m = b.input("m", Some(meta(&[8, 8])));
    let w = b.input("w", Some(meta(&[8])));
    let x = b.input("x", Some(meta(&[4, 8])));
    let buf = if input {
        x
    } else {
        b.call_meta(&mm_op(), vec![n(a), n(m)], Some(meta(&[4, 8])))
    };
    let mut kwargs = if v2 {
        vec![
            ("_out_base_index", Value::Int(0)),
            ("x", n(buf)),
            ("w", n(w)),
            ("_all_bases", nodes(&[buf])),
        ]
    } else {
        vec![("out", n(buf)), ("x", n(buf)), ("w", n(w))]
    };
    kwargs.extend(groups.map(record));
    let af = if v2 {
        b.v2(&rms_op(), kwargs)
    } else {
        b.v1(&rms_op(), kwargs)
    };
    let g1 = b.getitem(af, 1);
    b.output(&[g1])
}

#[test]
fn written_buffer_also_read_keeps_or_splits_the_sharing_as_recorded() {
    for v2 in [true, false] {
        let g = written_and_read_on_one_buffer(v2, None, false);
        let p = planned(&g);
        assert_eq!(actions(&p), [Action::Left], "v2={v2}");
        // The user passed one tensor twice: in place.
        let g = written_and_read_on_one_buffer(v2, Some(&[&["out", "x"], &["w"]]), false);
        assert_eq!(actions(&planned(&g)), [Action::Reinplaced], "v2={v2}");
        // A clone was deleted: split.
        let g = written_and_read_on_one_buffer(v2, Some(&[&["out"], &["x"], &["w"]]), false);
        let p = planned(&g);
        assert_eq!(actions(&p), [Action::Cloned], "v2={v2}");
        let note = &p.report.decisions[0].clones[0];
        assert!(
            note.reason.starts_with("read argument `x` shares memory"),
            "v2={v2}: {}",
            note.reason
        );
        assert_eq!(inserted_aten(&p, "aten::clone.default"), 1);
        // Shared, on an input that must not change: one copy for both.
        let g = written_and_read_on_one_buffer(v2, Some(&[&["out", "x"], &["w"]]), true);
        let p = planned(&g);
        assert_eq!(actions(&p), [Action::Cloned], "v2={v2}");
        assert_eq!(inserted_aten(&p, "aten::clone.default"), 1, "v2={v2}");
        let call = inserted_calls(&p)[0];
        let written = match (&call.1[0], v2) {
            (PlanArg::Ref(r), _) => *r,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            call.1[1],
            PlanArg::Ref(written),
            "v2={v2}: x is made from the copy"
        );
    }
}

#[test]
fn later_view_of_the_old_value_read_by_the_output_forces_a_clone() {
    let mut b = B::new();
    let MmBuf { a, w, buf, .. } = mm_buffer(&mut b);
    let (_, g1) = rms_v2_result(&mut b, buf, a, w);
    // A view of the old value taken after the call: moving the view alone
    // would not help, its reader (the output) still comes after the call.
    let v = b.call(
        &slice_op(),
        vec![n(buf), Value::Int(1), Value::Int(4), Value::Int(8)],
    );
    let g = b.output(&[g1, v]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned]);
    assert_eq!(
        p.report.decisions[0].clones[0].reader.as_deref(),
        Some("output")
    );
    assert!(moves(&p).is_empty());
}

/// A v1 call writes `buf` through a `view` (`[4, 8]` as `[2, 16]`, the same
/// elements row-major) and `buf`'s old value is read after it: the write
/// goes to a copy. The reference interpreter runs the view (it aliases
/// `buf`'s storage), so `planned` compares the values: writing `buf` in
/// place would change the old value the output reads.
#[test]
fn v1_write_through_a_view_of_a_buffer_read_later_is_cloned() {
    let mut b = B::new();
    let MmBuf { a, w, buf, .. } = mm_buffer(&mut b);
    let vw = b.call_meta(
        &view_op(),
        vec![n(buf), ints(&[2, 16])],
        Some(meta(&[2, 16])),
    );
    let af = b.v1(&rms_op(), vec![("out", n(vw)), ("x", n(a)), ("w", n(w))]);
    let g1 = b.getitem(af, 1);
    let g = b.output(&[g1, buf]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned], "{}", dump(&g, &p));
}

/// A v1 call writes an `expand` of `buf`'s first row (`[1, 8]` as `[4, 8]`,
/// row stride 0: every row of the view is that one row), and `buf`'s old
/// value is read after it. The interpreter writes the view's rows in turn
/// into the one storage row, as torch's kernel would.
#[test]
fn v1_write_through_an_expanded_row_of_a_buffer_read_later() {
    let mut b = B::new();
    let MmBuf { a, w, buf, .. } = mm_buffer(&mut b);
    let row = b.call_meta(
        &slice_op(),
        vec![n(buf), Value::Int(0), Value::Int(0), Value::Int(1)],
        Some(strided_meta(&[1, 8], &[8, 1], 0)),
    );
    let ex = b.call_meta(
        &expand_op(),
        vec![n(row), ints(&[4, 8])],
        Some(strided_meta(&[4, 8], &[0, 1], 0)),
    );
    let af = b.v1(&rms_op(), vec![("out", n(ex)), ("x", n(a)), ("w", n(w))]);
    let g1 = b.getitem(af, 1);
    let g = b.output(&[g1, buf]);
    let p = planned(&g);
    assert_eq!(actions(&p), [Action::Cloned], "{}", dump(&g, &p));
}
